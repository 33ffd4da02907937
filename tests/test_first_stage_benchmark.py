"""benchmarks/first_stage.py's rows: the mean of each metric over the claims, and a paired test against the default
first stage on the same claims (none for the default itself)."""

from __future__ import annotations

import pytest

from benchmark_support import BENCHMARKS, load_benchmark


def test_a_row_averages_its_claims_and_is_tested_against_the_default(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling corank.py
    first_stage = load_benchmark("first_stage")
    default = {str(n): {"nDCG@10": 0.5, "R@100": 1.0} for n in range(20)}
    better = {qid: {"nDCG@10": 1.0, "R@100": 1.0} for qid in default}
    row = first_stage.experiment("sentence vectors, scores", "test", better, 0.02, default, {"dense_weight": 0.5})
    assert row.name == "test: sentence vectors, scores" and row.queries == 20
    assert row.metrics == {"nDCG@10": 1.0, "R@100": 1.0} and row.details["dense_weight"] == 0.5
    test = row.details["paired_test"]
    assert test["against"] == "test: chunk vectors, rrf" and test["p_value"] < 0.001  # 20 wins of 20
    assert len(row.per_query) == 20 and row.cost["seconds_per_query"] == pytest.approx(0.02)
    baseline = first_stage.experiment("chunk vectors, rrf", "test", default, 0.01, None, {})
    assert "paired_test" not in baseline.details and baseline.metrics["nDCG@10"] == 0.5
