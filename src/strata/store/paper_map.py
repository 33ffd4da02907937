"""Which paper each chunk belongs to, held in memory: what search roll-ups ask the store for on every query.

A search rolls its best chunks up to papers, so it needs the paper id of a few hundred chunk row ids per query.
Asked of the database, that was one query of hundreds of bound ids per page of hits, every search holding the
store's one connection while it ran. The map answers from two numpy arrays instead (row ids, sorted, and each
one's paper), ~12 bytes per chunk, and stays exact the way the indices do, by the store's two watermarks: row ids
only grow (chunks with a larger id than the map has seen are read on demand) and every removed chunk is logged
(each lookup first drops the chunks logged since the last, one small indexed query that is usually empty).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol

import numpy as np

READ_BATCH = 100_000  # (row id, paper id) pairs read per store query while catching up


class _Source(Protocol):
    """The store methods the map reads (both backends have them)."""

    def chunk_papers_after(self, rowid: int, limit: int = READ_BATCH) -> list[tuple[int, str]]: ...
    def deletions_after(self, seq: int) -> list[tuple[int, int]]: ...


class ChunkPaperMap:
    """Paper id by chunk row id for live chunks, as exact as asking the store at the time of the lookup."""

    def __init__(self, store: _Source) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._rowids = np.zeros(0, dtype=np.int64)  # ascending
        self._papers = np.zeros(0, dtype=np.int32)  # index into _paper_ids; -1: the chunk was removed
        self._paper_ids: list[str] = []
        self._paper_index: dict[str, int] = {}
        self._max_rowid = 0
        self._deletion_seq = 0
        self._loaded = False

    def lookup(self, rowids: Iterable[int]) -> dict[int, str]:
        """Paper id of each live chunk among `rowids`; removed or unknown ones are absent."""
        wanted = np.fromiter(rowids, dtype=np.int64)
        with self._lock:
            if not self._loaded or (wanted.size and int(wanted.max()) > self._max_rowid):
                self._catch_up()  # first use, or chunks added since
                self._loaded = True
            self._drop_removed()  # after catching up: a chunk added and removed since is dropped too
            known, papers, paper_ids = self._rowids, self._papers, self._paper_ids
        if not wanted.size or not known.size:
            return {}
        at = np.minimum(np.searchsorted(known, wanted), known.size - 1)
        paper = np.where(known[at] == wanted, papers[at], -1)
        live = paper >= 0
        return dict(zip(wanted[live].tolist(), [paper_ids[index] for index in paper[live].tolist()]))

    def __len__(self) -> int:
        with self._lock:
            return int(np.count_nonzero(self._papers >= 0))

    def _catch_up(self) -> None:
        new_rowids: list[np.ndarray] = []
        new_papers: list[np.ndarray] = []
        while batch := self._store.chunk_papers_after(self._max_rowid, READ_BATCH):
            new_rowids.append(np.fromiter((rowid for rowid, _ in batch), dtype=np.int64, count=len(batch)))
            new_papers.append(
                np.fromiter((self._paper_number(paper_id) for _, paper_id in batch), dtype=np.int32, count=len(batch))
            )
            self._max_rowid = int(new_rowids[-1][-1])
            if len(batch) < READ_BATCH:
                break
        if new_rowids:
            self._rowids = np.concatenate([self._rowids, *new_rowids])
            self._papers = np.concatenate([self._papers, *new_papers])

    def _drop_removed(self) -> None:
        removed = self._store.deletions_after(self._deletion_seq)
        if not removed:
            return
        self._deletion_seq = removed[-1][0]
        gone = np.array([rowid for _, rowid in removed], dtype=np.int64)
        if not self._rowids.size:
            return
        at = np.minimum(np.searchsorted(self._rowids, gone), self._rowids.size - 1)
        hit = at[self._rowids[at] == gone]
        if hit.size:
            papers = self._papers.copy()  # a lookup outside the lock may still read the old array
            papers[hit] = -1
            self._papers = papers

    def _paper_number(self, paper_id: str) -> int:
        number = self._paper_index.get(paper_id)
        if number is None:
            number = self._paper_index[paper_id] = len(self._paper_ids)
            self._paper_ids.append(paper_id)
        return number
