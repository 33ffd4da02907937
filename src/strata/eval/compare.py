"""Paired randomization test between two result files of any task (retrieval, ToC, QA).

A result file (strata.eval.results) of one experiment with per-query rows, as every `strata eval` command and
benchmarks/stair.py's per-query files have. Queries are paired by id; only queries present in both files are compared,
and how many each file alone has is reported.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from strata.eval.results import QueryRow, load_result
from strata.stats import DEFAULT_PERMUTATIONS, DEFAULT_SEED, paired_p_value


class ComparisonResult(BaseModel):
    baseline_file: str
    system_file: str
    metric: str
    queries: int = Field(description="Queries judged in both files")
    baseline_only: int = Field(description="Queries only the baseline file has, left out of the test")
    system_only: int = Field(description="Queries only the system file has, left out of the test")
    baseline_mean: float
    system_mean: float
    mean_delta: float = Field(description="system - baseline")
    p_value: float = Field(description="Two-sided paired randomization test (sign flips of per-query deltas)")
    permutations: int
    seed: int
    wins: int
    ties: int
    losses: int
    per_query_delta: dict[str, float]


def load_per_query(path: Path, metric: str) -> dict[str, float]:
    with_rows = [rows for e in load_result(path).experiments if isinstance(rows := e.per_query, list)]
    if len(with_rows) != 1:
        raise ValueError(f"{path}: {len(with_rows)} experiments hold per-query rows; a comparison needs exactly one")
    return row_scores(with_rows[0], metric, str(path))


def row_scores(rows: list[QueryRow], metric: str, source: str) -> dict[str, float]:
    """Each query's `metric` from per-query rows; a row without it is an error naming `source`."""
    scores: dict[str, float] = {}
    for row in rows:
        value = row.metrics.get(metric)
        if value is None:
            available = ", ".join(sorted(row.metrics)) or "none"
            raise ValueError(f"{source}: query {row.query_id} has no metric {metric!r} (has: {available})")
        scores[row.query_id] = value
    return scores


def compare(
    baseline_file: Path,
    system_file: Path,
    metric: str,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> ComparisonResult:
    baseline = load_per_query(baseline_file, metric)
    system = load_per_query(system_file, metric)
    query_ids = sorted(set(baseline) & set(system))
    if len(query_ids) < 2:
        raise ValueError(f"{baseline_file} and {system_file} share {len(query_ids)} queries; need at least 2")
    a = np.array([baseline[q] for q in query_ids])
    b = np.array([system[q] for q in query_ids])
    p_value = paired_p_value(a, b, permutations, seed)
    deltas = b - a
    return ComparisonResult(
        baseline_file=str(baseline_file),
        system_file=str(system_file),
        metric=metric,
        queries=len(query_ids),
        baseline_only=len(set(baseline) - set(system)),
        system_only=len(set(system) - set(baseline)),
        baseline_mean=float(a.mean()),
        system_mean=float(b.mean()),
        mean_delta=float(deltas.mean()),
        p_value=p_value,
        permutations=permutations,
        seed=seed,
        wins=int((deltas > 0).sum()),
        ties=int((deltas == 0).sum()),
        losses=int((deltas < 0).sum()),
        per_query_delta={q: float(d) for q, d in zip(query_ids, deltas)},
    )


def format_comparison(result: ComparisonResult) -> str:
    line = (
        f"{result.metric} over {result.queries} paired queries: baseline {result.baseline_mean:.4f} "
        f"({result.baseline_file}) vs system {result.system_mean:.4f} ({result.system_file}); "
        f"delta {result.mean_delta:+.4f}, p = {result.p_value:.4f} (paired randomization, "
        f"{result.permutations} permutations, seed {result.seed}); win/tie/loss "
        f"{result.wins}/{result.ties}/{result.losses}"
    )
    if result.baseline_only or result.system_only:
        # A query one file lacks (failed, skipped) is in neither mean, which can flatter the run that lacks it.
        line += (
            f"; left out: {result.baseline_only} queries only in the baseline, {result.system_only} only in the system"
        )
    return line
