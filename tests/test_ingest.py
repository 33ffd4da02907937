"""Ingest on real PDFs: bad files are reported per file, good ones are kept, re-ingest is a no-op."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from strata.cli import main
from strata.documents.model import Locator
from strata.pipeline.ingest import ingest
from strata.store import open_store

PDFS = ["10.1016%2Fj.cell.2024.02.016.pdf", "10.1007%2Fs00125-024-06103-w.pdf"]


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory, shared_data: Path) -> Path:
    """Two real LitQA2 PDFs plus a truncated copy and a non-PDF named .pdf."""
    folder = tmp_path_factory.mktemp("pdfs")
    for name in PDFS:
        shutil.copy(shared_data / "litqa2" / "pdfs" / name, folder / name)
    whole = (shared_data / "litqa2" / "pdfs" / PDFS[0]).read_bytes()
    (folder / "truncated.pdf").write_bytes(whole[: len(whole) // 3])
    (folder / "not-a-pdf.pdf").write_text("this is plain text, not a PDF")
    return folder


@pytest.fixture(scope="module")
def ingested(corpus_folder: Path, tmp_path_factory):
    from strata.config import Settings

    settings = Settings.load(overrides={"store.home": str(tmp_path_factory.mktemp("home"))})
    return settings, ingest([corpus_folder], settings)


def test_bad_files_fail_alone_with_a_reason(ingested):
    _, report = ingested
    failed = {Path(outcome.path).name: outcome.error for outcome in report.errors}
    assert set(failed) == {"truncated.pdf", "not-a-pdf.pdf"}
    assert all(reason for reason in failed.values())
    assert report.count("ok") == 2
    assert sum(outcome.papers_added for outcome in report.files) == 2


def test_reingest_skips_unchanged_files_and_keeps_everything(ingested, corpus_folder):
    settings, first = ingested
    with open_store(settings) as store:
        before = store.stats()
    again = ingest([corpus_folder], settings)
    assert again.count("skipped") == 2 and again.count("failed") == 2
    with open_store(settings) as store:
        assert store.stats() == before


def test_search_results_carry_locators_that_reproduce_their_text(ingested, capsys):
    from strata.corpus import Corpus

    settings, _ = ingested
    with Corpus.open(settings) as corpus:
        ranking = corpus.searcher.search("DNA methylation", k=2)
    assert ranking.candidates
    hits = [hit for candidate in ranking.candidates for hit in candidate.chunks]
    with open_store(settings) as store:
        for hit in hits:
            _, text = store.locate(Locator.parse(str(hit.locator)))
            assert text == hit.text
    # and through the CLI, as a user would
    hit = hits[0]
    assert main(["show", str(hit.locator), "--store.home", str(settings.store.home)]) == 0
    assert hit.text in capsys.readouterr().out


def test_a_search_snippet_is_never_blank_on_a_terminal() -> None:
    from strata.cli import _snippet

    # unmapped PDF glyphs (private use), zero-width and control characters print as nothing
    assert _snippet("\ue000\ue012 \u200b\x07") == "(no printable text)"
    assert _snippet("Graphene\ue000 conducts\u200b\n\nwell") == "Graphene conducts well"
    assert _snippet("word " * 100, width=20) == "word word word word…"


def test_a_changed_file_that_drops_a_record_drops_its_paper_and_nothing_else(tmp_path: Path):
    import json

    from strata.config import Settings
    from strata.corpus import Corpus

    def write(path: Path, ids: list[str]) -> None:
        path.write_text("".join(json.dumps({"_id": i, "title": f"Zinc study {i}", "text": f"Zinc trial {i} in colds."})
                                + "\n" for i in ids))  # fmt: skip

    folder = tmp_path / "corpus"
    folder.mkdir()
    write(folder / "one.jsonl", ["a", "b"])
    write(folder / "two.jsonl", ["c"])
    settings = Settings.load(overrides={"store.home": str(tmp_path / "home"), "index.dense": False})
    ingest([folder], settings)
    write(folder / "one.jsonl", ["a"])  # record b removed from the file
    again = ingest([folder], settings)
    assert [(Path(o.path).name, o.papers_removed) for o in again.files if o.status == "ok"] == [("one.jsonl", 1)]
    with Corpus.open(settings) as corpus:
        assert corpus.store.paper_ids() == ["a", "c"]
        assert "b" not in corpus.searcher.search("zinc trial b colds", k=5, method="bm25").paper_ids


def test_a_second_file_whose_paper_takes_a_stored_id_fails_and_replaces_nothing(tmp_path: Path):
    import json

    from strata.config import Settings
    from strata.pipeline.ingest import ingest_file
    from strata.store.sqlite import CorpusStore

    first, second = tmp_path / "one" / "corpus.jsonl", tmp_path / "two" / "corpus.jsonl"
    for path, title in ((first, "Zinc"), (second, "Iron")):
        path.parent.mkdir()
        path.write_text(json.dumps({"_id": "a", "title": f"{title} study", "text": f"{title} trial."}) + "\n")
    with CorpusStore(tmp_path / "corpus.sqlite") as store:
        assert ingest_file(store, first, Settings.load()).status == "ok"
        clash = ingest_file(store, second, Settings.load())
        assert clash.status == "failed" and f"already held by {first.resolve()}" in (clash.error or "")
        assert store.get_paper("a").title == "Zinc study"  # the stored paper is kept
        first.unlink()  # its file gone (moved or deleted): the id is free to take
        assert ingest_file(store, second, Settings.load()).status == "ok"
        assert store.get_paper("a").title == "Iron study"


def test_a_pdf_with_nothing_but_a_title_fails_instead_of_storing_an_empty_paper(tmp_path: Path):
    # A cover page before scanned pages without a text layer: stored, it was a paper nothing could find.
    import pymupdf

    from strata.config import Settings
    from strata.pipeline.ingest import ingest_file
    from strata.store.sqlite import CorpusStore

    path = tmp_path / "cover.pdf"
    document = pymupdf.open()
    document.new_page().insert_text((72, 90), "A Study of Zinc Finger Binding", fontname="helv", fontsize=18)
    document.save(path)
    document.close()
    with CorpusStore(tmp_path / "corpus.sqlite") as store:
        outcome = ingest_file(store, path, Settings.load())
        assert (outcome.status, outcome.papers_added) == ("failed", 0)
        assert "no text extracted" in (outcome.error or "")
        assert not store.paper_ids()


@pytest.mark.parametrize("on_thread", [False, True], ids=["main-thread", "worker-thread"])
def test_the_parse_time_limit_never_fires_inside_the_store_write(tmp_path: Path, monkeypatch, on_thread: bool):
    """`parsing.per_file_timeout_s` bounds the parsing alone: a file parsed in time is stored however long its store
    write waits for the database (here another writer holds it past the limit). A limit firing inside BEGIN IMMEDIATE
    once left the connection in a transaction, and every later write on it failed."""
    import sqlite3
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import strata.pipeline.ingest as ingest_module
    from strata.config import Settings
    from strata.documents.model import Paper
    from strata.store.sqlite import CorpusStore

    limit_s = 0.2
    settings = Settings.load(overrides={"store.home": str(tmp_path / "home"), "parsing.per_file_timeout_s": limit_s})
    parsed = Paper(id="p1", title="A paper", source_format="test", text="Parsed at once.")
    monkeypatch.setattr(ingest_module, "iter_papers", lambda path, parsing: iter([parsed]))
    source = tmp_path / "paper.json"
    source.write_text("{}")
    with CorpusStore(tmp_path / "corpus.sqlite") as store:
        other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer, done only well after the time limit
        threading.Timer(limit_s * 5, other.execute, ["COMMIT"]).start()
        if on_thread:
            with ThreadPoolExecutor(1) as pool:
                outcome = pool.submit(ingest_module.ingest_file, store, source, settings).result()
        else:
            outcome = ingest_module.ingest_file(store, source, settings)
        other.close()
        assert (outcome.status, outcome.papers_added, outcome.error) == ("ok", 1, None)
        assert not store._db.in_transaction
        store.record_file("next.pdf", "sha", "ok")  # the connection takes the next write
        assert store.has_paper("p1") and store.file_record("next.pdf") is not None


@pytest.mark.parametrize("on_thread", [False, True], ids=["main-thread", "worker-thread"])
def test_the_parse_time_limit_counts_the_parsing_of_every_paper_of_a_file(tmp_path: Path, monkeypatch, on_thread):
    """The clock stops while each paper is stored but is not reset: papers each parsed within the limit, together
    past it, fail the file."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import strata.pipeline.ingest as ingest_module
    from strata.config import Settings
    from strata.documents.model import Paper

    def slow_papers(path, parsing):
        for number in range(10):
            time.sleep(0.1)
            yield Paper(id=f"p{number}", source_format="test", text="Parsed slowly.")

    monkeypatch.setattr(ingest_module, "iter_papers", slow_papers)
    settings = Settings.load(overrides={"parsing.per_file_timeout_s": 0.35})

    def parse() -> None:
        for _ in ingest_module.parse_file(tmp_path / "papers.jsonl", settings):
            time.sleep(0.2)  # storing the paper: not counted

    with pytest.raises(TimeoutError, match="per_file_timeout_s"):
        if on_thread:
            with ThreadPoolExecutor(1) as pool:
                pool.submit(parse).result()
        else:
            parse()
