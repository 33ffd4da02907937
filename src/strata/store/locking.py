"""Cross-process locks on a store home: bounded waits, and errors that name who holds the lock.

Written on fcntl.flock rather than a lock library because a waiting process must be able to name the holder (pid,
command, since when), which the holder writes into the lock file once it has the lock. flock locks are released
when their process dies, so a killed ingest never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)

POLL_S = 0.1


class StoreBusyError(RuntimeError):
    """Another process kept the store's database or index lock past `store.lock_timeout_s`."""


@contextmanager
def hold_lock(path: Path, timeout_s: float, purpose: str) -> Iterator[None]:
    """Hold the exclusive lock `path` for `purpose`, waiting at most `timeout_s` for another process to release it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        _acquire(handle, path, timeout_s, purpose)
        try:
            _write_holder(handle, purpose)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(handle: IO[str], path: Path, timeout_s: float, purpose: str) -> None:
    deadline = time.monotonic() + timeout_s
    warned = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if not warned:  # a long wait must not look like a hang
            logger.warning("%s: waiting up to %.0fs for the lock %s, held by %s", purpose, timeout_s, path,
                           lock_holder(path))
            warned = True
        if time.monotonic() >= deadline:
            raise StoreBusyError(
                f"{purpose}: gave up after {timeout_s:.0f}s waiting for the lock {path}, held by {lock_holder(path)}; "
                "let that process finish (or stop it), or raise store.lock_timeout_s"
            )
        time.sleep(POLL_S)


def _write_holder(handle: IO[str], purpose: str) -> None:
    holder = {
        "pid": os.getpid(),
        "purpose": purpose,
        "command": " ".join(sys.argv)[:300],
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(holder))
    handle.flush()


def lock_holder(path: Path) -> str:
    """Who holds the lock at `path`, as its holder recorded it."""
    try:
        holder = json.loads(path.read_text())
        return f"pid {holder['pid']} ({holder['purpose']}: `{holder['command']}`, since {holder['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not recorded who it is)"
