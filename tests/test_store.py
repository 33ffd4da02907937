from strata.documents.builder import PaperBuilder
from strata.documents.model import Locator, Reference
from strata.store.sqlite import CorpusStore


def _paper(paper_id: str, body: str, doi: str | None = None, references: list[Reference] | None = None, title=None):
    builder = PaperBuilder(paper_id, "test")
    builder.open_section("Results", level=1, page=2)
    builder.add_block(body, page=2)
    builder.references.extend(references or [])
    return builder.build(title=title or f"Paper {paper_id} about things", doi=doi)


def test_put_and_get_round_trip(tmp_path):
    with CorpusStore(tmp_path / "c.db") as store:
        paper = _paper("a", "Alpha body text.", doi="10.1/a", references=[Reference(raw="x", doi="10.1/b")])
        store.put_paper(paper, "sha-a")
        loaded = store.get_paper("a")
    assert loaded == paper.model_copy(update={"references": loaded.references})
    assert loaded.references[0].doi == "10.1/b"


def test_replacing_a_paper_logs_its_old_chunks_as_deleted(tmp_path):
    with CorpusStore(tmp_path / "c.db") as store:
        store.put_paper(_paper("a", "old"), "sha1")
        old_rowids = [s.rowid for s in store.chunks_after(0)]
        store.put_paper(_paper("a", "new"), "sha2")
        assert [rowid for _, rowid in store.deletions_after(0)] == old_rowids
        assert [s.chunk.text for s in store.chunks_after(0)] == ["new"]
        assert store.get_chunks(old_rowids) == {}
        assert store.has_paper("a", "sha2") and not store.has_paper("a", "sha1")


def test_references_resolve_by_doi_arxiv_and_long_title_but_not_self(tmp_path):
    with CorpusStore(tmp_path / "c.db") as store:
        store.put_paper(_paper("b", "b", doi="10.1/b"), "s")
        store.put_paper(_paper("c", "c", title="A long and distinctive title of paper c"), "s")
        refs = [
            Reference(raw="doi ref", doi="10.1/b"),
            Reference(raw="title ref", title="A long and distinctive title of paper C!"),
            Reference(raw="short title", title="Paper"),
            Reference(raw="self", doi="10.1/a"),
            Reference(raw="outside", doi="10.9/zzz"),
        ]
        store.put_paper(_paper("a", "a", doi="10.1/a", references=refs), "s")
        assert store.resolve_references() == 2
        assert store.citation_edges() == [("a", "b"), ("a", "c")]
        assert [r.resolved_paper_id for r in store.references_of("a")] == ["b", "c", None, None, None]


def test_locate_returns_exact_text_with_section_and_page(tmp_path):
    with CorpusStore(tmp_path / "c.db") as store:
        store.put_paper(_paper("a", "The measured value was 42 mg."), "s")
        chunk = store.chunks_after(0)[0].chunk
        located, text = store.locate(Locator.parse(f"a#{chunk.char_start + 4}-{chunk.char_start + 12}"))
    assert text == "measured"
    assert located.section_path == ("Results",) and located.page == 2


def test_store_survives_reopen_and_counts(tmp_path):
    with CorpusStore(tmp_path / "c.db") as store:
        store.put_paper(_paper("a", "x"), "s")
        store.record_file("/f.pdf", "s", "failed", error="broken")
    with CorpusStore(tmp_path / "c.db") as store:
        stats = store.stats()
        assert (stats.papers, stats.chunks, stats.files_failed) == (1, 1, 1)
        assert store.failed_files()[0].error == "broken"


def test_an_interruption_right_after_begin_rolls_the_transaction_back(tmp_path):
    """An exception landing as BEGIN IMMEDIATE returns (Ctrl-C, an asynchronous exception) once left the connection
    in a transaction, and every later write on it failed."""
    import pytest

    class InterruptedAfterBegin:
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *args):
            result = self.db.execute(sql, *args)
            if sql == "BEGIN IMMEDIATE":
                raise KeyboardInterrupt
            return result

        def __getattr__(self, name):
            return getattr(self.db, name)

    with CorpusStore(tmp_path / "c.db") as store:
        connection = store._db
        store._db = InterruptedAfterBegin(connection)
        with pytest.raises(KeyboardInterrupt):
            store.put_paper(_paper("a", "x"), "s")
        store._db = connection
        assert not connection.in_transaction
        store.put_paper(_paper("a", "x"), "s")
        assert store.has_paper("a")
