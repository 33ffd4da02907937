"""BM25 and dense indices inside the PostgreSQL store's database, for several API replicas sharing one corpus.

BM25 is an inverted index in ordinary tables (term, field, chunk, term frequency, field length) scored in SQL with
tantivy's formula, analyser and length quantisation, so both backends rank alike. PostgreSQL's own full-text search
(tsvector, ts_rank) is not BM25: it has no inverse document frequency and another length normalisation, and ranked
SciFact measurably worse, so it is not used for ranking. Vectors live in pgvector: exact inner-product search until
`hnsw_above` vectors, then a pgvector HNSW index, which (unlike faiss HNSW) takes inserts and deletes in place.

Each batch of indexed chunks commits together with the index's watermark row, so a crash loses at most one batch
and never leaves the watermark ahead of the data.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from pydantic import Field

from strata.config import IndexSettings
from strata.index.bm25 import FIELDS, TermSearch, english_analyzer
from strata.index.dense import VectorSearch
from strata.encoders.embedder import Embedder, encoder_identity
from strata.index.state import ChunkVectors, Hits, IndexSyncStats, SyncProgress, SyncState
from strata.index.state import adopt_reference_choice
from strata.store.postgres import PostgresCorpusStore
from strata.store.protocol import PaperStore
from strata.store.sqlite import StoredChunk

BM25_FORMAT = "pg-bm25-v1"
DENSE_FORMAT = "pg-dense-v1"
# tantivy's BM25 constants.
K1 = 1.2
B = 0.75
READ_BATCH = 1000
DENSE_BATCH = 256
HNSW_EF_CONSTRUCTION = 64
PGVECTOR_MAX_EF_SEARCH = 1000

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS index_state (name TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bm25_postings (
    term TEXT NOT NULL, field SMALLINT NOT NULL, rowid BIGINT NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS bm25_postings_term ON bm25_postings (term, field) INCLUDE (rowid, tf, dl);
CREATE INDEX IF NOT EXISTS bm25_postings_rowid ON bm25_postings (rowid);
CREATE TABLE IF NOT EXISTS bm25_docs (rowid BIGINT PRIMARY KEY, lengths INTEGER[] NOT NULL);
CREATE TABLE IF NOT EXISTS bm25_stats (field SMALLINT PRIMARY KEY, docs BIGINT NOT NULL, tokens BIGINT NOT NULL);
"""

SEARCH_SQL = """
WITH q(term, weight) AS (SELECT * FROM unnest(%(terms)s::text[], %(weights)s::float8[])),
stats AS (SELECT field, docs::float8 AS n, tokens::float8 / GREATEST(docs, 1) AS avgdl FROM bm25_stats),
df AS (
    SELECT p.field, p.term, count(*)::float8 AS df FROM bm25_postings p JOIN q ON q.term = p.term GROUP BY 1, 2
),
per_field AS (
    SELECT p.rowid, p.field,
           sum(q.weight * ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) * (1 + %(k1)s) * p.tf
               / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.dl / s.avgdl))) AS score
    FROM bm25_postings p
    JOIN q ON q.term = p.term
    JOIN df ON df.field = p.field AND df.term = p.term
    JOIN stats s ON s.field = p.field
    {restriction}
    GROUP BY p.rowid, p.field
)
SELECT rowid, max(score) + %(tie)s * (sum(score) - max(score)) AS score
FROM per_field GROUP BY rowid ORDER BY score DESC, rowid LIMIT %(depth)s
"""
ONLY_PAPERS = "WHERE p.rowid IN (SELECT rowid FROM chunks WHERE paper_id = ANY(%(papers)s))"


class PgDenseState(SyncState):
    model: str = Field(description="Embedding model setting the vectors came from")
    title_prefix: bool = Field(description="Whether chunks were embedded with their paper's title")
    dimension: int = 0


class _PgIndex:
    """A connection of its own (searches never queue behind the store's writes) and the watermark row."""

    name: str

    def __init__(self, store: PostgresCorpusStore) -> None:
        self._db = store.connection()
        self._lock = threading.RLock()
        with self._db.transaction():
            store.advisory_lock(self._db, _SCHEMA_LOCK, "creating the index tables")
            self._db.execute(SCHEMA)
        register_vector(self._db)

    def _read_state(self, model: type[SyncState]) -> SyncState | None:
        rows = self._db.execute("SELECT state FROM index_state WHERE name = %s", (self.name,)).fetchall()
        return model.model_validate_json(rows[0][0]) if rows else None

    def _write_state(self, cursor: psycopg.Cursor, state: SyncState) -> None:
        cursor.execute(
            "INSERT INTO index_state VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state",
            (self.name, state.model_dump_json()),
        )

    def _start_sync(self, store: PaperStore, state: SyncState) -> tuple[IndexSyncStats, int]:
        """Drop the chunks removed from the store since the last sync, committed with the deletion watermark; the
        stats so far and how many chunks may be new (for progress)."""
        expected = store.max_chunk_rowid() - state.chunk_rowid
        stats = IndexSyncStats()
        deletions = store.deletions_after(state.deletion_seq)
        if deletions:
            with self._lock, self._db.transaction(), self._db.cursor() as cursor:
                self._delete(cursor, [rowid for _, rowid in deletions])
                state.deletion_seq = deletions[-1][0]
                self._write_state(cursor, state)
            stats.deleted = len(deletions)
        return stats, expected

    def _scalar(self, sql: str) -> Any:
        """The one value of a query that always returns one row."""
        with self._lock:
            row = self._db.execute(sql).fetchone()
        assert row is not None
        return row[0]

    @contextmanager
    def _batch_transaction(self, state: SyncState, batch: Sequence[StoredChunk]) -> Iterator[psycopg.Cursor]:
        """A cursor whose writes commit together with the watermark moved past `batch`."""
        with self._lock, self._db.transaction(), self._db.cursor() as cursor:
            yield cursor
            state.chunk_rowid = batch[-1].rowid
            self._write_state(cursor, state)

    def _delete(self, cursor: psycopg.Cursor, rowids: list[int]) -> None:
        """Remove these chunks from the index."""
        raise NotImplementedError

    def close(self) -> None:
        self._db.close()


_SCHEMA_LOCK = 0x5354524154410003


class PostgresBM25Index(_PgIndex, TermSearch):
    """Method for method like `strata.index.bm25.BM25Index` (search, search_terms, terms, rowids_of_papers)."""

    name = "bm25"

    def __init__(self, store: PostgresCorpusStore, references: bool = False) -> None:
        super().__init__(store)
        self.references = references
        self.analyzer = english_analyzer()

    def __len__(self) -> int:
        with self._lock:
            rows = self._db.execute("SELECT docs FROM bm25_stats WHERE field = 0").fetchall()
        return int(rows[0][0]) if rows else 0

    def _scored(
        self, weights: Mapping[str, float], depth: int, paper_ids: Collection[str] | None, title_tie_breaker: float
    ) -> Hits:
        terms = sorted(weights)
        params = {
            "terms": terms, "weights": [float(weights[t]) for t in terms], "k1": K1, "b": B,
            "tie": float(title_tie_breaker), "depth": depth, "papers": sorted(paper_ids or ()),
        }
        sql = SEARCH_SQL.format(restriction=ONLY_PAPERS if paper_ids is not None else "")
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        # float32 like tantivy, so near-equal scores tie (and break by row id) the same way in both backends
        return [rowid for rowid, _ in rows], np.array([score for _, score in rows], dtype=np.float32)

    def rowids_of_papers(self, paper_ids: Collection[str]) -> list[int]:
        """Row ids of every indexed chunk of these papers."""
        if not paper_ids:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT c.rowid FROM chunks c JOIN bm25_docs d ON d.rowid = c.rowid WHERE c.paper_id = ANY(%s)"
                " ORDER BY c.rowid",
                (sorted(paper_ids),),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def sync(self, store: PaperStore, progress: SyncProgress | None = None) -> IndexSyncStats:
        """Index chunks stored since the last sync and drop removed ones, one committed batch at a time."""
        started = time.perf_counter()
        state = self._state_for_writing(store)
        stats, expected = self._start_sync(store, state)
        while batch := store.chunks_after(state.chunk_rowid, limit=READ_BATCH, references=self.references):
            with self._batch_transaction(state, batch) as cursor:
                self._add(cursor, batch)
            stats.added += len(batch)
            if progress:
                progress(stats.added, expected)
        with self._lock:
            self._db.execute("ANALYZE bm25_postings")
        stats.size = len(self)
        stats.seconds = time.perf_counter() - started
        return stats

    def _state_for_writing(self, store: PaperStore) -> SyncState:
        with self._lock:
            state = self._read_state(SyncState)
            adopt_reference_choice(state, self.references, store)
            if state is not None and (state.format, state.references) == (BM25_FORMAT, self.references):
                return state
            with self._db.transaction():  # none yet, or another format: start over
                self._db.execute("TRUNCATE bm25_postings, bm25_docs, bm25_stats")
        return SyncState(format=BM25_FORMAT, references=self.references)

    def _add(self, cursor: psycopg.Cursor, batch: Sequence[StoredChunk]) -> None:
        lengths: dict[int, list[int]] = {}
        with cursor.copy("COPY bm25_postings (term, field, rowid, tf, dl) FROM STDIN") as copy:
            for stored in batch:
                lengths[stored.rowid] = []
                for field, text in enumerate((stored.chunk.text, stored.paper_title)):
                    terms = self.analyzer.analyze(text)
                    lengths[stored.rowid].append(len(terms))
                    stored_length = quantised_length(len(terms))
                    for term, count in sorted(Counter(terms).items()):
                        copy.write_row((term, field, stored.rowid, count, stored_length))
        cursor.executemany(
            "INSERT INTO bm25_docs VALUES (%s, %s) ON CONFLICT (rowid) DO NOTHING", list(lengths.items())
        )
        for field in range(len(FIELDS)):
            tokens = sum(per_field[field] for per_field in lengths.values())
            cursor.execute(
                "INSERT INTO bm25_stats VALUES (%s, %s, %s) ON CONFLICT (field) DO UPDATE SET"
                " docs = bm25_stats.docs + EXCLUDED.docs, tokens = bm25_stats.tokens + EXCLUDED.tokens",
                (field, len(batch), tokens),
            )

    def _delete(self, cursor: psycopg.Cursor, rowids: list[int]) -> None:
        for field in range(len(FIELDS)):
            cursor.execute(
                "UPDATE bm25_stats SET docs = docs - gone.n, tokens = bm25_stats.tokens - gone.removed FROM"
                " (SELECT count(*) AS n, COALESCE(sum(lengths[%s]), 0) AS removed FROM bm25_docs"
                "  WHERE rowid = ANY(%s)) AS gone WHERE field = %s",
                (field + 1, rowids, field),
            )
        cursor.execute("DELETE FROM bm25_docs WHERE rowid = ANY(%s)", (rowids,))
        cursor.execute("DELETE FROM bm25_postings WHERE rowid = ANY(%s)", (rowids,))


def quantised_length(length: int) -> int:
    """A field length as tantivy stores it (one byte per document, Lucene's SmallFloat.intToByte4 scheme: exact
    below 24, then 3 significant bits), so BM25 here normalises lengths exactly as the embedded index does."""
    if length < 24:
        return length
    value = length - 24
    bits = value.bit_length()
    if bits < 4:
        return 24 + value
    shift = bits - 4
    return 24 + (((value >> shift) & 0x07 | 0x08) << shift)


class PostgresDenseIndex(_PgIndex, VectorSearch):
    """Method for method like `strata.index.dense.DenseIndex` (search, search_text, sync), on pgvector."""

    name = "dense"

    def __init__(self, store: PostgresCorpusStore, settings: IndexSettings) -> None:
        if settings.embedding.sentences:
            # chunk_vectors holds one vector per chunk (its primary key): sentence vectors are the faiss index's.
            raise ValueError("index.embedding.sentences needs the sqlite backend (its faiss index)")
        super().__init__(store)
        self.settings = settings
        self.embedder = Embedder(settings.embedding)

    def __len__(self) -> int:
        if not self._has_table():
            return 0
        return int(self._scalar("SELECT count(*) FROM chunk_vectors"))

    def _empty(self) -> bool:
        return not self._has_table()

    def _nearest(self, vector: np.ndarray, depth: int, rowids: Collection[int] | None) -> Hits:
        if not self._has_table() or (rowids is not None and not rowids):
            return (), ()
        query = np.ascontiguousarray(vector, dtype=np.float32).ravel()
        ef_search = min(max(self.settings.hnsw_ef_search, depth), PGVECTOR_MAX_EF_SEARCH)
        where = "WHERE rowid = ANY(%(rowids)s)" if rowids is not None else ""
        with self._lock, self._db.transaction():
            self._db.execute(f"SET LOCAL hnsw.ef_search = {ef_search}")
            # With a filter, keep walking the graph until enough admitted vectors are found (pgvector >= 0.8).
            self._db.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            rows = self._db.execute(
                f"SELECT rowid, -(embedding <#> %(q)s) FROM chunk_vectors {where}"
                " ORDER BY embedding <#> %(q)s LIMIT %(depth)s",
                {"q": query, "rowids": sorted(rowids or ()), "depth": depth},
            ).fetchall()
        return [r for r, _ in rows], np.array([s for _, s in rows], dtype=np.float32)

    def sync(
        self,
        store: PaperStore,
        progress: SyncProgress | None = None,
        vectors_of: ChunkVectors | None = None,
    ) -> IndexSyncStats:
        """Embed (or take from `vectors_of`) chunks stored since the last sync, drop removed ones, and switch to an
        HNSW index once the collection passes `hnsw_above`."""
        started = time.perf_counter()
        embed = self._vector_source(vectors_of)
        state = self._state_for_writing(store)
        stats, expected = self._start_sync(store, state)
        references = self.settings.reference_entries
        while batch := store.chunks_after(state.chunk_rowid, limit=DENSE_BATCH, references=references):
            vectors = np.ascontiguousarray(embed(batch), dtype=np.float32)
            with self._batch_transaction(state, batch) as cursor:
                if not state.dimension:
                    state.dimension = int(vectors.shape[1])
                    cursor.execute(
                        f"CREATE TABLE chunk_vectors (rowid BIGINT PRIMARY KEY, embedding vector({state.dimension}))"
                    )
                self._write_vectors(cursor, batch, vectors)
            stats.added += len(batch)
            if progress:
                progress(stats.added, expected)
        stats.size = len(self)
        if stats.size > self.settings.hnsw_above:
            self._ensure_hnsw()
        stats.seconds = time.perf_counter() - started
        return stats

    def _delete(self, cursor: psycopg.Cursor, rowids: list[int]) -> None:
        if self._has_table():  # no table until the first vectors arrive
            cursor.execute("DELETE FROM chunk_vectors WHERE rowid = ANY(%s)", (rowids,))

    @staticmethod
    def _write_vectors(cursor: psycopg.Cursor, batch: Sequence[StoredChunk], vectors: np.ndarray) -> None:
        with cursor.copy("COPY chunk_vectors (rowid, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["bigint", "vector"])
            for stored, vector in zip(batch, vectors):
                copy.write_row((stored.rowid, vector))

    def _state_for_writing(self, store: PaperStore) -> PgDenseState:
        model, title_prefix = encoder_identity(self.settings.embedding), self.settings.embedding.title_prefix
        references = self.settings.reference_entries
        with self._lock:
            state = self._read_state(PgDenseState)
            adopt_reference_choice(state, references, store)
            if isinstance(state, PgDenseState) and (
                state.format, state.model, state.title_prefix, state.references
            ) == (DENSE_FORMAT, model, title_prefix, references):
                return state
            with self._db.transaction():  # none yet, or vectors from another model or text format: start over
                self._db.execute("DROP TABLE IF EXISTS chunk_vectors")
                self._db.execute("DELETE FROM index_state WHERE name = %s", (self.name,))
        return PgDenseState(format=DENSE_FORMAT, model=model, title_prefix=title_prefix, references=references)

    def _ensure_hnsw(self) -> None:
        with self._lock:
            self._db.execute(
                "CREATE INDEX IF NOT EXISTS chunk_vectors_hnsw ON chunk_vectors USING hnsw (embedding vector_ip_ops)"
                f" WITH (m = {self.settings.hnsw_m}, ef_construction = {HNSW_EF_CONSTRUCTION})"
            )

    def _has_table(self) -> bool:
        return bool(self._scalar("SELECT to_regclass('chunk_vectors') IS NOT NULL"))
