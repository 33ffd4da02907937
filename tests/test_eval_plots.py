"""Figures from result files: recall@k from TREC runs, ToC R@1 per book, cost vs quality; missing inputs skip."""

from __future__ import annotations

from pathlib import Path

import ir_measures
import pytest

from benchmark_support import load_benchmark
from strata.eval.plots import cost_points, make_figures, mean_recall_at, recall_curves, toc_scores_by_book
from strata.eval.results import Experiment, load_results, new_result, write_result

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_recall_at_k_counts_unretrieved_judged_queries_as_zero() -> None:
    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 1}}
    run = [ir_measures.ScoredDoc("q1", "a", 3.0), ir_measures.ScoredDoc("q1", "x", 2.0),
           ir_measures.ScoredDoc("q1", "b", 1.0)]
    assert mean_recall_at(qrels, run, depths=(1, 2, 3)) == pytest.approx([0.25, 0.25, 0.5])


def toc_cell(group: str, method: str, scope: str, r1: float | None) -> Experiment:
    metrics = {} if r1 is None else {"R@1": r1, "R@3": 1.0}
    return Experiment(name=f"{group}/{method}/{scope}", method=method, group=group, subset=scope, metrics=metrics)


def test_toc_scores_come_from_the_experiments_of_stair_results() -> None:
    cells = [
        *(toc_cell("full_books", "bm25", scope, r1) for scope, r1 in (("all", 0.5), ("psych", 0.25), ("socio", 0.75))),
        toc_cell("full_books", "broken", "all", None),
        toc_cell("small_book", "stair", "psych", 1.0),
    ]
    parts = {"full_books": {}, "small_book": {}}
    cpu = new_result("benchmarks/stair.py", cells, details={"parts": parts})
    assert toc_scores_by_book(cpu) == {
        "full_books: bm25": {"all": 0.5, "psych": 0.25, "socio": 0.75}, "small_book: stair": {"psych": 1.0},
    }
    # One small book's run is drawn once, inside the part that pools it with the other book.
    pooled = [toc_cell("both", "stair", "psych", 1.0), toc_cell("both", "stair", "socio", 0.0)]
    both = new_result("benchmarks/stair.py", [*cells, *pooled],
                      details={"parts": {**parts, "both": {"pooled_from": ["small_book"]}}})  # fmt: skip
    assert list(toc_scores_by_book(both)) == ["full_books: bm25", "both: stair"]


def test_figures_are_skipped_with_a_reason_when_their_inputs_are_missing(tmp_path: Path) -> None:
    figures = make_figures(tmp_path, base=tmp_path)
    assert [figure.path for figure in figures] == [None, None, None]
    assert all(figure.note.startswith("skipped") for figure in figures)
    assert not list(tmp_path.glob("*.png"))


def test_figures_are_drawn_from_result_files(tmp_path: Path) -> None:
    dataset = tmp_path / "data"
    (dataset / "qrels").mkdir(parents=True)
    (dataset / "corpus.jsonl").write_text('{"_id": "a", "title": "t", "text": "x"}\n')
    (dataset / "queries.jsonl").write_text('{"_id": "q1", "text": "q"}\n')
    (dataset / "qrels" / "test.tsv").write_text("q1\ta\t1\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / "run.trec").write_text("q1 Q0 x 1 2.0 t\nq1 Q0 a 2 1.0 t\n")
    # Paths relative to where the eval ran.
    write_result(_retrieval_result(dataset_dir="data", run_file="results/run.trec"), results / "scifact-test-bm25.json")
    write_result(new_result("benchmarks/retrieval.py", [
        Experiment(name="bm25", method="bm25", metrics={"nDCG@10": 0.6}, cost={"latency_p50_ms": 20.0}),
        Experiment(name="dense", method="dense", metrics={"nDCG@10": 0.65}, cost={"latency_p50_ms": 30.0}),
    ]), results / "retrieval.json")  # fmt: skip
    stair = new_result("benchmarks/stair.py", [toc_cell("gpu", "stair", "b", 0.5)], details={"parts": {"gpu": {}}})
    write_result(stair, results / "stair-gpu.json")

    curves = recall_curves(results, base=tmp_path)
    assert len(curves) == 1 and curves[0].recall[0] == 0.0 and curves[0].recall[1] == 1.0
    assert [point.label for point in cost_points(results)] == [
        "retrieval: bm25", "retrieval: dense", "scifact-test-bm25: bm25"
    ]
    figures = make_figures(results, base=tmp_path)
    assert all(figure.path is not None and figure.path.read_bytes().startswith(PNG_SIGNATURE) for figure in figures)
    assert figures[1].note == "1 methods over 1 books" and "cost is p50 latency" in figures[2].note


def _retrieval_result(dataset_dir: str, run_file: str):
    """The result file `strata eval retrieval` writes."""
    from strata.config import Settings
    from strata.eval.retrieval import EvalTimings, RetrievalEvalResult, result_file

    settings = Settings.load()
    return result_file(RetrievalEvalResult(
        dataset="scifact", dataset_dir=dataset_dir, dataset_fingerprint="f", split="test", method="bm25", queries=1,
        metrics={"nDCG@10": 0.63}, search=settings.search, index=settings.index, chunking=settings.parsing.chunking,
        store_home="s", per_query=[], run_file=run_file,
        timings=EvalTimings(ingest_seconds=0, index_seconds=0, search_seconds=0, latency_p50_ms=1, latency_p95_ms=1),
    ))  # fmt: skip


def test_the_report_rewrites_only_the_marked_readme_section(tmp_path: Path) -> None:
    report = load_benchmark("report")
    from strata.eval.matrix import MatrixResult, RowOutcome, write_matrix_result

    outcome = RowOutcome(id="r1", dataset="d", metric="nDCG@10", command="strata eval x --method bm25", expected=0.5,
                         tolerance=0.005, got=0.51, delta=0.01, status="FAIL", seconds=1.0)  # fmt: skip
    matrix = MatrixResult(matrix_file="m.yaml", rows_selected="cheap", date="today", passed=False, outcomes=[outcome])
    write_matrix_result(matrix, tmp_path / "matrix.json")
    body = report.render_summary({}) + report.render_page(load_results(tmp_path), tmp_path)
    assert "| r1 | d | nDCG@10 | 0.5000 | 0.5100 | +0.0100 | 0.005 | FAIL |" in body
    assert "Retrieval" not in body and "Hybrid search" not in body  # no retrieval results here, so no such parts
    readme = f"# T\n\nbefore\n{report.START}\nold numbers\n{report.END}\nafter\n"
    updated = report.replace_section(readme, body, tmp_path / "README.md")
    assert "old numbers" not in updated and updated.startswith("# T\n\nbefore\n") and updated.endswith("after\n")
    with pytest.raises(ValueError, match="README.md: no results section"):
        report.replace_section("# no markers\n", body, tmp_path / "README.md")


def test_cost_points_read_token_counts_from_experiments_as_corank_writes_them(tmp_path):
    rows = [
        Experiment(name="hybrid", method="hybrid", metrics={"nDCG@10": 0.70}),
        Experiment(name="corank", method="corank", metrics={"nDCG@10": 0.72},
                   cost={"tokens_in_per_query": 700.0, "tokens_out_per_query": 18.0}),
    ]  # fmt: skip
    write_result(new_result("benchmarks/corank.py", rows), tmp_path / "corank.json")
    points = cost_points(tmp_path)
    assert [(point.label, point.tokens_per_query) for point in points] == [
        ("corank: hybrid", None),
        ("corank: corank", 718.0),
    ]
