"""ToC retrieval evaluation on OpenStax ToC-QA (books with author-written questions tied to a section).

Gold is a section (module) path, one level above most leaves. A predicted leaf matches when the gold path is a
prefix of the leaf's path, so a ranking of leaves is read as a ranking of gold-level units: each leaf is cut to the
gold's depth and only its first occurrence counts. R@k is then whether the gold unit is in the top k, and nDCG@3 is
1/log2(1 + rank) of the gold unit (one relevant unit per query). Metrics come from ir_measures (trec_eval).
Hallucination is the share of queries whose free generation names no leaf (methods that generate only).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

import ir_measures
from pydantic import BaseModel, Field

from strata.toc.model import LeafRanking

MEASURES = {"R@1": ir_measures.R @ 1, "R@3": ir_measures.R @ 3, "nDCG@3": ir_measures.nDCG @ 3}
HALLUCINATION = "hallucination"
QUERIES_FILE = "queries.jsonl"


class TocQuery(BaseModel):
    query_id: str
    book: str
    question: str
    gold_path: tuple[str, ...]


class TocQueryResult(BaseModel):
    query_id: str
    book: str
    metrics: dict[str, float]
    predicted: list[str] = Field(description="Leaf labels, best first")
    gold_path: list[str]
    raw_output: str | None = None
    seconds: float


class TocMethodResult(BaseModel):
    """One method on a set of queries; the file format `strata.eval.compare` reads (`per_query`)."""

    method: str
    scope: str = Field(description="What the queries are, e.g. 'all', a book id, or a named sample")
    queries: int
    metrics: dict[str, float] = Field(description="Means over the queries")
    latency_ms_mean: float
    latency_ms_p50: float
    per_query: list[TocQueryResult]


def load_toc_queries(book_dir: Path) -> list[TocQuery]:
    """Questions of one book folder (the folder holding queries.jsonl, or its parent with derived/)."""
    path = book_dir / QUERIES_FILE if (book_dir / QUERIES_FILE).is_file() else book_dir / "derived" / QUERIES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{book_dir}: no {QUERIES_FILE} (expected an OpenStax ToC-QA book folder)")
    queries: list[TocQuery] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            record = json.loads(line)
            queries.append(
                TocQuery(
                    query_id=record["query_id"],
                    book=record["book"],
                    question=record["question"],
                    gold_path=tuple(record["gold_path"]),
                )
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not a ToC-QA query: {error}") from error
    return queries


def score_rankings(queries: Sequence[TocQuery], rankings: Sequence[LeafRanking]) -> list[TocQueryResult]:
    """Per-query metrics; `rankings[i]` answers `queries[i]`."""
    qrels = [ir_measures.Qrel(q.query_id, _unit_id(q.gold_path), 1) for q in queries]
    run: list[ir_measures.ScoredDoc] = []
    for query, ranking in zip(queries, rankings, strict=True):
        units = _units(ranking, len(query.gold_path))
        # Scores strictly fall with rank, so trec_eval's own tie-breaking never reorders the ranking.
        run.extend(ir_measures.ScoredDoc(query.query_id, unit, float(len(units) - i)) for i, unit in enumerate(units))
    values: dict[str, dict[str, float]] = {q.query_id: dict.fromkeys(MEASURES, 0.0) for q in queries}
    names = {measure: name for name, measure in MEASURES.items()}
    for metric in ir_measures.iter_calc(list(MEASURES.values()), qrels, run):
        values[metric.query_id][names[metric.measure]] = float(metric.value)
    results = []
    for query, ranking in zip(queries, rankings):
        metrics = values[query.query_id]
        if ranking.raw_output is not None:
            metrics[HALLUCINATION] = float(ranking.hallucinated)
        results.append(
            TocQueryResult(
                query_id=query.query_id,
                book=query.book,
                metrics=metrics,
                predicted=[leaf.label for leaf in ranking.leaves],
                gold_path=list(query.gold_path),
                raw_output=ranking.raw_output,
                seconds=ranking.seconds,
            )
        )
    return results


def _units(ranking: LeafRanking, depth: int) -> list[str]:
    """Predicted leaves cut to the gold's depth, first occurrence of each."""
    return list(dict.fromkeys(_unit_id(leaf.path[:depth]) for leaf in ranking.leaves))


def _unit_id(path: Iterable[str]) -> str:
    return " > ".join(path)


def summarise(method: str, scope: str, results: Sequence[TocQueryResult]) -> TocMethodResult:
    names = sorted({name for result in results for name in result.metrics})
    seconds = [result.seconds for result in results] or [0.0]
    return TocMethodResult(
        method=method,
        scope=scope,
        queries=len(results),
        metrics={name: statistics.fmean(r.metrics[name] for r in results if name in r.metrics) for name in names},
        latency_ms_mean=1000 * statistics.fmean(seconds),
        latency_ms_p50=1000 * statistics.median(seconds),
        per_query=list(results),
    )
