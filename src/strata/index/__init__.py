"""The corpus indices: BM25 (tantivy) and dense (faiss) over the store's chunks, kept in step with the store."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from pydantic import BaseModel, Field

from strata.config import IndexSettings, Settings
from strata.documents.model import Chunk, ContentType
from strata.index.bm25 import BM25Index
from strata.index.state import ChunkVectors, IndexSyncStats, SyncProgress
from strata.index.dense import DenseIndex
from strata.store.protocol import WritableStore
from strata.store.locking import hold_lock

if TYPE_CHECKING:
    from strata.index.postgres import PostgresBM25Index, PostgresDenseIndex
    from strata.store.postgres import PostgresCorpusStore

# (index name, chunks indexed so far, most chunks this sync can index)
ProgressCallback = Callable[[str, int, int], None]


class SyncReport(BaseModel):
    chunks_added: int = Field(description="Chunks newly indexed (by BM25; dense indexes the same ones when enabled)")
    chunks_deleted: int = Field(description="Removed chunks dropped from the indices")
    bm25_seconds: float
    dense_seconds: float
    bm25_size: int = Field(description="Chunks in the BM25 index after the sync")
    dense_size: int = Field(description="Chunks in the dense index after the sync (0 when disabled)")


class CorpusIndex:
    """BM25 and dense indices of one store, under `settings.store.home / 'index'`."""

    def __init__(self, store: WritableStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings.index
        self.lock_timeout_s = settings.store.lock_timeout_s
        self.folder = Path(settings.store.home) / "index"
        if _is_postgres(store):
            # The PostgreSQL store keeps its indices in its own database (tables and pgvector), with the same methods.
            from strata.index.postgres import PostgresBM25Index, PostgresDenseIndex

            self.bm25: BM25Index | PostgresBM25Index = PostgresBM25Index(store, settings.index.reference_entries)
            self.dense: DenseIndex | PostgresDenseIndex = PostgresDenseIndex(store, settings.index)
            self._sync_lock: Callable[[], AbstractContextManager[None]] = store.sync_lock
        else:
            self.bm25 = BM25Index(self.folder / "bm25", settings.index.reference_entries)
            self.dense = DenseIndex(self.folder / "dense", settings.index)
            # One sync at a time across processes: tantivy allows one writer, and two dense syncs would race.
            # A partial, not a lambda over self: that cycle kept every replaced index (faiss copy, tantivy readers)
            # alive in a server, whose startup objects gc.freeze() takes out of the collector's sight.
            self._sync_lock = partial(hold_lock, self.folder / "sync.lock", self.lock_timeout_s, "index sync")

    def sync(
        self, progress_callback: ProgressCallback | None = None, vectors_of: ChunkVectors | None = None
    ) -> SyncReport:
        """Bring both indices up to date with the store; safe to call any time, a no-op when nothing changed.

        `vectors_of` supplies chunk vectors computed elsewhere (Ray workers, an earlier index) instead of the encoder.
        """
        with self._sync_lock():
            bm25 = self.bm25.sync(self.store, _named(progress_callback, "bm25"))
            dense = (
                self.dense.sync(self.store, _named(progress_callback, "dense"), vectors_of)
                if self.settings.dense
                else IndexSyncStats()
            )
        return SyncReport(
            chunks_added=bm25.added,
            chunks_deleted=bm25.deleted,
            bm25_seconds=bm25.seconds,
            dense_seconds=dense.seconds,
            bm25_size=bm25.size,
            dense_size=dense.size,
        )


def is_indexed(chunk: Chunk, settings: IndexSettings) -> bool:
    """Whether the search indices hold `chunk`: reference-list entries only with `index.reference_entries` (the
    store's `chunks_after(references=False)` applies the same rule in SQL)."""
    return settings.reference_entries or chunk.content_type != ContentType.REFERENCE


def _is_postgres(store: WritableStore) -> TypeGuard[PostgresCorpusStore]:
    # By module, so the embedded stack never imports psycopg.
    return type(store).__module__ == "strata.store.postgres"


def _named(callback: ProgressCallback | None, name: str) -> SyncProgress | None:
    if callback is None:
        return None
    return lambda done, expected: callback(name, done, expected)
