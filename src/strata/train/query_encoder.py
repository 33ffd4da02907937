"""Query-side domain adaptation of the dense encoder (beyond the paper; #19 item 4, GPL-style but asymmetric).

The corpus's own LLM-free queries (titles, inverse-cloze sentences, section headings: `strata.train.pairs`) teach a
copy of the encoder to embed a query near the vector of the paper it came from, against every other paper of the
corpus at once (a softmax over all paper vectors, so every step sees the whole corpus as negatives). Only the query
side learns: the paper and chunk vectors stay as indexed, so nothing is re-embedded, and the dense index, its
identity and every other reader of it stay valid. Full GPL-style training of both sides, or a cross-encoder, costs
~16 s (bi-encoder, 32 queries) or ~3 s (cross-encoder, 4 queries) a step on 2 cores at passage length, because
every step re-reads passages; a query is ~20 word pieces, so this side learns from 64 queries in ~3 s.

Papers are represented by the mean of their chunk vectors (Relate's paper vectors, no embedding), the target a
query from anywhere in the paper can reach. Held-out papers' queries (`rerank.train_validation_share`) decide:
validation MRR@10 of the dense paper ranking is checked `query_encoder_checks` times, the best check's weights are
kept, and nothing is saved when no check beats the unadapted encoder, so adapting can only help on validation.
The model is written beside its destination and moved into place whole, so an interrupted run leaves the previous
encoder (or none), never half of one.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from strata.config import RerankSettings
from strata.corpus import Corpus
from strata.progress import Progress, tell
from strata.rerank.texts import PaperTexts
from strata.train.cross_encoder import MIN_PAPERS, Log, install, paper_vectors, stderr_line, warmup_then_decay
from strata.train.pairs import TrainingQuery, corpus_queries, count_by_source, split_by_paper

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer


class Check(BaseModel):
    step: int
    loss: float = Field(description="Mean training loss since the previous check")
    validation: float = Field(description="Validation MRR@10 of the dense paper ranking")


class QueryEncoderReport(BaseModel):
    model_dir: str | None = Field(description="Where the adapted encoder was saved; None when it did not help")
    queries: dict[str, int] = Field(description="Training queries per source")
    validation_queries: int
    base_validation: float = Field(description="Validation MRR@10 with the unadapted encoder")
    checks: list[Check]
    best_step: int = Field(description="The step whose weights were kept (0: none beat the unadapted encoder)")
    seconds: float

    def summary(self) -> str:
        best = max((check.validation for check in self.checks), default=self.base_validation)
        where = f"saved to {self.model_dir}" if self.model_dir else "not saved (no check beat the unadapted encoder)"
        return (
            f"query encoder {where}: queries {self.queries}, {self.checks[-1].step if self.checks else 0} steps; "
            f"validation MRR@10 ({self.validation_queries} queries): unadapted {self.base_validation:.4f}, best "
            f"{best:.4f} at step {self.best_step}; {self.seconds:.0f}s. Search with it: "
            f"--index.embedding.query_model {self.model_dir or '(none)'}"
        )


def query_encoder_dir(corpus: Corpus) -> Path:
    return corpus.settings.rerank.query_encoder_dir or Path(corpus.settings.store.home) / "index" / "query-encoder"


def mrr_at_10(queries: np.ndarray, papers: np.ndarray, targets: Sequence[int]) -> float:
    """Mean reciprocal rank (cut at 10) of each query's own paper among all papers, by cosine; a tie ranks it last
    among the tied, so an encoder that gives every paper one score cannot look good."""
    scores = queries @ papers.T
    own = scores[np.arange(len(targets)), list(targets)]
    ranks = (scores >= own[:, None]).sum(axis=1)
    return float(np.mean(np.where(ranks <= 10, 1.0 / ranks, 0.0)))


def train_query_encoder(corpus: Corpus, log: Log = stderr_line, progress: Progress | None = None) -> QueryEncoderReport:
    import torch
    from sentence_transformers import SentenceTransformer

    settings, rerank = corpus.settings, corpus.settings.rerank
    started = time.perf_counter()
    if not settings.index.dense:
        raise ValueError("train-query-encoder adapts the dense encoder: this corpus has no dense index (index.dense)")
    paper_ids = corpus.store.paper_ids()
    if len(paper_ids) < MIN_PAPERS:
        raise ValueError(f"{len(paper_ids)} papers under {settings.store.home}: adapting the query encoder needs at "
                         f"least {MIN_PAPERS}; search keeps the unadapted encoder")
    vectors = paper_vectors(corpus)
    row = {paper_id: index for index, paper_id in enumerate(vectors.ids)}
    queries = [q for q in corpus_queries(PaperTexts(corpus.store), paper_ids, rerank) if q.paper_id in row]
    train, held = split_by_paper(queries, rerank.train_validation_share, rerank.train_seed)
    held = random.Random(rerank.train_seed).sample(held, min(len(held), rerank.train_validation_queries))
    if not train or not held:
        raise ValueError("too few training queries came from the corpus to adapt the query encoder")
    log(f"{len(train)} training and {len(held)} validation queries {count_by_source(queries)}")

    torch.manual_seed(rerank.train_seed)
    # A fresh copy to train: the process-wide cached model (`Embedder.query_model`) keeps serving searches.
    model = SentenceTransformer(str(corpus.embedder.query_path), device="cpu", local_files_only=True)
    papers = torch.from_numpy(np.ascontiguousarray(vectors.vectors, dtype=np.float32))
    held_targets = [row[query.paper_id] for query in held]

    def validate() -> float:
        model.eval()
        with torch.no_grad():
            # The query side, as search embeds a query (`Embedder.embed_queries`): a model's query prompt applies.
            embedded = model.encode_query([query.query for query in held], normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False)
        model.train()
        return mrr_at_10(embedded, vectors.vectors, held_targets)

    base = validate()
    log(f"validation MRR@10 of the unadapted encoder: {base:.4f}")
    output = query_encoder_dir(corpus)
    staged = output.with_name(output.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    checks = fit(model, train, row, papers, rerank, validate, staged, log, progress)
    best = max(checks, key=lambda check: (check.validation, -check.step), default=None)
    kept = best is not None and best.validation > base
    if kept:
        install(staged, output)
    else:
        shutil.rmtree(staged, ignore_errors=True)
        log("no check beat the unadapted encoder on validation: nothing saved, search keeps it")
    return QueryEncoderReport(
        model_dir=str(output) if kept else None, queries=count_by_source(train), validation_queries=len(held),
        base_validation=base, checks=checks, best_step=best.step if kept and best else 0,
        seconds=time.perf_counter() - started,
    )


def fit(
    model: SentenceTransformer,
    train: Sequence[TrainingQuery],
    row: dict[str, int],
    papers: torch.Tensor,
    rerank: RerankSettings,
    validate: Callable[[], float],
    staged: Path,
    log: Log,
    progress: Progress | None,
) -> list[Check]:
    """`query_encoder_steps` steps of `query_encoder_batch` queries, each a softmax over all papers at
    `query_encoder_temperature`; the weights of the best validation check so far are saved to `staged`."""
    import torch

    steps, batch = rerank.query_encoder_steps, rerank.query_encoder_batch
    at = check_steps(steps, rerank.query_encoder_checks)
    optimizer = torch.optim.AdamW(model.parameters(), lr=rerank.train_learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_then_decay(step, steps))
    rng = random.Random(rerank.train_seed)
    order: list[TrainingQuery] = []
    losses: list[float] = []
    checks: list[Check] = []
    model.train()
    for step in range(1, steps + 1):
        if len(order) < batch:
            order += rng.sample(list(train), len(train))  # another shuffled pass over the queries
        chosen, order = order[:batch], order[batch:]
        # With the query prompt, as `encode_query` embeds them at validation and search time.
        features = model.preprocess([query.query for query in chosen], prompt=model.prompts.get("query") or None)
        embedded = torch.nn.functional.normalize(model(features)["sentence_embedding"], dim=-1)
        logits = embedded @ papers.T / rerank.query_encoder_temperature
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([row[query.paper_id] for query in chosen]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        recent = float(np.mean(losses[checks[-1].step if checks else 0 :]))  # since the previous check
        tell(progress, "query encoder steps", step, steps, f"loss {recent:.3f}")
        if step in at:
            checks.append(Check(step=step, loss=recent, validation=validate()))
            log(f"step {step}: loss {checks[-1].loss:.3f}, validation MRR@10 {checks[-1].validation:.4f}")
            if all(checks[-1].validation > check.validation for check in checks[:-1]):  # the first best is kept
                shutil.rmtree(staged, ignore_errors=True)
                model.save(str(staged))
    return checks


def check_steps(steps: int, checks: int) -> set[int]:
    """The steps after which validation runs: `checks` of them (fewer only with fewer steps), evenly spread, the last
    at the end. A fixed interval of steps // checks misses the end when it does not divide, and the end then adds a
    check."""
    return {-(-number * steps // checks) for number in range(1, checks + 1)}
