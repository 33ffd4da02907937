"""The corpus indices: BM25 (tantivy) and dense (faiss) over the store's chunks, kept in step with the store."""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from strata.config import Settings
from strata.index.bm25 import BM25Index
from strata.index.state import IndexSyncStats, SyncProgress
from strata.index.dense import DenseIndex
from strata.store.sqlite import CorpusStore

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

    def __init__(self, store: CorpusStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings.index
        self.folder = Path(settings.store.home) / "index"
        self.bm25 = BM25Index(self.folder / "bm25")
        self.dense = DenseIndex(self.folder / "dense", settings.index)

    def sync(self, progress_callback: ProgressCallback | None = None) -> SyncReport:
        """Bring both indices up to date with the store; safe to call any time, a no-op when nothing changed."""
        with _exclusive(self.folder / "sync.lock"):
            bm25 = self.bm25.sync(self.store, _named(progress_callback, "bm25"))
            dense = (
                self.dense.sync(self.store, _named(progress_callback, "dense"))
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


def _named(callback: ProgressCallback | None, name: str) -> SyncProgress | None:
    if callback is None:
        return None
    return lambda done, expected: callback(name, done, expected)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One sync at a time across processes (tantivy allows one writer; two dense syncs would race on the state)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
