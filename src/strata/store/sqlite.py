"""The embedded corpus store: SQLite in WAL mode, one transaction per paper.

SQLite is the source of truth. The BM25 and dense indices are derived from it and catch up through two watermarks:
chunk rowids only grow (AUTOINCREMENT, never reused) and every removed chunk is logged in `chunk_deletions`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from strata.store.base import (
    MIN_TITLE_MATCH_CHARS,
    SCHEMA_TEMPLATE,
    CorpusStats,
    FileRecord,
    PaperSummary,
    SqlCorpusStore,
    StoredChunk,
)
from strata.store.locking import StoreBusyError

# The models moved to strata.store.base; importing them from here keeps working.
__all__ = ["MIN_TITLE_MATCH_CHARS", "CorpusStats", "CorpusStore", "FileRecord", "PaperSummary", "StoredChunk"]

SCHEMA = SCHEMA_TEMPLATE.format(real="REAL", identity_key="INTEGER PRIMARY KEY AUTOINCREMENT", row_ref="INTEGER")

# SQLite caps the bound parameters of one statement.
MAX_PARAMS = 900


class CorpusStore(SqlCorpusStore):
    def __init__(self, path: Path | str, busy_timeout_s: float = 120.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        # sqlite3 waits up to `timeout` for another connection's write lock, then raises "database is locked".
        self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
        with self._busy_is_clear():
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)

    @contextmanager
    def _busy_is_clear(self) -> Iterator[None]:
        """Turn SQLite's bare "database is locked" into an error naming the database and what to do."""
        try:
            yield
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            raise StoreBusyError(
                f"{self.path} stayed locked by another process writing to it for {self.busy_timeout_s:.0f}s "
                f"({error}); let that process (another `strata ingest` on this store home?) finish, or raise "
                "store.lock_timeout_s"
            ) from error

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            # BEGIN and COMMIT inside the try: an exception landing as either returns (Ctrl-C) must not leave the
            # connection in a transaction, which would fail every later write on it.
            try:
                with self._busy_is_clear():
                    self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _where_in(self, column: str, values: list[object]) -> Iterator[tuple[str, list[object]]]:
        for start in range(0, len(values), MAX_PARAMS):
            batch = values[start : start + MAX_PARAMS]
            yield f"{column} IN ({','.join('?' * len(batch))})", batch
