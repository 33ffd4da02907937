"""BEIR loading, metric computation and the end-to-end retrieval evaluation (BM25 on a SciFact subset)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from strata.config import Settings
from strata.documents.model import Candidate, Ranking
from strata.eval.beir import load_beir, write_subset
from strata.eval.results import load_result
from strata.eval.retrieval import _strict_scores, evaluate_run, run_retrieval_eval


def write_beir(folder: Path, corpus: list[dict], queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(record) + "\n" for record in corpus))
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": qid, "text": text}) + "\n" for qid, text in queries.items())
    )
    rows = [f"{qid}\t{doc}\t{grade}" for qid, judged in qrels.items() for doc, grade in judged.items()]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return folder


def test_scifact_loads_with_the_published_test_statistics(shared_data: Path) -> None:
    dataset = load_beir(shared_data / "scifact" / "beir", "test")
    assert dataset.name == "scifact"
    assert len(dataset.queries) == 300
    assert sum(len(judged) for judged in dataset.qrels.values()) == 339
    assert dataset.fingerprint == load_beir(shared_data / "scifact" / "beir", "test").fingerprint


def test_bad_datasets_are_reported_by_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="qrels/test.tsv"):
        load_beir(tmp_path)
    folder = write_beir(tmp_path / "d", [{"_id": "1", "title": "t", "text": "x"}], {"q1": "query"}, {"q1": {"1": 1}})
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t1\n")
    with pytest.raises(ValueError, match=r"test.tsv:2"):
        load_beir(folder)
    (folder / "qrels" / "test.tsv").write_text("q2\t1\t1\n")
    with pytest.raises(ValueError, match="not in queries.jsonl"):
        load_beir(folder)


def test_metrics_of_perfect_and_missing_runs() -> None:
    qrels = {"q1": {"d1": 1, "d2": 1}, "q2": {"d3": 1}}
    means, per_query = evaluate_run({"q1": {"d1": 2.0, "d2": 1.0, "x": 0.5}}, qrels)
    assert per_query["q1"] == {"nDCG@10": 1.0, "R@10": 1.0, "R@100": 1.0, "MRR@10": 1.0}
    assert per_query["q2"]["nDCG@10"] == 0.0  # a query with no results counts as zero, as in BEIR
    assert means["R@100"] == pytest.approx(0.5)


def test_tied_scores_are_evaluated_in_the_rankings_order() -> None:
    ranking = Ranking(query="q", method="hybrid", candidates=[
        Candidate(paper_id="b", score=0.5, rank=1), Candidate(paper_id="a", score=0.5, rank=2),
    ])
    scores = _strict_scores(ranking)
    assert scores["b"] > scores["a"] and scores["a"] == pytest.approx(0.5)
    assert evaluate_run({"q": scores}, {"q": {"a": 1}})[1]["q"]["MRR@10"] == 0.5
    # Left tied, trec_eval would apply its own tie order and put 'a' first.
    assert evaluate_run({"q": {"b": 0.5, "a": 0.5}}, {"q": {"a": 1}})[1]["q"]["MRR@10"] == 1.0


def test_scores_apart_by_less_than_32_bits_keep_the_rankings_order() -> None:
    # Two hybrid RRF scores a double's ulp apart (a paper first in BM25 and second in dense, the other the reverse):
    # trec_eval (nDCG's provider) reads 32-bit floats, sees a tie and puts the larger id ('b') first.
    first = 0.03252247488101534
    ranking = Ranking(query="q", method="hybrid", candidates=[
        Candidate(paper_id="a", score=first, rank=1), Candidate(paper_id="b", score=first - 1e-17, rank=2),
    ])
    second_place = 1 / math.log2(3)  # nDCG@10 of the one relevant paper at rank 2
    strict = evaluate_run({"q": _strict_scores(ranking)}, {"q": {"b": 1}})[1]["q"]["nDCG@10"]
    assert strict == pytest.approx(second_place)
    assert evaluate_run({"q": {"a": first, "b": first - 1e-17}}, {"q": {"b": 1}})[1]["q"]["nDCG@10"] == 1.0


def test_bm25_evaluation_end_to_end_writes_a_run_and_reuses_its_store(shared_data: Path, tmp_path: Path) -> None:
    full = load_beir(shared_data / "scifact" / "beir")
    folder = write_subset(full, tmp_path / "scifact-mini", queries=30, documents=300)
    subset = load_beir(folder)
    assert len(subset.queries) == 30 and all(doc in _corpus_ids(folder) for d in subset.qrels.values() for doc in d)
    settings = Settings.load(overrides={"store.home": str(tmp_path / "home")})

    result = run_retrieval_eval(settings, folder, method="bm25", output_dir=tmp_path / "runs")

    assert result.queries == 30 and result.method == "bm25" and result.metrics["nDCG@10"] > 0.6
    assert result.metrics["R@100"] >= result.metrics["R@10"] > 0.7
    assert len(result.per_query) == 30 and result.timings.latency_p95_ms >= result.timings.latency_p50_ms > 0
    saved = load_result(Path(result.result_file))
    (experiment,), (dataset,) = saved.experiments, saved.datasets
    assert experiment.metrics == result.metrics and dataset.fingerprint == load_beir(folder).fingerprint
    assert [row.query_id for row in experiment.per_query] == [row.query_id for row in result.per_query]
    lines = Path(result.run_file).read_text().splitlines()
    assert {line.split()[0] for line in lines} == {q.id for q in subset.queries}
    for query_lines in _by_query(lines).values():
        scores = [float(line.split()[4]) for line in query_lines]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    # The run file alone reproduces the metrics (trec_eval reads scores, not ranks).
    rerun = {qid: {line.split()[2]: float(line.split()[4]) for line in ls} for qid, ls in _by_query(lines).items()}
    assert evaluate_run(rerun, subset.qrels)[0] == pytest.approx(result.metrics)
    assert Path(result.store_home).is_relative_to(tmp_path / "home" / "eval")

    again = run_retrieval_eval(settings, folder, method="bm25")
    assert again.metrics == result.metrics and again.store_home == result.store_home
    assert again.timings.index_seconds < result.timings.index_seconds + 1 and again.result_file is None


def _corpus_ids(folder: Path) -> set[str]:
    return {json.loads(line)["_id"] for line in (folder / "corpus.jsonl").open()}


def _by_query(lines: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for line in lines:
        grouped.setdefault(line.split()[0], []).append(line)
    return grouped
