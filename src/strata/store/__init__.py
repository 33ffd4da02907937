"""The corpus store: papers, sections, chunks, references and the citation graph."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata.config import Settings
from strata.store.locking import StoreBusyError
from strata.store.protocol import PaperStore, WritableStore
from strata.store.sqlite import CorpusStore

if TYPE_CHECKING:
    from strata.store.postgres import PostgresCorpusStore

# Either backend, as the Protocol both satisfy.
AnyStore = WritableStore


def open_store(settings: Settings) -> CorpusStore | PostgresCorpusStore:
    """The store `settings.store.backend` names: SQLite under `home`, or PostgreSQL (imported only when used)."""
    if settings.store.backend == "sqlite":
        return CorpusStore(settings.store.home / "corpus.sqlite3", busy_timeout_s=settings.store.lock_timeout_s)
    from strata.store.postgres import PostgresCorpusStore, local_server_url

    url = settings.store.postgres_url or local_server_url(settings.store.home / "postgres")
    return PostgresCorpusStore(url, lock_timeout_s=settings.store.lock_timeout_s)


__all__ = ["AnyStore", "CorpusStore", "PaperStore", "StoreBusyError", "WritableStore", "open_store"]
