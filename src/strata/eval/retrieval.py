"""Retrieval evaluation on a BEIR dataset: ingest its corpus, search every judged query, score the run.

Metrics come from ir_measures (over pytrec_eval, i.e. trec_eval). Results are papers, so document ids are paper ids,
which the BEIR parser keeps equal to the corpus `_id`s.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import ir_measures
import numpy as np
from pydantic import BaseModel, Field

from strata.config import ChunkingSettings, EmbeddingSettings, IndexSettings, SearchSettings, Settings
from strata.corpus import Corpus
from strata.documents.model import Ranking
from strata.encoders.embedder import encoder_identity
from strata.eval.beir import BeirDataset, load_beir
from strata.eval.results import DatasetRef, Experiment, QueryRow, ResultFile, new_result, write_result
from strata.progress import Progress, tell
from strata.retrieve.protocol import Method

MEASURES = {
    "nDCG@10": ir_measures.nDCG @ 10,
    "R@10": ir_measures.R @ 10,
    "R@100": ir_measures.R @ 100,
    "MRR@10": ir_measures.RR @ 10,
}
RUN_DEPTH = 100  # papers kept per query: enough for R@100


class QueryScores(BaseModel):
    query_id: str
    metrics: dict[str, float]
    seconds: float


class EvalTimings(BaseModel):
    ingest_seconds: float = Field(description="Parsing and storing the corpus (0 when already stored)")
    index_seconds: float = Field(description="Bringing the indices up to date (0 when already current)")
    search_seconds: float = Field(description="All queries, end to end")
    latency_p50_ms: float
    latency_p95_ms: float


class RetrievalEvalResult(BaseModel):
    dataset: str
    dataset_dir: str
    dataset_fingerprint: str
    split: str
    method: str = Field(description="As recorded in the rankings, e.g. 'hybrid' or 'bm25+prf'")
    queries: int
    metrics: dict[str, float] = Field(description="Means over the judged queries")
    search: SearchSettings
    index: IndexSettings
    chunking: ChunkingSettings
    store_home: str
    timings: EvalTimings
    per_query: list[QueryScores]
    run_file: str | None = None
    result_file: str | None = None


def run_retrieval_eval(
    settings: Settings,
    dataset_dir: Path,
    method: Method = "hybrid",
    split: str = "test",
    output_dir: Path | None = None,
    prf: bool | None = None,
    store_home: Path | None = None,
    progress: Progress | None = None,
) -> RetrievalEvalResult:
    """Evaluate `method` on the BEIR dataset in `dataset_dir`; writes a TREC run and a JSON result to `output_dir`.

    The corpus is ingested into its own store (default: `settings.store.home / 'eval' / NAME-HASH`, reused by later
    runs with the same data and chunking), so the user's corpus is never touched.
    """
    dataset = load_beir(dataset_dir, split)
    eval_settings = _eval_settings(settings, dataset, method, store_home)
    ingest_seconds, index_seconds = _prepare_corpus(dataset, eval_settings)
    rankings, latencies = _run_queries(dataset, eval_settings, method, prf, progress)
    run = {query_id: _strict_scores(ranking) for query_id, ranking in rankings.items()}
    metrics, per_query = evaluate_run(run, dataset.qrels)
    result = RetrievalEvalResult(
        dataset=dataset.name,
        dataset_dir=str(dataset.folder),
        dataset_fingerprint=dataset.fingerprint,
        split=split,
        method=next(iter(rankings.values())).method if rankings else method,
        queries=len(dataset.queries),
        metrics=metrics,
        search=eval_settings.search,
        index=eval_settings.index,
        chunking=eval_settings.parsing.chunking,
        store_home=str(eval_settings.store.home),
        timings=EvalTimings(
            ingest_seconds=ingest_seconds,
            index_seconds=index_seconds,
            search_seconds=sum(latencies.values()),
            latency_p50_ms=float(np.percentile(list(latencies.values()), 50) * 1000) if latencies else 0.0,
            latency_p95_ms=float(np.percentile(list(latencies.values()), 95) * 1000) if latencies else 0.0,
        ),
        per_query=[
            QueryScores(query_id=query_id, metrics=per_query.get(query_id, {}), seconds=latencies[query_id])
            for query_id in rankings
        ],
    )
    if output_dir is not None:
        _write_outputs(result, run, Path(output_dir))
    return result


def evaluate_run(
    run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(mean of each measure, query id -> measure -> value); queries missing from the run score 0, as in BEIR."""
    measures = list(MEASURES.values())
    names = {str(measure): name for name, measure in MEASURES.items()}
    complete_run = {query_id: run.get(query_id, {}) for query_id in qrels}
    per_query: dict[str, dict[str, float]] = {query_id: {name: 0.0 for name in MEASURES} for query_id in qrels}
    for metric in ir_measures.iter_calc(measures, qrels, complete_run):
        per_query[metric.query_id][names[str(metric.measure)]] = float(metric.value)
    means = {name: sum(scores[name] for scores in per_query.values()) / max(len(per_query), 1) for name in MEASURES}
    return means, per_query


def order_ndcg(runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """nDCG@10 of each query's ids in exactly their order (scores from ranks, which no tie rule can reorder)."""
    scored = {qid: {pid: float(len(ids) - rank) for rank, pid in enumerate(ids)} for qid, ids in runs.items()}
    judged = {qid: dict(qrels[qid]) for qid in runs}
    return {qid: values["nDCG@10"] for qid, values in evaluate_run(scored, judged)[1].items()}


def format_result(result: RetrievalEvalResult) -> str:
    metrics = "  ".join(f"{name} {value:.4f}" for name, value in result.metrics.items())
    lines = [
        f"{result.dataset} ({result.split}, {result.queries} queries) {result.method}: {metrics}",
        f"latency p50 {result.timings.latency_p50_ms:.1f} ms, p95 {result.timings.latency_p95_ms:.1f} ms; "
        f"ingest {result.timings.ingest_seconds:.1f}s, index {result.timings.index_seconds:.1f}s",
    ]
    if result.result_file:
        lines.append(f"run: {result.run_file}  result: {result.result_file}")
    return "\n".join(lines)


def _eval_settings(settings: Settings, dataset: BeirDataset, method: Method, store_home: Path | None) -> Settings:
    if store_home is None:
        chunking = hashlib.sha256(settings.parsing.chunking.model_dump_json().encode()).hexdigest()[:8]
        name = f"{dataset.name}-{dataset.fingerprint[:12]}-{chunking}"
        embedding = settings.index.embedding
        encoder = encoder_identity(embedding) + (" with sentences" if embedding.sentences else "")
        if encoder != encoder_identity(EmbeddingSettings()):
            # Another encoder (or sentence vectors) gets its own store: sharing one would rebuild the default
            # encoder's dense index.
            name += "-" + hashlib.sha256(encoder.encode()).hexdigest()[:8]
        store_home = Path(settings.store.home) / "eval" / name
    return settings.model_copy(
        update={
            "store": settings.store.model_copy(update={"home": Path(store_home)}),
            # BM25 alone needs no embeddings; a later dense or hybrid run catches the dense index up.
            "index": settings.index.model_copy(update={"dense": method != "bm25"}),
        }
    )


def _prepare_corpus(dataset: BeirDataset, settings: Settings) -> tuple[float, float]:
    """(ingest seconds, index seconds): ingest skips an unchanged corpus file, and its sync catches the indices up."""
    from strata.pipeline.ingest import ingest

    report = ingest([dataset.corpus_path], settings)
    if report.errors:
        raise ValueError(f"could not ingest the corpus of {dataset.folder}:\n{report.summary()}")
    return report.parse_seconds, report.index_seconds


def _run_queries(
    dataset: BeirDataset, settings: Settings, method: Method, prf: bool | None, progress: Progress | None = None
) -> tuple[dict[str, Ranking], dict[str, float]]:
    rankings: dict[str, Ranking] = {}
    latencies: dict[str, float] = {}
    with Corpus.open(settings) as corpus:
        if method != "bm25":
            corpus.vectors.embedder.embed_query("warm-up")  # model loading is not query latency
        for query in dataset.queries:
            started = time.perf_counter()
            rankings[query.id] = corpus.searcher.search(query.text, k=RUN_DEPTH, method=method, prf=prf)
            latencies[query.id] = time.perf_counter() - started
            tell(progress, "queries", len(rankings), len(dataset.queries))
    return rankings, latencies


def _strict_scores(ranking: Ranking) -> dict[str, float]:
    """Scores that make trec_eval see the ranking's exact order. It compares scores as 32-bit floats and orders ties
    by document id, so a score that is not below its predecessor at that precision (a tie, or RRF scores a few ulps
    apart) is set one 32-bit step below it."""
    scores: dict[str, float] = {}
    previous = np.float32(np.inf)
    for candidate in ranking.candidates:
        score = np.float32(candidate.score)
        if not score < previous:
            score = np.nextafter(previous, np.float32(-np.inf))
        scores[candidate.paper_id] = float(score)
        previous = score
    return scores


def _write_outputs(result: RetrievalEvalResult, run: dict[str, dict[str, float]], output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{result.dataset}-{result.split}-{result.method.replace('+', '-')}"
    run_path, result_path = output_dir / f"{stem}.trec", output_dir / f"{stem}.json"
    with run_path.open("w", encoding="utf-8") as handle:
        for query_id, scores in run.items():
            for rank, (doc_id, score) in enumerate(scores.items(), start=1):
                handle.write(f"{query_id} Q0 {doc_id} {rank} {score!r} strata-{result.method}\n")
    result.run_file, result.result_file = str(run_path), str(result_path)
    write_result(result_file(result), result_path)


def result_file(result: RetrievalEvalResult) -> ResultFile:
    """The result as `strata eval retrieval` writes it: one experiment, with its per-query rows."""
    return new_result(
        "strata eval retrieval",
        datasets=[
            DatasetRef(name=result.dataset, path=result.dataset_dir, fingerprint=result.dataset_fingerprint,
                       split=result.split)
        ],
        settings={name: getattr(result, name).model_dump(mode="json") for name in ("search", "index", "chunking")},
        experiments=[retrieval_experiment(result, Path(result.result_file or result.method).stem)],
        details={"store_home": result.store_home, "run_file": result.run_file},
    )


def retrieval_experiment(result: RetrievalEvalResult, name: str) -> Experiment:
    """The evaluation as an experiment of a result file: its metrics, timings and per-query rows."""
    return Experiment(
        name=name, method=result.method, dataset=result.dataset, queries=result.queries, metrics=result.metrics,
        cost=result.timings.model_dump(), per_query=[QueryRow(**row.model_dump()) for row in result.per_query],
    )  # fmt: skip
