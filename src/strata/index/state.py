"""What the indices share: scored chunks, sync statistics and watermarks.

A watermark says how far into the store's chunks and deletion log an index has caught up. It is written atomically
(temp file, fsync, os.replace) only after the index data it describes is durable, so a reader or a crash sees the
old state or the new one, never a mix.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

if TYPE_CHECKING:
    from strata.store.protocol import PaperStore
    from strata.store.sqlite import StoredChunk

# (chunks indexed so far, most chunks this sync can index)
SyncProgress = Callable[[int, int], None]
# Vectors (one L2-normalised row per chunk, in order) computed elsewhere: by Ray workers, or an earlier index of the
# same chunks; a dense sync given one uses it instead of its own encoder.
ChunkVectors = Callable[[Sequence["StoredChunk"]], np.ndarray]


class ChunkScore(NamedTuple):
    """One index hit. A typed tuple, not a pydantic model: a hybrid search makes ~2,000 of them, and validating
    each cost ~20 ms per query at 500k chunks (a quarter of the search)."""

    rowid: int  # store row id of the chunk
    score: float


def chunk_scores(rowids: Iterable[int], scores: Iterable[float]) -> list[ChunkScore]:
    """ChunkScores of parallel row ids and scores, made without a Python call per hit: a search makes ~1,000 per
    index, and `ChunkScore(rowid=..., score=...)` each cost ~0.8 ms per 1,000 (a third of a BM25 search)."""
    return list(map(_new_chunk_score, zip(rowids, scores)))


_new_chunk_score = cast(Callable[[tuple[int, float]], ChunkScore], partial(tuple.__new__, ChunkScore))


# Row ids and their scores, in parallel: an index's hits before they are ranked.
Hits = tuple[Sequence[int] | np.ndarray, Sequence[float] | np.ndarray]


def ranked_chunk_scores(rowids: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> list[ChunkScore]:
    """ChunkScores of parallel row ids and scores, best first, ties by row id: the order every index returns.
    Sorted in numpy (a Python sort key called per hit cost ~0.3 ms per 1,000 hits)."""
    rowid_array, score_array = _arrays(rowids, scores)
    order = np.lexsort((rowid_array, -score_array))
    return chunk_scores(rowid_array[order].tolist(), score_array[order].tolist())


def ranked_rowids(rowids: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """The row ids alone, in `ranked_chunk_scores`' order: what fusion needs, without a ChunkScore per hit."""
    rowid_array, score_array = _arrays(rowids, scores)
    return rowid_array[np.lexsort((rowid_array, -score_array))]


def _arrays(rowids: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(rowids, dtype=np.int64), np.asarray(scores, dtype=np.float64)  # float32 widens exactly


class IndexSyncStats(BaseModel):
    added: int = 0
    deleted: int = 0
    seconds: float = 0.0
    size: int = Field(default=0, description="Chunks held by the index after the sync")


class SyncState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = Field(description="How the index was built; another value means rebuild")
    chunk_rowid: int = Field(default=0, description="Largest store chunk row id indexed")
    deletion_seq: int = Field(default=0, description="Last store deletion-log entry applied")
    # Indices written before this field held every chunk, reference entries included.
    references: bool = Field(default=True, description="Whether reference-list entries are indexed")


State = TypeVar("State", bound=SyncState)


def adopt_reference_choice(state: SyncState | None, references: bool, store: PaperStore) -> None:
    """Record a new `index.reference_entries` choice without a rebuild where it changes nothing: a store holding no
    reference-list chunks (BEIR abstracts) indexes the same chunks either way."""
    if state is not None and state.references != references and not store.stats().chunks_by_type.get("reference"):
        state.references = references


def read_state(path: Path, model: type[State]) -> State | None:
    """The saved state, or None when missing or unreadable (the index is then rebuilt)."""
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def write_state(path: Path, state: SyncState) -> None:
    atomic_write(path, state.model_dump_json(indent=1).encode())


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
