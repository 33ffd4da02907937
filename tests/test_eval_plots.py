"""Figures from result files: recall@k from TREC runs, ToC R@1 per book, cost vs quality; missing inputs skip."""

from __future__ import annotations

import json
from pathlib import Path

import ir_measures
import pytest

from strata.eval.plots import cost_points, make_figures, mean_recall_at, recall_curves, toc_scores_by_book

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_recall_at_k_counts_unretrieved_judged_queries_as_zero() -> None:
    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 1}}
    run = [ir_measures.ScoredDoc("q1", "a", 3.0), ir_measures.ScoredDoc("q1", "x", 2.0),
           ir_measures.ScoredDoc("q1", "b", 1.0)]
    assert mean_recall_at(qrels, run, depths=(1, 2, 3)) == pytest.approx([0.25, 0.25, 0.5])


def test_toc_scores_come_from_the_method_tables_of_stair_results() -> None:
    def cell(r1: float) -> dict:
        return {"queries": 2, "metrics": {"R@1": r1, "R@3": 1.0}, "per_query_file": "x.json"}

    # benchmarks/stair.py: stair-cpu.json nests experiments; stair-gpu.json is one experiment at the top.
    cpu = {"full_books": {"title": "Whole books", "methods": {
        "bm25": {"all": cell(0.5), "psych": cell(0.25), "socio": cell(0.75)},
        "broken": {"all": {"metrics": {}}},
    }}, "small_book": {"methods": {"stair": {"psych": cell(1.0)}}}}
    assert toc_scores_by_book(cpu, "stair-cpu") == {
        "full_books: bm25": {"all": 0.5, "psych": 0.25, "socio": 0.75}, "small_book: stair": {"psych": 1.0},
    }
    assert toc_scores_by_book({"methods": {"dsi": {"all": cell(0.1)}}}, "stair-gpu") == {"stair-gpu: dsi": {"all": 0.1}}
    # One small book's run is drawn once, inside the experiment that pools it with the other book.
    cpu["both"] = {"pooled_from": ["small_book"], "methods": {"stair": {"psych": cell(1.0), "socio": cell(0.0)}}}
    assert list(toc_scores_by_book(cpu, "stair-cpu")) == ["full_books: bm25", "both: stair"]


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
    eval_result = json.loads(_retrieval_result_json())
    eval_result.update(dataset_dir="data", run_file="results/run.trec")  # relative to where the eval ran
    (results / "scifact-test-bm25.json").write_text(json.dumps(eval_result))
    (results / "retrieval.json").write_text(json.dumps({"methods": [
        {"method": "bm25", "nDCG@10": 0.6, "latency_p50_ms": 20.0},
        {"method": "dense", "nDCG@10": 0.65, "latency_p50_ms": 30.0},
    ]}))
    (results / "stair-gpu.json").write_text(json.dumps({"methods": {"stair": {"b": {"metrics": {"R@1": 0.5}}}}}))

    curves = recall_curves(results, base=tmp_path)
    assert len(curves) == 1 and curves[0].recall[0] == 0.0 and curves[0].recall[1] == 1.0
    assert [point.label for point in cost_points(results)] == ["retrieval: bm25", "retrieval: dense"]
    figures = make_figures(results, base=tmp_path)
    assert all(figure.path is not None and figure.path.read_bytes().startswith(PNG_SIGNATURE) for figure in figures)
    assert figures[1].note == "1 methods over 1 books" and "cost is p50 latency" in figures[2].note


def _retrieval_result_json() -> str:
    from strata.config import Settings
    from strata.eval.retrieval import EvalTimings, RetrievalEvalResult

    settings = Settings.load()
    return RetrievalEvalResult(
        dataset="scifact", dataset_dir="", dataset_fingerprint="f", split="test", method="bm25", queries=1,
        metrics={"nDCG@10": 0.63}, search=settings.search, index=settings.index, chunking=settings.parsing.chunking,
        store_home="s", per_query=[],
        timings=EvalTimings(ingest_seconds=0, index_seconds=0, search_seconds=0, latency_p50_ms=1, latency_p95_ms=1),
    ).model_dump_json()


def test_the_report_rewrites_only_the_marked_readme_section(tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "report.py"
    spec = importlib.util.spec_from_file_location("report", path)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    (tmp_path / "matrix.json").write_text(json.dumps({
        "matrix_file": "m.yaml", "rows_selected": "cheap", "date": "today", "passed": False, "outcomes": [
            {"id": "r1", "dataset": "d", "metric": "nDCG@10", "command": "strata eval x", "expected": 0.5,
             "tolerance": 0.005, "got": 0.51, "delta": 0.01, "status": "FAIL", "seconds": 1.0}]}))
    body = report.render_results(tmp_path, [])
    assert "| r1 | d | nDCG@10 | 0.5000 | 0.5100 | +0.0100 | 0.005 | FAIL |" in body
    assert "Retrieval" not in body  # no retrieval.json here, so no retrieval part
    readme = f"# T\n\nbefore\n{report.START}\nold numbers\n{report.END}\nafter\n"
    updated = report.replace_section(readme, body, tmp_path / "README.md")
    assert "old numbers" not in updated and updated.startswith("# T\n\nbefore\n") and updated.endswith("after\n")
    with pytest.raises(ValueError, match="README.md: no results section"):
        report.replace_section("# no markers\n", body, tmp_path / "README.md")


def test_cost_points_read_token_counts_from_rows_as_corank_writes_them(tmp_path):
    rows = [
        {"method": "hybrid", "nDCG@10": 0.70},
        {"method": "corank", "nDCG@10": 0.72, "tokens_in_per_query": 700.0, "tokens_out_per_query": 18.0},
    ]
    (tmp_path / "corank.json").write_text(json.dumps({"rows": rows}))
    points = cost_points(tmp_path)
    assert [(point.label, point.tokens_per_query) for point in points] == [
        ("corank: hybrid", None),
        ("corank: corank", 718.0),
    ]
