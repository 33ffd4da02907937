"""The README's ToC tables come from benchmarks/stair.py's results file: every part, metric, training run and test."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPORT = Path(__file__).resolve().parents[1] / "benchmarks" / "report.py"


def load_report():
    spec = importlib.util.spec_from_file_location("report", REPORT)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return report


def cell(r1: float, hallucination: float | None = None) -> dict:
    metrics = {"R@1": r1, "R@3": 0.9, "nDCG@3": 0.8}
    if hallucination is not None:
        metrics["hallucination"] = hallucination
    return {"queries": 60, "metrics": metrics, "latency_ms_mean": 1234.0}


def test_every_stair_part_is_rendered_with_training_and_the_randomization_test(tmp_path: Path) -> None:
    comparison = {"metric": "R@1", "queries": 60, "system_file": "x/small-all-stair.json", "system_mean": 0.2,
                  "baseline_file": "x/small-all-bm25.json", "baseline_mean": 0.7, "mean_delta": -0.5, "p_value": 0.0001,
                  "permutations": 10000, "seed": 7, "wins": 1, "ties": 20, "losses": 39}
    training = {"mode": "stair", "device": "cpu", "train_examples": 102, "steps": 6, "epochs": 0.24, "seconds": 600.0,
                "seconds_per_step": 100.0, "best_dev_r1": 0.0, "best_step": 6, "stopped_early": False}
    (tmp_path / "stair-cpu.json").write_text(json.dumps({
        "seed": 7,
        "full_books": {"title": "Whole books", "methods": {"bm25": {"all": cell(0.719), "psych": cell(0.784), "soc": cell(0.65)}}},
        "small_book": {"title": "Small book", "sample": "60 of 120", "train_budget_s_per_adapter": 600,
                       "training": [training], "comparisons": [comparison],
                       "methods": {"stair": {"all": cell(0.2, 0.05), "psych": cell(0.2, 0.05)}}},
        "zero_shot_llm": {"title": "Zero-shot", "partial": True, "methods": {"llm": {"all": cell(0.0, 1.0)}}},
    }))

    text = load_report().toc_sections(tmp_path)

    assert text.index("### ToC retrieval: Whole books") < text.index("### ToC retrieval: Small book")
    assert "| bm25 | all | 60 | 0.719 | 0.900 | 0.800 | 0 (by construction) | 1234 |" in text
    assert "| bm25 | psych | 60 | 0.784 |" in text and "| bm25 | soc | 60 | 0.650 |" in text
    # One book: its row only, not an 'all' row repeating it.
    assert "| stair | psych | 60 | 0.200 | 0.900 | 0.800 | 0.050 |" in text and "| stair | all |" not in text
    assert "Training stair (cpu): 102 synthetic questions, 6 steps (0.24 epochs) in 600 s" in text
    assert "small-all-stair 0.200 vs small-all-bm25 0.700 (delta -0.500), p = 0.0001 (10,000 permutations, " \
        "seed 7)" in text
    assert "Questions: 60 of 120." in text and "600 wall seconds per adapter" in text
    assert "Partial: the run stopped" in text
    assert text.count("stair: rankings decode through the trie of leaves") == 1  # only the part with a fine-tuned method


def load_run(method: str, p50: float, errors: int) -> dict:
    return {"command": f"python benchmarks/load.py --method {method}", "clients": 50, "seconds": 30.0, "method": method,
            "k": 10, "queries": 23, "corpus": {"papers": 39, "chunks": 5673}, "requests_ok": 100, "errors": errors,
            "throughput_rps": 3.3, "latency_ms": {"p50": p50, "p95": 2 * p50, "p99": 3 * p50},
            "machine": {"cpus": 2, "note": "shared"}}


def scale_size(chunks: int, kind: str) -> dict:
    build = {"chunks": chunks, "dense_kind": kind, "build_seconds": chunks / 100, "store_seconds": 1.0,
             "bm25_seconds": 2.0, "dense_seconds": 3.0, "peak_rss_mb": 500.0, "source_rss_mb": 100.0, "disk_mb": 300.0,
             "load_average_1min": 2.0, "command": f"python benchmarks/scale.py --sizes {chunks}"}
    search = {"queries": 100, "depth": 1000, "strata_p50_ms": 42.0, "strata_p95_ms": 60.0, "direct_p50_ms": 30.0,
              "direct_p95_ms": 50.0, "ratio_p50": 1.4, "ratio_p95": 1.2, "load_average_1min": 8.0}
    return {"build": build, "search": search}


def test_scale_load_and_reliability_results_are_rendered_with_extrapolation_marked(tmp_path: Path) -> None:
    backend = {"nDCG@10": 0.7, "p50_ms": 100.0, "p95_ms": 200.0}
    (tmp_path / "scale.json").write_text(json.dumps({
        "machine": {"cpus": 2, "nice": 10}, "corpus": "recombined sentences",
        "sizes": [scale_size(100_000, "flat"), scale_size(500_000, "hnsw")],
        "extrapolated": {"chunks": 2_500_000, "build_seconds": 25_000.0, "peak_rss_mb": 8000.0, "disk_mb": 10000.0},
        "backends": {"queries": 300, "migrate_seconds": 5.0, **{f"{store}/{method}": backend for store in
                     ("sqlite", "postgres") for method in ("bm25", "dense", "hybrid")},
                     **{f"delta/{method}": 0.0 for method in ("bm25", "dense", "hybrid")}},
    }))
    (tmp_path / "load.json").write_text(json.dumps(load_run("hybrid", 900.0, 0)))
    (tmp_path / "load-bm25.json").write_text(json.dumps(load_run("bm25", 200.0, 2)))
    (tmp_path / "reliability.json").write_text(json.dumps({
        "crash": {"trials": 20, "dense_trials": 3, "kills": 38, "papers_lost": 0, "failed_trials": 1},
        "fuzz": {"inputs": 1529, "outcomes": {"parsed": 621, "error": 907, "hang": 1}, "worker_returncode": 0},
    }))

    text = load_report().render_results(tmp_path, [])

    # Growth per 1k chunks: 10 s and (500 - 100) MB over 100k chunks -> 10.00 s / 4.00 MB; over 500k -> 10.00 / 0.80.
    assert "| 100,000 | flat | 1,000 (store 1, BM25 2, vectors 3) | 500 | 300 | 10.00 / 4.00 | 42 / 60 | 30 / 50 | " \
        "1.40 / 1.20 |" in text
    assert "| 500,000 | hnsw | 5,000 (store 1, BM25 2, vectors 3) | 500 | 300 | 10.00 / 0.80 |" in text
    assert "| 2,500,000 (extrapolated, not measured) | hnsw | ~25,000 | ~8,000 | ~10,000 | - | - | - | - |" in text
    (source,) = [line for line in text.splitlines() if line.startswith("Source: `benchmarks/results/scale.json`")]
    assert "`python benchmarks/scale.py --sizes 100000`" in source and "--sizes 500000`" in source
    assert "| hybrid | 0.7000 | 0.7000 | +0.0000 | 100 / 100 |" in text
    assert "| bm25 | 50 | 100 | 2 | 3.3 | 200 | 400 | 600 |" in text and "| hybrid | 50 | 100 | 0 | 3.3 | 900 |" in text
    assert "| documents lost | 0 |" in text and "| hangs (past the per-file limit) | 1 |" in text
    assert "| LLM calls ending in a clear error | - |" in text  # no LLM part in this file
