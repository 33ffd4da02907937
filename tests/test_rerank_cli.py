"""`strata features` and `strata train-reranker` end to end on a small corpus, with the scripted fake LLM in place
of the embedded model: what they print, what they save, and that a second `features` run costs no LLM call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus_support import bm25_corpus
from test_rerank_unit import RankingBackend

import strata.llm
from strata.cli import main
from strata.config import LLMSettings
from strata.llm import LLMClient

pytestmark = pytest.mark.slow  # loads the packaged MiniLM (features' vectors, the cross-encoder's start)

PAPERS = {
    f"p{number}": (f"Zinc trial {number}", f"Zinc lozenges shortened colds by {number} days in trial {number}.")
    for number in range(6)
}


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    with bm25_corpus(tmp_path, PAPERS) as (settings, _):
        return settings.store.home


def use_backend(monkeypatch: pytest.MonkeyPatch, backend: RankingBackend) -> None:
    monkeypatch.setattr(strata.llm, "make_client", lambda settings, **_: LLMClient(backend, LLMSettings()))


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_features_command_extracts_each_paper_once(home, monkeypatch, capsys):
    backend = RankingBackend()
    use_backend(monkeypatch, backend)
    first = run_json(capsys, "features", "--store.home", str(home), "--index.dense", "false", "--json")
    assert (first["documents"], first["extracted"], first["cached"], first["failed"]) == (6, 6, 0, [])
    assert len(backend.requests) == 6
    second = run_json(capsys, "features", "p1", "p2", "--store.home", str(home), "--index.dense", "false", "--json")
    assert (second["documents"], second["extracted"], second["cached"]) == (2, 0, 2)
    assert len(backend.requests) == 6  # nothing asked again
    assert (home / "rerank" / "features.sqlite3").is_file()


def test_train_reranker_command_saves_a_model_the_cross_encoder_method_loads(tmp_path, monkeypatch, capsys):
    papers = {f"p{n:02d}": (f"Zinc lozenge trial number {n}", " ".join(
        f"Zinc lozenges shortened colds by {n + s} days in arm {s} of trial {n}." for s in range(4)))
        for n in range(60)}  # fmt: skip
    with bm25_corpus(tmp_path, papers) as (settings, _):
        home = settings.store.home
    # 3 training queries, then one validation query for each held-out paper (4 or 5 of them)
    queries = ['{"query": "zinc and colds"}', '{"query": "how long do colds last"}', '{"query": "lozenge trial"}',
               *(f'{{"query": "zinc question {n}"}}' for n in range(6))]
    use_backend(monkeypatch, RankingBackend(scripted=queries))
    flags = ["--store.home", str(home), "--index.dense", "false", "--rerank.train_passages", "3",
             "--rerank.train_queries_per_source", "20", "--rerank.train_negatives", "2", "--rerank.train_epochs", "1",
             "--rerank.train_validation_share", "0.2", "--rerank.cross_encoder_depth", "5",
             "--rerank.train_max_length", "64"]  # fmt: skip
    report = run_json(capsys, "train-reranker", *flags, "--json")
    trained, validated = report["queries"], report["validation_queries"]
    assert trained["inverse-cloze"] == 2 * trained["title"] and trained["title"] < 20  # held-out papers left out
    assert set(validated) == {"llm"} and validated["llm"] >= 3 and report["failed_llm_queries"] == 0
    assert sum(report["pairs"].values()) == 3 * sum(report["queries"].values())  # a positive and 2 negatives each
    assert Path(report["model_dir"]) == home / "rerank" / "cross-encoder"
    assert (home / "rerank" / "cross-encoder" / "config.json").is_file()
    assert (home / "rerank" / "cross-encoder" / "fusion.json").is_file()
    from strata.train.cross_encoder import TrainingReport

    trained_report = TrainingReport.model_validate(report)
    assert trained_report.fusion.verdict() in trained_report.summary()  # the command says what validation decided
    assert main(["search", "zinc colds", "--store.home", str(home), "--index.dense", "false",
                 "--rerank.method", "cross-encoder"]) == 0  # fmt: skip
    assert "Zinc lozenge trial" in capsys.readouterr().out
