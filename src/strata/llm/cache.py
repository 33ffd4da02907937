"""On-disk response cache (SQLite), so re-runs with the same model, prompt and parameters give the same answers."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


class ResponseCache:
    """Key/value store of serialised backend answers; keys are hashes of everything that determines an answer."""

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the client's threads; the lock serialises them, SQLite's timeout other processes.
        self._connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._connection:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    @staticmethod
    def key(**parts: Any) -> str:
        canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._connection.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, value: str) -> None:
        with self._lock, self._connection:
            self._connection.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, value))

    def close(self) -> None:
        with self._lock:
            self._connection.close()
