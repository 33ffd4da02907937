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
