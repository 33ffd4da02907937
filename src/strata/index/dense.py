"""Dense retrieval over store chunks with faiss, keyed by the chunk's store row id.

Exact inner-product search (vectors are L2-normalised, so this is cosine) until `hnsw_above` vectors, then an HNSW
graph. With `embedding.sentences`, a prose chunk's sentences get vectors of their own under the chunk's row id (faiss
keeps several vectors per id in an IndexIDMap, and removing the id removes them all); a search keeps each chunk's
best. Each save writes a new vectors file and then switches the state file to it, so readers load either the old
index or the new one, never a partial write.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Collection, Sequence
from pathlib import Path

import faiss
import numpy as np
from pydantic import Field

from strata.config import EmbeddingSettings, IndexSettings
from strata.documents.sentences import chunk_sentences
from strata.encoders.embedder import Embedder, encoder_identity
from strata.index.state import (
    ChunkScore,
    ChunkVectors,
    Hits,
    IndexSyncStats,
    SyncProgress,
    SyncState,
    adopt_reference_choice,
    ranked_chunk_scores,
    ranked_rowids,
    read_state,
    write_state,
)
from strata.store.base import StoredChunk
from strata.store.protocol import PaperStore

FORMAT = "dense-v1"
READ_BATCH = 256
# Save a consistent partial index after this many new chunks, or after half the index's size when that is more (each
# save rewrites the whole file: a fixed interval would make a large first sync write quadratically many bytes).
CHECKPOINT_CHUNKS = 20_000
# Rebuild the HNSW graph (which cannot remove vectors) once this share of it is deleted chunks.
TOMBSTONE_REBUILD_SHARE = 0.1


class DenseState(SyncState):
    model: str = Field(
        description="Encoder the vectors came from: the model setting, or 'static:MODEL:dDIMS' for the static tier"
    )
    title_prefix: bool = Field(description="Whether chunks were embedded with their paper's title")
    sentences: bool = Field(default=False, description="Whether prose chunks' sentences have vectors of their own")
    chunks: int | None = Field(
        default=None, description="Live chunks in the index (with sentence vectors, fewer than its vectors)"
    )
    dimension: int = 0
    vectors_file: str | None = Field(default=None, description="The current faiss file in the index folder")
    tombstones: list[int] = Field(default_factory=list, description="Removed chunks still inside the HNSW graph")


class VectorSearch:
    """Search by text or vector and the chunk texts it embeds, the part both dense backends share so they rank and
    embed alike. Subclasses set `settings` and `embedder` and implement `_empty` and `_nearest`."""

    settings: IndexSettings
    embedder: Embedder

    def search_text(self, text: str, depth: int, rowids: Collection[int] | None = None) -> list[ChunkScore]:
        if self._empty():  # no query to embed (nor an encoder to load) for an index without vectors
            return []
        return self.search(self.embedder.embed_query(text), depth, rowids)

    def search(self, vector: np.ndarray, depth: int, rowids: Collection[int] | None = None) -> list[ChunkScore]:
        """Best `depth` chunks by cosine, best first, ties by row id; optionally only among `rowids`."""
        return ranked_chunk_scores(*self._nearest(vector, depth, rowids))

    def search_rowids(self, vector: np.ndarray, depth: int, rowids: Collection[int] | None = None) -> np.ndarray:
        """The row ids `search` returns, in its order, without its ChunkScores (what fusion needs)."""
        return ranked_rowids(*self._nearest(vector, depth, rowids))

    def embedding_text(self, stored: StoredChunk) -> str:
        return embedding_text(stored, self.settings.embedding)

    def _vector_source(self, vectors_of: ChunkVectors | None) -> ChunkVectors:
        """`vectors_of`, or else this index's encoder over the chunks' embedding texts."""
        return vectors_of or (lambda batch: self.embedder.embed([self.embedding_text(s) for s in batch]))

    def _empty(self) -> bool:
        """Whether no vectors have been saved yet."""
        raise NotImplementedError

    def _nearest(self, vector: np.ndarray, depth: int, rowids: Collection[int] | None) -> Hits:
        """At most `depth` chunks nearest `vector` with their best cosine, in any order (the backend's own search)."""
        raise NotImplementedError


class DenseIndex(VectorSearch):
    def __init__(self, folder: Path, settings: IndexSettings) -> None:
        self.folder = folder
        self.settings = settings
        self.state_path = folder / "state.json"
        self.embedder = Embedder(settings.embedding)
        # The index and the state it was saved with, replaced together: a search on one thread never pairs an index
        # with another reload's tombstones or chunk count (the server searches on several threads while it ingests).
        self._pair: tuple[faiss.IndexIDMap, DenseState] | None = None
        self._loaded_version: tuple[int, int] | None = None

    # reading

    def __len__(self) -> int:
        loaded = self._loaded()
        if loaded is None:
            return 0
        index, state = loaded
        return state.chunks if state.chunks is not None else _live_chunks(index, state.tombstones)

    def _empty(self) -> bool:
        return self._current() is None

    def _nearest(self, vector: np.ndarray, depth: int, rowids: Collection[int] | None) -> Hits:
        loaded = self._loaded()
        if loaded is None or loaded[0].ntotal == 0 or (rowids is not None and not rowids):
            return (), ()
        index, state = loaded
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        if rowids is not None and _is_hnsw(index):
            return _exact_among(index, query[0], set(rowids) - set(state.tombstones), depth)
        selector, parts = _selector(state, rowids)
        fetch = _vectors_for(state, depth, index.ntotal)
        while True:
            scores, ids = index.search(query, fetch, params=self._search_parameters(index, selector, fetch))
            found = ids[0] >= 0  # fewer than `fetch` vectors are padded with -1: there are no more
            hits = _best_per_chunk(ids[0][found], scores[0][found], depth)
            # One chunk's many sentences can fill what was fetched: fetch more while chunks are missing and may exist.
            if len(hits[0]) >= depth or fetch >= index.ntotal or not found.all():
                break
            fetch = min(index.ntotal, 2 * fetch)
        del parts  # the selector's parts had to outlive the search
        return hits

    def _search_parameters(
        self, index: faiss.IndexIDMap, selector: faiss.IDSelector | None, fetch: int
    ) -> faiss.SearchParameters | None:
        # faiss's stubs omit SearchParametersHNSW and the keyword constructors its Python wrapper adds.
        if _is_hnsw(index):
            return faiss.SearchParametersHNSW(  # type: ignore[attr-defined]
                efSearch=max(self.settings.hnsw_ef_search, fetch), sel=selector
            )
        return faiss.SearchParameters(sel=selector) if selector is not None else None  # type: ignore[call-arg]

    def synced_rowid(self) -> int | None:
        """The largest store chunk row id the saved index covers (None before the first save): a sync in progress
        saves checkpoints, so chunks beyond it have no vector yet."""
        loaded = self._loaded()
        return None if loaded is None else loaded[1].chunk_rowid

    def vectors(self) -> dict[int, np.ndarray] | None:
        """Every live chunk vector by store row id, None before the first sync: for stages that reuse the
        embeddings (paper vectors in Relate, moving a corpus to another backend) instead of embedding again."""
        loaded = self._loaded()
        if loaded is None:
            return None
        index, state = loaded
        rowids = faiss.vector_to_array(index.id_map)
        vectors = faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)
        hidden = set(state.tombstones)
        # A chunk's own vector is added before its sentences', so its first row is the chunk's.
        _, first = np.unique(rowids, return_index=True)
        return {rowid: vectors[row] for row in first.tolist() if (rowid := int(rowids[row])) not in hidden}

    def _current(self) -> faiss.IndexIDMap | None:
        loaded = self._loaded()
        return None if loaded is None else loaded[0]

    def _loaded(self) -> tuple[faiss.IndexIDMap, DenseState] | None:
        """The saved index and its state, reloaded when another process (or a sync) has switched the state file."""
        try:
            info = self.state_path.stat()
        except FileNotFoundError:
            return None
        version = (info.st_mtime_ns, info.st_ino)
        if version != self._loaded_version:
            state = read_state(self.state_path, DenseState)
            if state is None or state.vectors_file is None:
                return None
            self._check_compatible(state)
            try:
                index = _read_index(self.folder / state.vectors_file)
            except RuntimeError:
                if self.state_path.stat().st_ino == info.st_ino:
                    raise
                return self._loaded()  # a concurrent sync replaced that file after we read the state
            self._pair, self._loaded_version = (index, state), version
        return self._pair

    def _check_compatible(self, state: DenseState) -> None:
        if _identity(state) != self._expected_identity():
            embedding = self.settings.embedding
            wanted = encoder_identity(embedding)
            raise ValueError(
                f"the dense index in {self.folder} was built with {state.model!r} (title prefix "
                f"{state.title_prefix}, sentences {state.sentences}); settings ask for {wanted!r} (title prefix "
                f"{embedding.title_prefix}, sentences {embedding.sentences}): re-run `strata ingest` (its index "
                "sync rebuilds it)"
            )

    def _expected_identity(self) -> tuple[str, str, bool, bool]:
        # The encoder's identity: the model setting for sentence-transformers, 'static:...' for the static tier.
        embedding = self.settings.embedding
        return FORMAT, encoder_identity(embedding), embedding.title_prefix, embedding.sentences

    # writing

    def sync(
        self, store: PaperStore, progress: SyncProgress | None = None, vectors_of: ChunkVectors | None = None
    ) -> IndexSyncStats:
        """Embed (or take from `vectors_of`) chunks stored since the last sync and drop removed ones, then save.

        The index switches to an HNSW graph as soon as its vectors pass `hnsw_above` (sentence vectors included),
        and a large first sync adds the rest to the graph as it goes: the one copy made holds ~`hnsw_above` vectors.
        """
        started = time.perf_counter()
        embed = self._vector_source(vectors_of)
        state, index = self._load_for_writing(store)
        expected = store.max_chunk_rowid() - state.chunk_rowid
        stats = IndexSyncStats()
        deletions = store.deletions_after(state.deletion_seq)
        if deletions:
            index = self._remove(index, state, [rowid for _, rowid in deletions])
            state.deletion_seq = deletions[-1][0]
            stats.deleted = len(deletions)
        unsaved = 0
        references = self.settings.reference_entries
        while batch := store.chunks_after(state.chunk_rowid, limit=READ_BATCH, references=references):
            vectors = np.ascontiguousarray(embed(batch), dtype=np.float32)
            if index is None:
                state.dimension = vectors.shape[1]
                index = faiss.IndexIDMap(faiss.IndexFlatIP(state.dimension))
            index.add_with_ids(vectors, np.array([stored.rowid for stored in batch], dtype=np.int64))
            if state.sentences:
                self._add_sentences(index, batch)
            index = self._maybe_switch_to_hnsw(index)
            state.chunk_rowid = batch[-1].rowid
            stats.added += len(batch)
            unsaved += len(batch)
            if progress:
                progress(stats.added, expected)
            if unsaved >= max(CHECKPOINT_CHUNKS, index.ntotal // 2):
                self._save(index, state)
                unsaved = 0
        if index is not None:
            if stats.added or stats.deleted:
                self._save(index, state)
            # _save counted them; an index saved before chunks were counted is counted here
            stats.size = state.chunks if state.chunks is not None else _live_chunks(index, state.tombstones)
        stats.seconds = time.perf_counter() - started
        return stats

    def _add_sentences(self, index: faiss.IndexIDMap, batch: Sequence[StoredChunk]) -> None:
        """Vectors of the sentences of `batch`'s prose chunks under their chunk's row id (after the chunks' own)."""
        owned = [(stored.rowid, text) for stored in batch for text in sentence_texts(stored, self.settings.embedding)]
        if owned:
            vectors = np.ascontiguousarray(self.embedder.embed([text for _, text in owned]), dtype=np.float32)
            index.add_with_ids(vectors, np.array([rowid for rowid, _ in owned], dtype=np.int64))

    def _hnsw(self, dimension: int) -> faiss.IndexHNSWFlat:
        graph = faiss.IndexHNSWFlat(dimension, self.settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efSearch = self.settings.hnsw_ef_search
        return graph

    def _load_for_writing(self, store: PaperStore) -> tuple[DenseState, faiss.IndexIDMap | None]:
        state = read_state(self.state_path, DenseState)
        adopt_reference_choice(state, self.settings.reference_entries, store)
        embedding = self.settings.embedding
        model, title_prefix, sentences = encoder_identity(embedding), embedding.title_prefix, embedding.sentences
        references = self.settings.reference_entries
        if (
            state is None
            or state.vectors_file is None
            or _identity(state) != self._expected_identity()
            or state.references != references
        ):
            # Nothing saved yet, or vectors from another model, text format or choice of chunks: start over.
            fresh = DenseState(
                format=FORMAT, model=model, title_prefix=title_prefix, sentences=sentences, references=references
            )
            return fresh, None
        return state, _read_index(self.folder / state.vectors_file)

    def _remove(
        self, index: faiss.IndexIDMap | None, state: DenseState, rowids: Sequence[int]
    ) -> faiss.IndexIDMap | None:
        if index is None:
            return None
        if not _is_hnsw(index):
            index.remove_ids(_batch_selector(rowids))
            return index
        # HNSW cannot remove: hide the vectors at search time and rebuild once too many are hidden.
        present = set(faiss.vector_to_array(index.id_map).tolist())
        state.tombstones = sorted(set(state.tombstones) | (present & set(rowids)))
        if len(state.tombstones) > TOMBSTONE_REBUILD_SHARE * _live_chunks(index, []):  # chunks, not vectors
            index = self._rebuild_hnsw(index, drop=set(state.tombstones))
            state.tombstones = []
        return index

    def _maybe_switch_to_hnsw(self, index: faiss.IndexIDMap) -> faiss.IndexIDMap:
        # Vectors, not chunks: they are what exact search scans (with sentence vectors, several per chunk).
        if _is_hnsw(index) or index.ntotal <= self.settings.hnsw_above:
            return index
        return self._rebuild_hnsw(index, drop=set())

    def _rebuild_hnsw(self, index: faiss.IndexIDMap, drop: set[int]) -> faiss.IndexIDMap:
        """An HNSW index holding `index`'s vectors except those of `drop`."""
        inner = faiss.downcast_index(index.index)
        vectors = inner.reconstruct_n(0, inner.ntotal)
        ids = faiss.vector_to_array(index.id_map)
        keep = np.array([rowid not in drop for rowid in ids.tolist()], dtype=bool)
        rebuilt = faiss.IndexIDMap(self._hnsw(vectors.shape[1]))
        rebuilt.add_with_ids(np.ascontiguousarray(vectors[keep]), np.ascontiguousarray(ids[keep]))
        return rebuilt

    def _save(self, index: faiss.IndexIDMap, state: DenseState) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"vectors-{time.time_ns()}.faiss"
        temp = self.folder / f".{name}.tmp"
        try:
            faiss.write_index(index, str(temp))
            with open(temp, "rb") as file:
                os.fsync(file.fileno())
            os.replace(temp, self.folder / name)
        except BaseException:  # a cut-short write leaves no index-sized temp file behind
            temp.unlink(missing_ok=True)
            raise
        state.vectors_file = name
        state.chunks = _live_chunks(index, state.tombstones)
        write_state(self.state_path, state)
        for old in [*self.folder.glob("vectors-*.faiss"), *self.folder.glob(".vectors-*.faiss.tmp")]:
            if old.name != name:  # also the temp file of a process killed while writing
                old.unlink(missing_ok=True)


def embedding_text(stored: StoredChunk, settings: EmbeddingSettings) -> str:
    """What the encoder reads for a chunk: its text, after its paper's title when `title_prefix` is on."""
    if settings.title_prefix and stored.paper_title:
        return f"{stored.paper_title}\n{stored.chunk.text}"
    return stored.chunk.text


def sentence_texts(stored: StoredChunk, settings: EmbeddingSettings) -> list[str]:
    """What the encoder reads for each sentence of a prose chunk of several: after the paper's title when
    `title_prefix` is on, as the chunk's text is."""
    title = f"{stored.paper_title}\n" if settings.title_prefix and stored.paper_title else ""
    return [f"{title}{sentence}" for sentence in chunk_sentences(stored.chunk)]


def _exact_among(index: faiss.IndexIDMap, query: np.ndarray, allowed: Collection[int], depth: int) -> Hits:
    """Every vector of the `allowed` chunks scored exactly. An HNSW search filtered to a few chunks walks a graph
    capped by efSearch and reaches few of them (60 allowed of 20k vectors: 14 found), and fewer found does not mean
    that no more exist; searches limited to some papers (Read's passages) are small enough to score outright."""
    ids = faiss.vector_to_array(index.id_map)
    positions = np.flatnonzero(np.isin(ids, np.fromiter(allowed, dtype=np.int64, count=len(allowed))))
    if not positions.size:
        return (), ()
    inner = faiss.downcast_index(index.index)
    scores = np.stack([inner.reconstruct(int(position)) for position in positions]) @ query
    order = np.argsort(-scores, kind="stable")  # ties in index order
    return _best_per_chunk(ids[positions][order], scores[order], depth)


def _best_per_chunk(rowids: np.ndarray, scores: np.ndarray, depth: int) -> Hits:
    """The first (best) hit of each row id among hits sorted best first, at most `depth` of them."""
    _, first = np.unique(rowids, return_index=True)
    keep = np.sort(first)[:depth]
    return rowids[keep], scores[keep]


def _vectors_for(state: DenseState, depth: int, total: int) -> int:
    """Vectors to fetch for `depth` chunks: as many times more as the index has vectors per chunk."""
    if not state.sentences or not state.chunks:
        return min(depth, total)
    return min(total, math.ceil(depth * total / state.chunks))


def _selector(
    state: DenseState, rowids: Collection[int] | None
) -> tuple[faiss.IDSelector | None, list[faiss.IDSelector]]:
    """A selector admitting `rowids` (all when None) minus `state`'s tombstones, and every part it points to (faiss
    selectors hold raw pointers, so the caller keeps the parts alive while searching)."""
    parts: list[faiss.IDSelector] = []
    conditions: list[faiss.IDSelector] = []
    if state.tombstones:
        hidden = _batch_selector(state.tombstones)
        parts.append(hidden)
        conditions.append(faiss.IDSelectorNot(hidden))
    if rowids is not None:
        conditions.append(_batch_selector(rowids))
    parts.extend(conditions)
    if len(conditions) == 2:
        parts.append(faiss.IDSelectorAnd(*conditions))
    return (parts[-1] if conditions else None), parts


def _live_chunks(index: faiss.IndexIDMap, tombstones: list[int]) -> int:
    """Chunks with a vector that is not hidden (a chunk with sentence vectors has several)."""
    return len(set(np.unique(faiss.vector_to_array(index.id_map)).tolist()) - set(tombstones))


def _identity(state: DenseState) -> tuple[str, str, bool, bool]:
    return state.format, state.model, state.title_prefix, state.sentences


def _read_index(path: Path) -> faiss.IndexIDMap:
    index = faiss.read_index(str(path))
    assert isinstance(index, faiss.IndexIDMap)  # every index this module saves maps store row ids to vectors
    return index


def _is_hnsw(index: faiss.IndexIDMap) -> bool:
    return isinstance(faiss.downcast_index(index.index), faiss.IndexHNSW)


def _batch_selector(rowids: Collection[int]) -> faiss.IDSelectorBatch:
    return faiss.IDSelectorBatch(np.array(sorted(rowids), dtype=np.int64))
