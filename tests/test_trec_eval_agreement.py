"""Our retrieval metrics agree with trec_eval (through pytrec_eval) on a real SciFact BM25 run, per query and mean.

The eval computes metrics from rankings in memory; here trec_eval reads only what the eval wrote to disk (the TREC
run) and the qrels file, so this checks the run writer, the tie handling and the averaging as well as the measures.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import pytrec_eval

from strata.config import Settings
from strata.eval.beir import read_qrels
from strata.eval.retrieval import run_retrieval_eval

TOLERANCE = 1e-6
MRR_DEPTH = 10  # trec_eval's recip_rank has no cutoff; MRR@10 is it with ranks past 10 counting 0


def test_bm25_scifact_metrics_match_trec_eval(shared_data: Path, tmp_path: Path) -> None:
    dataset = shared_data / "scifact" / "beir"
    settings = Settings.load(overrides={"store.home": str(tmp_path / "home")})
    result = run_retrieval_eval(settings, dataset, method="bm25", output_dir=tmp_path / "runs")

    qrels = read_qrels(dataset / "qrels" / "test.tsv")
    run = read_trec_run(Path(result.run_file))
    assert set(run) == set(qrels)  # every judged query was searched, so trec_eval's mean is over the same queries
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "recip_rank"})
    reference = evaluator.evaluate(run)

    ours = {row.query_id: row.metrics for row in result.per_query}
    for query_id, trec in reference.items():
        assert ours[query_id]["nDCG@10"] == pytest.approx(trec["ndcg_cut_10"], abs=TOLERANCE), query_id
        assert ours[query_id]["R@100"] == pytest.approx(trec["recall_100"], abs=TOLERANCE), query_id
        assert ours[query_id]["MRR@10"] == pytest.approx(_rr_at(trec["recip_rank"]), abs=TOLERANCE), query_id
    means = {
        "nDCG@10": statistics.fmean(trec["ndcg_cut_10"] for trec in reference.values()),
        "R@100": statistics.fmean(trec["recall_100"] for trec in reference.values()),
        "MRR@10": statistics.fmean(_rr_at(trec["recip_rank"]) for trec in reference.values()),
    }
    for name, value in means.items():
        assert result.metrics[name] == pytest.approx(value, abs=TOLERANCE), name
    assert 0.5 < result.metrics["nDCG@10"] < result.metrics["R@100"]  # a real BM25 run, not an empty one


def read_trec_run(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    return run


def _rr_at(reciprocal_rank: float) -> float:
    return reciprocal_rank if reciprocal_rank >= 1 / MRR_DEPTH - TOLERANCE else 0.0
