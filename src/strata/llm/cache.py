"""On-disk response cache (SQLite), so re-runs with the same model, prompt and parameters give the same answers."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


class ResponseCache:
    """Key/value store of serialised backend answers; keys are hashes of everything that determines an answer.

    With a `journal` (a JSONL file), every answer the cache gives or takes is also appended there once, and the
    journal's answers are read into the cache on opening: a long benchmark commits its journal, and a run on a fresh
    machine replays those answers instead of asking the model again (SQLite files do not merge or diff)."""

    def __init__(self, path: Path, journal: Path | None = None) -> None:
        self.path = path.expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the client's threads; the lock serialises them, SQLite's timeout other processes.
        self._connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._connection:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.journal = journal.expanduser() if journal is not None else None
        self._journaled: set[str] = self._replay_journal()

    @staticmethod
    def key(**parts: Any) -> str:
        canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._connection.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        if row is not None:
            self._journal(key, row[0])  # an answer from an earlier local run belongs to this run's journal too
        return row[0] if row else None

    def put(self, key: str, value: str) -> None:
        with self._lock, self._connection:
            self._connection.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, value))
        self._journal(key, value)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def _replay_journal(self) -> set[str]:
        """The journal's answers into the cache (a later line for a key wins); their keys. A line cut short by an
        interrupted write is skipped: its answer is asked again and journaled anew."""
        if self.journal is None or not self.journal.is_file():
            return set()
        data = self.journal.read_bytes()
        if data and not data.endswith(b"\n"):  # end the cut line, so the next answer starts a line of its own
            with self.journal.open("a", encoding="utf-8") as file:
                file.write("\n")
        entries: dict[str, str] = {}
        # Split on newlines alone, in bytes: a cut can fall inside a multi-byte character, and an answer may hold
        # U+2028, which str.splitlines() takes for a line end.
        for line in data.split(b"\n"):
            try:
                entry = json.loads(line.decode("utf-8"))
                entries[entry["key"]] = entry["value"]
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
                continue
        with self._lock, self._connection:
            self._connection.executemany(
                "INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", list(entries.items())
            )
        return set(entries)

    def _journal(self, key: str, value: str) -> None:
        if self.journal is None or key in self._journaled:
            return
        line = json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n"
        with self._lock:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with self.journal.open("a", encoding="utf-8") as file:
                file.write(line)  # one write per line, so an interruption can cut only the last line
            self._journaled.add(key)
