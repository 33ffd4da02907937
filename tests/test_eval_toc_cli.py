"""`strata eval toc` end to end on a tiny OpenStax-format book (BM25: no model), and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toc_support import write_openstax_book

from strata import cli
from strata.eval.compare import compare, load_per_query
from strata.eval.results import load_result
from strata.eval.toc import load_toc_queries

CHAPTERS = {
    "The Ocean": {
        "Tides": "The moon pulls on the sea. Tides rise and fall twice a day because of lunar gravity.",
        "Coral Reefs": "Coral polyps build reefs from calcium carbonate in warm shallow water.",
    },
    "The Sky": {
        "Clouds": "Water vapour condenses into droplets and forms cumulus and stratus clouds.",
        "Lightning": "Charge separation in storm clouds discharges as lightning and thunder.",
    },
}
# (question, gold section); the last one is worded so that BM25 picks the wrong section.
QUESTIONS = [
    ("Why do tides rise and fall twice a day?", ("The Ocean", "Tides")),
    ("What do coral polyps build reefs from?", ("The Ocean", "Coral Reefs")),
    ("How do cumulus clouds form from water vapour?", ("The Sky", "Clouds")),
    ("Which storm clouds have lunar gravity and tides?", ("The Sky", "Lightning")),
]


def write_book(root: Path, name: str = "tiny-book") -> Path:
    return write_openstax_book(root, name, CHAPTERS, QUESTIONS)


def test_bm25_on_a_tiny_book_writes_predictions_and_a_comparable_result(tmp_path: Path, capsys) -> None:
    data = write_book(tmp_path / "data")
    out = tmp_path / "out"

    assert cli.main(["eval", "toc", "--dataset", str(data), "--method", "bm25", "--output", str(out)]) == 0

    printed = capsys.readouterr().out
    assert "tiny-book (all, 4 questions) bm25: R@1 0.7500" in printed  # one book: named after it
    saved = load_result(out / "tiny-book-all-bm25.json")
    (result,) = saved.experiments
    assert result.metrics["R@1"] == 0.75 and result.metrics["R@3"] == 1.0
    assert result.details["per_book"] == {"tiny-book": result.metrics} and len(saved.datasets[0].fingerprint) == 64
    assert saved.settings["toc"]["top_k"] == 3 and result.cost["wall_seconds"] >= result.cost["setup_seconds"] > 0
    assert saved.command == f"strata eval toc --dataset {data} --method bm25 --output {out}"
    predictions = [json.loads(line) for line in (out / "tiny-book-all-bm25.predictions.jsonl").read_text().splitlines()]
    assert [p["query_id"] for p in predictions] == [f"tiny-book:q{i}" for i in range(4)]
    assert predictions[0]["ranking"]["leaves"][0]["path"] == ["The Ocean", "Tides"]
    assert predictions[3]["ranking"]["leaves"][0]["path"] == ["The Ocean", "Tides"]  # the planted miss
    # The result file is what `strata eval compare` reads; compared with itself nothing differs.
    assert load_per_query(out / "tiny-book-all-bm25.json", "R@1") == {
        "tiny-book:q0": 1.0, "tiny-book:q1": 1.0, "tiny-book:q2": 1.0, "tiny-book:q3": 0.0}
    same = compare(out / "tiny-book-all-bm25.json", out / "tiny-book-all-bm25.json", "R@1", permutations=100)
    assert same.mean_delta == 0.0 and same.ties == 4


def test_the_matrix_can_run_it_and_one_book_can_be_chosen(tmp_path: Path) -> None:
    data = write_book(tmp_path / "data")
    write_book(tmp_path / "data", "other-book")
    argv = ["eval", "toc", "--dataset", str(data), "--method", "bm25", "--output", str(tmp_path / "out")]

    assert cli.run_matrix_command(argv)["R@1"] == pytest.approx(0.75)  # both books, the same questions each
    metrics = cli.run_matrix_command([*argv, "--book", "other-book"])
    assert metrics == {"R@1": 0.75, "R@3": 1.0, "nDCG@3": pytest.approx(metrics["nDCG@3"])}
    (chosen,) = load_result(tmp_path / "out" / "other-book-other-book-bm25.json").experiments
    assert chosen.queries == 4 and list(chosen.details["per_book"]) == ["other-book"]


def test_queries_come_from_the_shared_openstax_loader(tmp_path: Path) -> None:
    data = write_book(tmp_path / "data")
    queries = load_toc_queries(data / "tiny-book")
    assert [q.gold_path for q in queries] == [gold for _, gold in QUESTIONS] and queries[0].book == "tiny-book"


def test_bad_requests_are_clear_errors(tmp_path: Path, capsys) -> None:
    data = write_book(tmp_path / "data")
    base = ["eval", "toc", "--dataset", str(data), "--output", str(tmp_path / "out")]

    assert cli.main([*base, "--method", "stair"]) == 2
    assert "--adapter is required for stair" in capsys.readouterr().err
    assert cli.main([*base, "--method", "bm25", "--adapter", str(tmp_path)]) == 2
    assert "only for stair and dsi" in capsys.readouterr().err
    assert cli.main([*base, "--book", "physics"]) == 2
    assert "no book named 'physics'" in capsys.readouterr().err
    assert cli.main(["eval", "toc", "--dataset", str(tmp_path / "nowhere"), "--output", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_dense_embeds_the_leaves_and_records_its_encoder(tmp_path: Path) -> None:
    data = write_book(tmp_path / "data")
    argv = ["eval", "toc", "--dataset", str(data), "--method", "dense", "--output", str(tmp_path / "out")]

    metrics = cli.run_matrix_command(argv)

    assert metrics["R@3"] == 1.0 and metrics["R@1"] >= 0.75  # four leaves, the first three questions are easy
    saved = load_result(tmp_path / "out" / "tiny-book-all-dense.json")
    assert saved.experiments[0].details["models"] == {"embedder": saved.settings["embedding"]["model"]}
    assert "llm" not in saved.settings
