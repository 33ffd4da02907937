"""On-disk response cache (SQLite), so re-runs with the same model, prompt and parameters give the same answers."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

# A plain journal past this size is folded into its gzip sibling (`<journal>.gz`) when the cache opens, so a committed
# journal stays a few MB however long the benchmark behind it runs (answers repeat their JSON and compress ~5x).
COMPACT_BYTES = 1_000_000


class ResponseCache:
    """Key/value store of serialised backend answers; keys are hashes of everything that determines an answer.

    With a `journal` (a JSONL file), every answer the cache gives or takes is also appended there once, and the
    journal's answers are read into the cache on opening: a long benchmark commits its journal, and a run on a fresh
    machine replays those answers instead of asking the model again (SQLite files do not merge or diff). New answers
    are appended to the plain journal; a long one is folded into `<journal>.gz` (see COMPACT_BYTES)."""

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
        """The journal's answers (its gzip sibling's first) into the cache (a later line for a key wins); their keys.
        A line cut short by an interrupted write is skipped: its answer is asked again and journaled anew."""
        if self.journal is None:
            return set()
        compressed = self.journal.with_name(self.journal.name + ".gz")
        data = self.journal.read_bytes() if self.journal.is_file() else b""
        if data and not data.endswith(b"\n"):  # end the cut line, so the next answer starts a line of its own
            with self.journal.open("a", encoding="utf-8") as file:
                file.write("\n")
        folded = gzip.decompress(compressed.read_bytes()) if compressed.is_file() else b""
        entries: dict[str, str] = {}
        # Split on newlines alone, in bytes: a cut can fall inside a multi-byte character, and an answer may hold
        # U+2028, which str.splitlines() takes for a line end.
        for line in (folded + b"\n" + data).split(b"\n"):
            try:
                entry = json.loads(line.decode("utf-8"))
                entries[entry["key"]] = entry["value"]
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
                continue
        with self._lock, self._connection:
            self._connection.executemany(
                "INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", list(entries.items())
            )
        if len(data) > COMPACT_BYTES:
            fold(entries, self.journal, compressed)
        return set(entries)

    def _journal(self, key: str, value: str) -> None:
        if self.journal is None or key in self._journaled:
            return
        line = journal_line(key, value)
        with self._lock:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with self.journal.open("a", encoding="utf-8") as file:
                file.write(line)  # one write per line, so an interruption can cut only the last line
            self._journaled.add(key)


def journal_line(key: str, value: str) -> str:
    return json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n"


def fold(entries: dict[str, str], journal: Path, compressed: Path) -> None:
    """All answers into `compressed` (written whole, then renamed over it), then the plain `journal` removed: an
    interruption leaves either the old pair or answers in both, which replay the same."""
    lines = "".join(journal_line(key, value) for key, value in entries.items())
    partial = compressed.with_name(compressed.name + ".partial")
    partial.write_bytes(gzip.compress(lines.encode("utf-8"), mtime=0))  # mtime 0: same answers, same bytes
    os.replace(partial, compressed)
    journal.unlink()
