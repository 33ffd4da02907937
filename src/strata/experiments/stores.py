"""Whether two stores hold the same corpus: papers, chunk texts and chunk vectors. How Ray ingest is checked against
the local ingest (tests and benchmarks/ray_ingest.py)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, Field

from strata.config import Settings
from strata.index import CorpusIndex, is_indexed
from strata.index.dense import DenseIndex
from strata.index.migrate import vectors_from
from strata.store import open_store

READ_BATCH = 5000


class StoreDiff(BaseModel):
    papers: int = Field(description="Papers in the left store")
    chunks: int = Field(description="Chunks in the left store")
    only_left: list[str] = Field(description="Paper ids only the left store holds")
    only_right: list[str] = Field(description="Paper ids only the right store holds")
    different_chunks: list[str] = Field(description="Papers in both whose chunk texts differ")
    max_vector_difference: float = Field(description="Largest absolute difference of a chunk vector coordinate")

    def same(self, vector_tolerance: float) -> bool:
        return not (self.only_left or self.only_right or self.different_chunks) and (
            self.max_vector_difference <= vector_tolerance
        )


class _Snapshot(NamedTuple):
    texts: dict[str, list[str]]  # paper id -> chunk texts in order
    vectors: dict[tuple[str, int], np.ndarray]  # (paper id, ordinal) -> vector; empty without a dense index


def compare_stores(left: Settings, right: Settings) -> StoreDiff:
    """Paper ids, each paper's chunk texts in order, and the vector of each (paper, ordinal) of two built stores."""
    a, b = _snapshot(left), _snapshot(right)
    shared = sorted(a.texts.keys() & b.texts.keys())
    keys = a.vectors.keys() & b.vectors.keys()
    difference = max((float(np.abs(a.vectors[key] - b.vectors[key]).max()) for key in keys), default=0.0)
    if a.vectors.keys() != b.vectors.keys():
        difference = float("inf")  # a chunk vector on one side only
    return StoreDiff(
        papers=len(a.texts),
        chunks=sum(len(chunks) for chunks in a.texts.values()),
        only_left=sorted(a.texts.keys() - b.texts.keys()),
        only_right=sorted(b.texts.keys() - a.texts.keys()),
        different_chunks=[paper_id for paper_id in shared if a.texts[paper_id] != b.texts[paper_id]],
        max_vector_difference=difference,
    )


def _snapshot(settings: Settings) -> _Snapshot:
    with open_store(settings) as store:
        vectors_of = None
        if settings.index.dense:
            dense = CorpusIndex(store, settings).dense
            if not isinstance(dense, DenseIndex):  # PostgresDenseIndex has no vectors() to read back
                raise NotImplementedError("comparing chunk vectors needs the faiss dense index, not pgvector")
            vectors_of = vectors_from(store, dense)
        texts: dict[str, list[str]] = {}
        vectors: dict[tuple[str, int], np.ndarray] = {}
        after = 0
        while batch := store.chunks_after(after, limit=READ_BATCH):
            for stored in batch:
                texts.setdefault(stored.chunk.paper_id, []).append(stored.chunk.text)
            indexed = [s for s in batch if is_indexed(s.chunk, settings.index)]
            if vectors_of is not None and indexed:
                vectors.update(((s.chunk.paper_id, s.chunk.ordinal), row) for s, row in zip(indexed, vectors_of(indexed)))
            after = batch[-1].rowid
    return _Snapshot(texts, vectors)
