"""The corpus store: papers, sections, chunks, references and the citation graph."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

from strata.config import Settings, StoreSettings
from strata.store.locking import StoreBusyError
from strata.store.protocol import PaperStore, WritableStore
from strata.store.sqlite import CorpusStore

if TYPE_CHECKING:
    from strata.store.postgres import PostgresCorpusStore

# Either backend, as the Protocol both satisfy.
AnyStore = WritableStore


def local_store_path(store: StoreSettings) -> Path:
    """Where under `home` the corpus lives: the SQLite file, or the local PostgreSQL server's folder."""
    return store.home / ("corpus.sqlite3" if store.backend == "sqlite" else "postgres")


def open_store(settings: Settings) -> CorpusStore | PostgresCorpusStore:
    """The store `settings.store.backend` names: SQLite under `home`, or PostgreSQL (imported only when used)."""
    if settings.store.backend == "sqlite":
        return CorpusStore(local_store_path(settings.store), busy_timeout_s=settings.store.lock_timeout_s)
    from strata.store.postgres import PostgresCorpusStore, local_server_url

    url = settings.store.postgres_url or local_server_url(local_store_path(settings.store))
    return PostgresCorpusStore(url, lock_timeout_s=settings.store.lock_timeout_s)


__all__ = [
    "AnyStore", "CorpusStore", "PaperStore", "StoreBusyError", "WritableStore", "local_store_path", "open_store"
]
