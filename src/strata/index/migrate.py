"""Move a corpus between backends (SQLite + tantivy + faiss into PostgreSQL + pgvector) without re-embedding.

Papers are copied as stored; BM25 is rebuilt from the text (cheap); vectors are taken from the source's dense index,
matched by (paper id, chunk ordinal) because row ids differ between the stores. The files table is not copied: a
later `strata ingest` of the same files on the target stores their papers again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from strata.index import CorpusIndex, SyncReport
from strata.index.dense import DenseIndex
from strata.index.state import ChunkVectors
from strata.store.base import StoredChunk
from strata.store.protocol import PaperStore, WritableStore

COPY_BATCH = 200
MIGRATED = "migrated"  # file hash recorded for copied papers


def copy_papers(source: PaperStore, target: WritableStore) -> int:
    """Every paper of `source` into `target`, in paper id order; returns how many."""
    ids = source.paper_ids()
    for start in range(0, len(ids), COPY_BATCH):
        target.put_papers([source.get_paper(paper_id) for paper_id in ids[start : start + COPY_BATCH]], MIGRATED)
    target.resolve_references()
    return len(ids)


def vectors_from(source: PaperStore, dense: DenseIndex) -> ChunkVectors:
    """A vector source reading each chunk's vector from `dense` (a faiss index over `source`), by paper and ordinal."""
    vectors = dense.vectors()
    if vectors is None:
        raise ValueError(f"no dense index to take vectors from in {dense.folder}")
    source_rowid: dict[tuple[str, int], int] = {}
    after = 0
    while batch := source.chunks_after(after, limit=5000):
        source_rowid.update(((s.chunk.paper_id, s.chunk.ordinal), s.rowid) for s in batch)
        after = batch[-1].rowid

    def lookup(batch: Sequence[StoredChunk]) -> np.ndarray:
        try:
            return np.stack([vectors[source_rowid[(s.chunk.paper_id, s.chunk.ordinal)]] for s in batch])
        except KeyError as missing:
            raise ValueError(f"chunk {missing} has no vector in {dense.folder}") from None

    return lookup


def migrate(source: PaperStore, source_index: CorpusIndex, target: WritableStore, target_index: CorpusIndex) -> SyncReport:
    """Copy the papers, then build the target's indices with the source's vectors."""
    copy_papers(source, target)
    if not isinstance(source_index.dense, DenseIndex):
        raise ValueError("vectors can only be taken from an embedded (faiss) dense index")
    return target_index.sync(vectors_of=vectors_from(source, source_index.dense))
