"""A cross-encoder reranker, and its training from the packaged MiniLM on synthetic queries over the user's corpus
(InPars/GPL style: the LLM writes a query per sampled passage, hybrid search mines hard negatives)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, Field

from strata.config import Settings
from strata.documents.model import Ranking
from strata.index.embedder import TORCH_LOCK, resolve_model_path
from strata.llm import LLMClient, LLMError, prompt_registry
from strata.rerank.rerankers import reordered
from strata.rerank.texts import PaperTexts

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

    from strata.store import AnyStore

BASE_MODEL = "packaged:all-MiniLM-L6-v2"


class Searcher(Protocol):
    """The first stage that mines hard negatives (a HybridSearcher; rerank does not import the retrieve stage)."""

    def search(self, query: str, k: int | None = None) -> Ranking: ...


class SyntheticQuery(BaseModel):
    query: str = Field(max_length=160, description="A short search query the passage answers")


class TrainingPair(BaseModel):
    query: str
    passage: str
    label: float = Field(description="1 for the passage the query was written from, 0 for a mined negative")


class TrainingReport(BaseModel):
    model_dir: str
    queries: int = Field(description="Synthetic queries kept")
    failed_queries: int = Field(description="Passages whose query generation gave no usable answer")
    pairs: int
    epochs: int
    steps: int
    generation_seconds: float
    training_seconds: float
    final_loss: float


def trained_model_dir(settings: Settings) -> Path:
    return settings.rerank.cross_encoder_dir or Path(settings.store.home) / "rerank" / "cross-encoder"


def cross_encoder_source(settings: Settings) -> str | None:
    """The cross-encoder to load: the configured one, else the trained one under the store, else None."""
    if settings.rerank.cross_encoder_model:
        return settings.rerank.cross_encoder_model
    trained = trained_model_dir(settings)
    return str(trained) if (trained / "config.json").is_file() else None


def load_cross_encoder(source: str) -> CrossEncoder:
    # Offline before the import: a named hub model must already be in the local cache; nothing is downloaded.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import CrossEncoder

    return CrossEncoder(source, device="cpu", local_files_only=True)


class CrossEncoderReranker:
    """Rescores the top `cross_encoder_depth` candidates on (query, title + passage); ties keep first-stage order."""

    name = "cross-encoder"

    def __init__(self, model: CrossEncoder, texts: PaperTexts, depth: int, passage_words: int, batch: int) -> None:
        self.model, self.texts = model, texts
        self.depth, self.passage_words, self.batch = depth, passage_words, batch

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        top = candidates.candidates[: self.depth]
        if not top:
            return reordered(candidates, [], self.name)
        passages = [self.texts.passage(candidate.paper_id, self.passage_words) for candidate in top]
        with TORCH_LOCK:  # concurrent requests would oversubscribe torch's process-wide threads
            scores = self.model.predict([(query, passage) for passage in passages], batch_size=self.batch)
        order = sorted(range(len(top)), key=lambda index: (-float(scores[index]), index))
        return reordered(candidates, [top[index] for index in order], self.name)


def query_groups(pairs: Sequence[TrainingPair]) -> list[list[TrainingPair]]:
    """Pairs as `synthetic_pairs` writes them (each query's positive, then its negatives) in one group per query;
    a query without a negative teaches nothing and is left out."""
    groups: list[list[TrainingPair]] = []
    for pair in pairs:
        if pair.label > 0 or not groups:
            groups.append([pair])
        else:
            groups[-1].append(pair)
    return [group for group in groups if len(group) > 1 and group[0].label > 0]


def synthetic_pairs(
    settings: Settings, store: AnyStore, searcher: Searcher, client: LLMClient
) -> tuple[list[TrainingPair], int, int]:
    """(pairs, queries kept, failed generations): one LLM query per sampled paper passage, its passage as the
    positive and `train_negatives` papers drawn from the query's hybrid-search hits (other papers) as negatives."""
    rerank = settings.rerank
    texts = PaperTexts(store)
    rng = random.Random(rerank.train_seed)
    paper_ids = store.paper_ids()
    sampled = sorted(rng.sample(paper_ids, min(rerank.train_passages, len(paper_ids))))
    prompts = prompt_registry()
    pairs: list[TrainingPair] = []
    kept = failed = 0
    for paper_id in sampled:
        positive = texts.passage(paper_id, rerank.passage_words)
        try:
            answer = client.complete(prompts.render("rerank_query_gen", passage=positive), max_tokens=48)
        except LLMError:
            failed += 1
            continue
        assert isinstance(answer, SyntheticQuery)
        query = answer.query.strip()
        if not query:
            failed += 1
            continue
        hits = searcher.search(query, k=rerank.train_negative_depth)
        others = [candidate.paper_id for candidate in hits.candidates if candidate.paper_id != paper_id]
        negatives = rng.sample(others, min(rerank.train_negatives, len(others)))
        kept += 1
        pairs.append(TrainingPair(query=query, passage=positive, label=1.0))
        pairs += [
            TrainingPair(query=query, passage=texts.passage(other, rerank.passage_words), label=0.0)
            for other in negatives
        ]
    return pairs, kept, failed


def fit_cross_encoder(pairs: Sequence[TrainingPair], settings: Settings, output: Path) -> tuple[int, float]:
    """(steps, mean loss of the last epoch): fine-tunes MiniLM with a fresh one-logit head on the pairs.

    The loss is localized contrastive estimation (Gao et al., 2021): each query's positive against its own mined
    negatives, a softmax over that group. Pointwise BCE on a few hundred pairs collapsed here to the label prior
    (every score ~0.25, training AUC ~0.6); a group softmax cannot be lowered by a constant score.
    A short hand-written loop rather than CrossEncoderTrainer, which needs `datasets` and `accelerate` (not
    installed) for what is here a few hundred pairs.
    """
    import torch
    from sentence_transformers import CrossEncoder

    rerank = settings.rerank
    torch.manual_seed(rerank.train_seed)
    model = CrossEncoder(
        str(resolve_model_path(BASE_MODEL)), num_labels=1, max_length=rerank.train_max_length, device="cpu"
    )
    network, tokenizer = model.model, model.tokenizer
    optimizer = torch.optim.AdamW(network.parameters(), lr=rerank.train_learning_rate)
    groups = query_groups(pairs)
    per_step = max(1, rerank.train_batch_size // max(len(group) for group in groups))
    rng = random.Random(rerank.train_seed)
    steps, epoch_losses = 0, [0.0]
    network.train()
    for _ in range(rerank.train_epochs):
        rng.shuffle(groups)
        epoch_losses = []
        for start in range(0, len(groups), per_step):
            batch = groups[start : start + per_step]
            flat = [pair for group in batch for pair in group]
            features = tokenizer(
                [pair.query for pair in flat],
                [pair.passage for pair in flat],
                padding=True,
                truncation="longest_first",
                max_length=rerank.train_max_length,
                return_tensors="pt",
            )
            logits = network(**features).logits.view(-1)
            # The positive leads each group: its negative log share of the group's softmax.
            losses = [-torch.log_softmax(scores, dim=0)[0] for scores in logits.split([len(g) for g in batch])]
            loss = torch.stack(losses).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_losses.append(loss.item())
            steps += 1
    network.eval()
    output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(output))
    return steps, sum(epoch_losses) / max(len(epoch_losses), 1)


def train_cross_encoder(settings: Settings, store: AnyStore, searcher: Searcher, client: LLMClient) -> TrainingReport:
    """Generate synthetic pairs over the corpus in `store` and train; saves to `trained_model_dir(settings)`, where
    the default reranker finds it."""
    output = trained_model_dir(settings)
    started = time.perf_counter()
    if not store.paper_ids():
        raise ValueError(f"no papers in the corpus under {settings.store.home}; ingest some first")
    pairs, kept, failed = synthetic_pairs(settings, store, searcher, client)
    generated = time.perf_counter()
    if not pairs:
        raise ValueError("no synthetic training pairs could be generated (every query generation failed)")
    steps, loss = fit_cross_encoder(pairs, settings, output)
    (output / "training_pairs.jsonl").write_text("".join(pair.model_dump_json() + "\n" for pair in pairs))
    return TrainingReport(
        model_dir=str(output),
        queries=kept,
        failed_queries=failed,
        pairs=len(pairs),
        epochs=settings.rerank.train_epochs,
        steps=steps,
        generation_seconds=generated - started,
        training_seconds=time.perf_counter() - generated,
        final_loss=loss,
    )
