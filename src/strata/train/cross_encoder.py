"""Training the cross-encoder reranker from the packaged MiniLM on queries over the user's own corpus (titles,
inverse cloze, LLM-written queries: `strata.train.pairs`), with a held-out validation split that stops training,
keeps the best epoch and chooses the fusion with the first stage (ranks or scores, and the weight:
`strata.rerank.fusion`)."""

from __future__ import annotations

import functools
import random
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from strata.config import Settings
from strata.corpus import Corpus
from strata.documents.model import Ranking
from strata.encoders.cross_encoder import BASE_MODEL
from strata.encoders.embedder import TORCH_LOCK, resolve_model_path, torch_threads
from strata.eval.retrieval import order_ndcg
from strata.llm import LLMClient
from strata.progress import Progress, tell
from strata.relate.expand import paper_vectors as relate_paper_vectors
from strata.relate.signals import PaperVectors
from strata.rerank.base import Reranker, ScoringReranker
from strata.rerank.crossencoder import FUSION_FILE, CrossEncoderReranker, trained_model_dir
from strata.rerank.fusion import FusionChoice, choose_fusion, fuse_scores
from strata.rerank.texts import PaperTexts
from strata.train.pairs import (
    Similarity,
    TrainingPair,
    TrainingQuery,
    corpus_queries,
    count_by_source,
    llm_queries,
    mined_pairs,
    sampled_papers,
    split_by_paper,
    written_validation,
)

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

Log = Callable[[str], None]
MIN_PAPERS = 50  # fewer papers give too few queries and negatives to learn from; the first stage is kept instead


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class EpochReport(BaseModel):
    epoch: int
    steps: int = Field(description="Optimisation steps so far")
    loss: float = Field(description="Mean training loss of the epoch")
    validation: float | None = Field(
        description="Validation nDCG@10 of the cross-encoder alone, reranking the first stage; None: not validated"
    )


class TrainingReport(BaseModel):
    model_dir: str
    queries: dict[str, int] = Field(description="Training queries per source (title, inverse-cloze, section, llm)")
    failed_llm_queries: int = Field(description="Passages whose LLM query generation gave no usable answer")
    pairs: dict[str, int] = Field(description="Training pairs (positives and mined negatives) per source")
    dropped_false_negatives: int = Field(description="Mined negatives the dense encoder scored above the positive")
    validation_queries: dict[str, int] = Field(
        description="Held-out queries per source (their papers unseen in training, not even as negatives)"
    )
    first_stage_validation: float = Field(description="Validation nDCG@10 of the first stage alone")
    epochs: list[EpochReport]
    best_epoch: int = Field(description="The epoch whose model was kept (best validation nDCG@10)")
    fusion: FusionChoice = Field(description="The fusion weight chosen on validation, with its curve")
    generation_seconds: float = Field(description="Building queries and mining negatives")
    training_seconds: float = Field(description="Training and validation")

    @property
    def steps(self) -> int:
        return self.epochs[-1].steps if self.epochs else 0

    def summary(self) -> str:
        kept = self.epochs[self.best_epoch - 1].validation if self.epochs else None
        shown = "not validated" if kept is None else f"{kept:.4f}"
        return (
            f"cross-encoder saved to {self.model_dir}: queries {self.queries}, pairs {sum(self.pairs.values())}, "
            f"{self.steps} steps; validation nDCG@10 ({sum(self.validation_queries.values())} queries): first stage "
            f"{self.first_stage_validation:.4f}, cross-encoder {shown} (epoch {self.best_epoch}); "
            f"{self.fusion.verdict()}; generation "
            f"{self.generation_seconds:.0f}s, training {self.training_seconds:.0f}s"
        )




def query_groups(pairs: Sequence[TrainingPair]) -> list[list[TrainingPair]]:
    """Pairs as `mined_pairs` writes them (each query's positive, then its negatives) in one group per query;
    a query without a negative teaches nothing and is left out."""
    groups: list[list[TrainingPair]] = []
    for pair in pairs:
        if pair.label > 0 or not groups:
            groups.append([pair])
        else:
            groups[-1].append(pair)
    return [group for group in groups if len(group) > 1 and group[0].label > 0]


class Validation:
    """Validation queries with their relevant papers, and their first-stage rankings."""

    def __init__(
        self, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], corpus: Corpus, depth: int
    ) -> None:
        self.queries, self.qrels = dict(queries), {qid: dict(qrels[qid]) for qid in queries}
        self.first = {qid: corpus.searcher.search(text, k=depth) for qid, text in self.queries.items()}

    @classmethod
    def held_out(cls, queries: Sequence[TrainingQuery], corpus: Corpus, depth: int) -> Validation:
        """Held-out training queries, each with its source paper as the one relevant paper."""
        texts = {str(number): query.query for number, query in enumerate(queries)}
        qrels = {str(number): {query.paper_id: 1} for number, query in enumerate(queries)}
        return cls(texts, qrels, corpus, depth)

    def ndcg(self, runs: Mapping[str, Sequence[str]]) -> float:
        return float(np.mean(list(self.query_ndcg(runs).values())))

    def query_ndcg(self, runs: Mapping[str, Sequence[str]]) -> dict[str, float]:
        """nDCG@10 of each validation query."""
        return order_ndcg(runs, self.qrels)

    def rerank(self, reranker: Reranker, progress: Progress | None = None) -> dict[str, Ranking]:
        reranked = {}
        for number, (qid, ranking) in enumerate(self.first.items()):
            tell(progress, f"{reranker.name} on validation queries", number, len(self.first))
            reranked[qid] = reranker.rank(self.queries[qid], ranking)
        return reranked

    def scores(self, reranker: ScoringReranker) -> dict[str, dict[str, float]]:
        """The reranker's scores of each validation query's first-stage candidates."""
        return {qid: reranker.scores(self.queries[qid], ranking) for qid, ranking in self.first.items()}


def fit_cross_encoder(
    pairs: Sequence[TrainingPair],
    settings: Settings,
    output: Path,
    validate: Callable[[CrossEncoder], float] | None = None,
    log: Log = stderr_line,
    complete: Callable[[Path], None] | None = None,
    progress: Progress | None = None,
) -> list[EpochReport]:
    """Fine-tunes MiniLM with a fresh one-logit head on the pairs, one report per epoch; with `validate`, stops after
    `train_patience` epochs without a better validation score and leaves the best epoch's model in `output`.

    The model is written to a sibling folder, where `complete` adds what belongs beside it (the fusion weight), and
    only then swapped into place: an interrupted run leaves the previous model, never a half-finished one.
    The loss is localized contrastive estimation (Gao et al., 2021): each query's positive against its own mined
    negatives, a softmax over that group. Pointwise BCE on a few hundred pairs collapsed here to the label prior
    (every score ~0.25, training AUC ~0.6); a group softmax cannot be lowered by a constant score.
    A short hand-written loop rather than CrossEncoderTrainer, which needs `datasets` and `accelerate` (not
    installed).
    """
    import torch
    from sentence_transformers import CrossEncoder

    rerank = settings.rerank
    torch.manual_seed(rerank.train_seed)
    # Raw logits, saved as the model's activation: the group softmax below ignores a shift common to a group, so the
    # logits' level is arbitrary, and a sigmoid over them squeezes the top candidates together wherever training
    # happened to put it (SciFact: the median top score was a sigmoid 0.97; score fusion chosen on 809 train claims
    # scored the same either way, nDCG@10 0.7353 on logits vs 0.7357).
    model = CrossEncoder(str(resolve_model_path(BASE_MODEL)), num_labels=1, max_length=rerank.train_max_length,
                         device="cpu", activation_fn=torch.nn.Identity())
    network, tokenizer = model.model, model.tokenizer
    optimizer = torch.optim.AdamW(network.parameters(), lr=rerank.train_learning_rate)
    groups = query_groups(pairs)
    if not groups:
        raise ValueError("no training query kept a negative (every mined negative was filtered out); nothing to learn")
    per_step = max(1, rerank.train_batch_size // max(len(group) for group in groups))
    # Linear warm-up over the first tenth, then linear decay: the one-logit head starts random, and full-rate steps on
    # its first gradients disturb the pretrained encoder (BERT's schedule).
    total = rerank.train_epochs * -(-len(groups) // per_step)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(warmup_then_decay, total=total))
    rng = random.Random(rerank.train_seed)
    staged = output.with_name(output.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    reports: list[EpochReport] = []
    steps, started = 0, time.perf_counter()
    with TORCH_LOCK:  # mining negatives embedded queries, which left torch on their own (one) thread
        torch_threads(rerank.cross_encoder_threads)
    for epoch in range(1, rerank.train_epochs + 1):
        rng.shuffle(groups)
        losses = []
        network.train()
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
            group_losses = [-torch.log_softmax(scores, dim=0)[0] for scores in logits.split([len(g) for g in batch])]
            loss = torch.stack(group_losses).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            steps += 1
            tell(progress, f"epoch {epoch} steps", start // per_step + 1, -(-len(groups) // per_step),
                 f"loss {np.mean(losses[-100:]):.3f}")
            if steps % 100 == 0:
                log(f"  epoch {epoch} step {steps}: loss {np.mean(losses[-100:]):.3f} "
                    f"({time.perf_counter() - started:.0f}s)")
        network.eval()
        score = validate(model) if validate is not None else None
        reports.append(EpochReport(epoch=epoch, steps=steps, loss=float(np.mean(losses)) if losses else 0.0,
                                   validation=score))
        shown = "no validation" if score is None else f"validation nDCG@10 {score:.4f}"
        log(f"epoch {epoch}: loss {reports[-1].loss:.3f}, {shown}")
        if epoch == best_epoch(reports):  # better than every earlier epoch, or not validated (the last is kept)
            shutil.rmtree(staged, ignore_errors=True)
            model.save_pretrained(str(staged))
        elif epoch - best_epoch(reports) >= rerank.train_patience:
            break
    if complete is not None:
        complete(staged)
    install(staged, output)
    return reports


def warmup_then_decay(step: int, total: int) -> float:
    """The learning-rate factor at `step` of `total`: rising linearly over the first tenth, then falling to 0."""
    warmup = max(1, total // 10)
    return (step + 1) / warmup if step < warmup else max(0.0, (total - step) / max(1, total - warmup))


def install(staged: Path, output: Path) -> None:
    """Swap `staged` into `output`; the old model stays loadable until the new one is in place (after a crash between
    the two renames, the next install puts the old one back first)."""
    old = output.with_name(output.name + ".old")
    if old.exists() and not output.exists():
        old.rename(output)
    shutil.rmtree(old, ignore_errors=True)
    if output.exists():
        output.rename(old)
    staged.rename(output)
    shutil.rmtree(old, ignore_errors=True)


def best_epoch(reports: Sequence[EpochReport]) -> int:
    """The first epoch with the best validation score (1-based); without validation the last, the one kept."""
    validated = [(report.validation, -report.epoch) for report in reports if report.validation is not None]
    return -max(validated)[1] if validated else reports[-1].epoch


def paper_vectors(corpus: Corpus) -> PaperVectors:
    """Papers' mean chunk vectors (Relate's 'chunk-mean' paper vectors, whatever source Relate itself is set to use),
    current with the store."""
    vectors = relate_paper_vectors(corpus, corpus.settings.relate, corpus.settings.store.home, "chunk-mean")
    vectors.refresh(corpus.store)
    return vectors


def paper_similarity(corpus: Corpus) -> Similarity:
    """Cosine of each query with papers' mean chunk vectors, for the false-negative filter."""
    vectors = paper_vectors(corpus)
    row = {paper_id: index for index, paper_id in enumerate(vectors.ids)}

    def similarity(texts: Sequence[str], papers: Sequence[Sequence[str]]) -> list[np.ndarray]:
        embedded = corpus.embedder.embed_queries(texts)
        return [
            np.array([float(vectors.vectors[row[p]] @ query) if p in row else -1.0 for p in ids])
            for query, ids in zip(embedded, papers)
        ]

    return similarity


def train_cross_encoder(
    corpus: Corpus, client: LLMClient | None = None, log: Log = stderr_line, progress: Progress | None = None
) -> TrainingReport:
    """Build training queries from the corpus (and `rerank.train_passages` LLM queries when `client` is given), mine
    negatives, train with validation, choose the fusion weight; saves to `trained_model_dir`, with `fusion.json`
    beside the model, where `make_reranker` finds both."""
    settings = corpus.settings
    rerank = settings.rerank
    output = trained_model_dir(settings)
    started = time.perf_counter()
    paper_ids = corpus.store.paper_ids()
    if len(paper_ids) < MIN_PAPERS:
        raise ValueError(
            f"{len(paper_ids)} papers under {settings.store.home}: a cross-encoder needs at least {MIN_PAPERS} to "
            "learn from; search keeps the first-stage order"
        )
    texts = PaperTexts(corpus.store)
    queries = corpus_queries(texts, paper_ids, rerank)
    failed = 0
    if client is not None and rerank.train_passages:
        # another sample than the corpus queries'
        sampled = sampled_papers(paper_ids, rerank.train_passages, rerank.train_seed + 1)
        generated, failed = llm_queries(texts, sampled, rerank, client, progress)
        queries += generated
    train, held = split_by_paper(queries, rerank.train_validation_share, rerank.train_seed)
    held, failed_validation = written_validation(held, texts, rerank, client, progress)
    failed += failed_validation
    # A random cap, so every source (the LLM's queries come last) keeps its share of the validation queries.
    held = random.Random(rerank.train_seed).sample(held, min(len(held), rerank.train_validation_queries))
    log(f"{len(train)} training queries {count_by_source(train)} and {len(held)} validation queries "
        f"{count_by_source(held)}")
    similarity = paper_similarity(corpus) if settings.index.dense else None
    if not held:
        raise ValueError("no validation queries came from the held-out papers; raise rerank.train_validation_share")
    unseen = {query.paper_id for query in held}  # validation papers are not even negatives in training
    pairs, dropped = mined_pairs(train, corpus.searcher, texts, rerank, similarity, exclude=unseen, progress=progress)
    validation = Validation.held_out(held, corpus, rerank.cross_encoder_depth)
    first_stage = validation.ndcg({qid: ranking.paper_ids for qid, ranking in validation.first.items()})
    generated_at = time.perf_counter()
    log(f"{len(pairs)} pairs ({dropped} likely false negatives dropped); first stage validation nDCG@10 "
        f"{first_stage:.4f}")
    epochs, fusion = fit_and_fuse(corpus, pairs, validation, output, log, progress)
    return TrainingReport(
        model_dir=str(output),
        queries=count_by_source(train),
        failed_llm_queries=failed,
        pairs=count_by_source(pairs),
        dropped_false_negatives=dropped,
        validation_queries=count_by_source(held),
        first_stage_validation=first_stage,
        epochs=epochs,
        best_epoch=best_epoch(epochs),
        fusion=fusion,
        generation_seconds=generated_at - started,
        training_seconds=time.perf_counter() - generated_at,
    )


def fit_and_fuse(
    corpus: Corpus,
    pairs: Sequence[TrainingPair],
    validation: Validation,
    output: Path,
    log: Log = stderr_line,
    progress: Progress | None = None,
) -> tuple[list[EpochReport], FusionChoice]:
    """Train on `pairs` with `validation` choosing the epoch, then the fusion (ranks or scores, and the weight) on the
    kept epoch's validation scores; the model goes to `output` with `fusion.json` (and the pairs) beside it."""
    settings = corpus.settings
    rerank = settings.rerank
    texts = PaperTexts(corpus.store)
    # Each epoch's validation scores, kept so the fusion is chosen on the saved (best) epoch's own scores instead of
    # loading the model again and rescoring every validation query.
    scored: list[tuple[float, dict[str, dict[str, float]]]] = []

    def validate(model: CrossEncoder) -> float:
        scores = validation.scores(CrossEncoderReranker.configured(model, texts, rerank))
        scored.append((validation.ndcg({qid: fuse_scores(validation.first[qid], scores[qid], 1.0)
                                        for qid in scores}), scores))  # fmt: skip
        return scored[-1][0]

    chosen: list[FusionChoice] = []

    def complete(staged: Path) -> None:
        _, best = max(scored, key=lambda epoch: epoch[0])  # the first best, the epoch fit_cross_encoder kept
        chosen.append(choose_fusion(validation.first, best, validation.query_ndcg, "nDCG@10", k=settings.search.rrf_k,
                                    max_p=settings.search.fusion_max_p))
        (staged / FUSION_FILE).write_text(chosen[0].model_dump_json(indent=2), encoding="utf-8")
        (staged / "training_pairs.jsonl").write_text(
            "".join(pair.model_dump_json() + "\n" for pair in pairs), encoding="utf-8"
        )

    epochs = fit_cross_encoder(pairs, settings, output, validate, log, complete, progress)
    return epochs, chosen[0]
