"""The three paper-to-paper signals of Lit3R Relate, each giving a seed paper's neighbours, best first.

- embedding: cosine similarity of paper vectors (mean chunk vector, or title + abstract embedded; cached on disk);
- references: bibliographic coupling (shared references, Salton-normalised) plus direct citation either way;
- bm25: BM25 over chunks with the seed's own title and abstract as the query.

Every list excludes the seed itself and breaks ties by paper id.
"""

from __future__ import annotations

import hashlib
import io
import math
import threading
import zipfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from strata.documents.identifiers import normalize_title
from strata.documents.model import ContentType, Paper, Reference
from strata.index.dense import DenseIndex
from strata.index.state import atomic_write
from strata.encoders.embedder import Embedder
from strata.retrieve.protocol import Searcher
from strata.store.base import MIN_TITLE_MATCH_CHARS
from strata.store.protocol import PaperStore

EMBED_WORDS = 200  # MiniLM reads ~256 word pieces; more words would be cut off anyway
EMBED_BATCH = 512  # papers embedded between cache saves

StoreVersion = tuple[int, int]


def store_version(store: PaperStore) -> StoreVersion:
    """Changes whenever papers are added (chunk row ids only grow) or removed (the count drops)."""
    return store.max_chunk_rowid(), len(store.paper_ids())


def paper_summary_text(paper: Paper, words: int) -> str:
    """Title and abstract, or title and the start of the text when the parser found no abstract."""
    body = paper.abstract or paper.text
    return " ".join(f"{paper.title}\n{body}".split()[:words])


def chunk_vectors(dense: object) -> dict[int, np.ndarray] | None:
    """Every live chunk vector of a faiss dense index, by store row id; None when the searcher's dense index keeps
    no faiss file (another backend, dense off, nothing indexed yet)."""
    return dense.vectors() if isinstance(dense, DenseIndex) else None


def synced_rowid(dense: object) -> int | None:
    """The faiss index's synced chunk row id (None: no faiss index, or nothing saved yet)."""
    return dense.synced_rowid() if isinstance(dense, DenseIndex) else None


def pending_papers(store: PaperStore, synced: int | None) -> set[str]:
    """The papers with chunks beyond the synced row id (an ingest's sync still running, or not run): their chunk
    means would be partial or missing, so they are not cached yet."""
    return set() if synced is None else {paper_id for _, paper_id in store.chunk_papers_after(synced)}


def chunk_means(store: PaperStore, vectors: dict[int, np.ndarray], paper_ids: Sequence[str]) -> dict[str, np.ndarray]:
    """Normalised mean of each paper's chunk vectors, reference-list chunks left out (they describe other papers)
    unless a paper has nothing else."""
    wanted = set(paper_ids)
    content: dict[str, list[np.ndarray]] = {}
    references: dict[str, list[np.ndarray]] = {}
    after = 0
    while batch := store.chunks_after(after, limit=5000):
        after = batch[-1].rowid
        for stored in batch:
            if stored.chunk.paper_id in wanted and stored.rowid in vectors:
                target = references if stored.chunk.content_type == ContentType.REFERENCE else content
                target.setdefault(stored.chunk.paper_id, []).append(vectors[stored.rowid])
    means = {}
    for paper_id in paper_ids:
        rows = content.get(paper_id) or references.get(paper_id)
        if rows:
            mean = np.mean(rows, axis=0)
            means[paper_id] = (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)
    return means


class PaperVectors:
    """One L2-normalised vector per paper, cached in `folder` per embedding model and source: the mean of its chunk
    vectors taken from the faiss dense index ('chunk-mean', no embedding at all), or its title and abstract embedded
    ('abstract', also the fallback for papers without chunk vectors).

    The cache is rebuilt only for papers it lacks; papers no longer in the store are dropped. A paper re-ingested
    under the same id keeps its old vector until the cache file is removed.
    """

    def __init__(self, embedder: Embedder, folder: Path, source: str = "chunk-mean", dense: object = None) -> None:
        self.embedder = embedder
        self.source = source
        self.dense = dense
        # The encoder's identity (its backend and prompts with the model), as the dense index records it.
        model_key = hashlib.sha256(embedder.identity.encode()).hexdigest()[:12]
        self.path = folder / f"paper-vectors-{source}-{model_key}.npz"
        self.ids: list[str] = []
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        self._id_array = np.array([], dtype=str)
        self._row: dict[str, int] = {}
        self._version: tuple[int, int, int | None] | None = None  # the store's version and the synced row id
        # One Corpus serves several questions at once (serve.concurrent_asks): a refresh replaces the arrays together.
        self._lock = threading.RLock()

    def refresh(self, store: PaperStore) -> None:
        with self._lock:
            self._refresh(store)

    def _refresh(self, store: PaperStore) -> None:
        synced = synced_rowid(self.dense) if self.source == "chunk-mean" else None
        version = (*store_version(store), synced)  # a sync that catches up is a new version too
        if version == self._version:
            return
        pending = pending_papers(store, synced)  # looked up only when there is something to rebuild
        current = store.paper_ids()
        present = set(current)
        cached = {paper_id: vector for paper_id, vector in self._load().items() if paper_id in present}
        missing = [paper_id for paper_id in current if paper_id not in cached]
        if missing and self.source == "chunk-mean":
            vectors = chunk_vectors(self.dense)
            if vectors is not None:
                cached.update(chunk_means(store, vectors, [p for p in missing if p not in pending]))
                missing = [paper_id for paper_id in missing if paper_id not in cached]
                self._save(cached)
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start : start + EMBED_BATCH]
            texts = [paper_summary_text(store.get_paper(paper_id), EMBED_WORDS) for paper_id in batch]
            cached.update(zip(batch, self.embedder.embed(texts)))
            # After every batch, so an interrupted first build keeps its work; a pending paper's stand-in is not kept.
            self._save({paper_id: vector for paper_id, vector in cached.items() if paper_id not in pending})
        self.ids = current
        self.vectors = np.stack([cached[paper_id] for paper_id in current]) if current else self.vectors
        self._id_array = np.array(current, dtype=str)
        self._row = {paper_id: row for row, paper_id in enumerate(current)}
        self._version = version

    def neighbours(self, store: PaperStore, paper_id: str, n: int) -> list[str]:
        with self._lock:
            self._refresh(store)
            ids, vectors, id_array, row = self.ids, self.vectors, self._id_array, self._row.get(paper_id)
        if row is None:
            return []
        similarity = vectors @ vectors[row]
        # Sort by (-similarity, id): lexsort takes its keys last-first.
        order = np.lexsort((id_array, -similarity))
        return [ids[index] for index in order if index != row][:n]

    def _load(self) -> dict[str, np.ndarray]:
        if not self.path.is_file():
            return {}
        try:
            with np.load(self.path, allow_pickle=False) as data:
                return dict(zip(data["ids"].tolist(), data["vectors"]))
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
            return {}  # a damaged cache (torn, empty) is rebuilt, never trusted

    def _save(self, vectors: dict[str, np.ndarray]) -> None:
        ids, written = sorted(vectors), io.BytesIO()
        np.savez(written, ids=np.array(ids, dtype=str), vectors=np.stack([vectors[i] for i in ids]))
        atomic_write(self.path, written.getvalue())  # a temporary of its own: server workers may save at once


def reference_keys(reference: Reference) -> set[str]:
    """What identifies a cited work across papers: DOI, arXiv id, or a title long enough to be distinctive."""
    keys = set()
    if reference.doi:
        keys.add(f"doi:{reference.doi}")
    if reference.arxiv_id:
        keys.add(f"arxiv:{reference.arxiv_id}")
    title = normalize_title(reference.title)
    if len(title) >= MIN_TITLE_MATCH_CHARS:
        keys.add(f"title:{title}")
    return keys


class ReferenceGraph:
    """Every paper's cited works and the in-corpus citation edges, read from the store once per store version.

    Caches hold no store (it is passed to each call), so they can be kept per store in a weak-keyed map.
    """

    def __init__(self) -> None:
        self._cites: dict[str, set[str]] = {}
        self._cited_by: dict[str, set[str]] = {}
        self._references: dict[str, list[frozenset[str]]] = {}  # each comparable reference's identifiers
        self._holders: dict[str, set[str]] = {}
        self._version: StoreVersion | None = None
        self._lock = threading.Lock()  # several questions at once: one rebuild, published whole

    def refresh(self, store: PaperStore) -> None:
        with self._lock:
            version = store_version(store)
            if version == self._version:
                return
            cites: dict[str, set[str]] = {}
            cited_by: dict[str, set[str]] = {}
            references: dict[str, list[frozenset[str]]] = {}
            holders: dict[str, set[str]] = {}
            for paper_id in store.paper_ids():
                for reference in store.references_of(paper_id):
                    if keys := reference_keys(reference):
                        references.setdefault(paper_id, []).append(frozenset(keys))
                        for key in keys:
                            holders.setdefault(key, set()).add(paper_id)
                    if reference.resolved_paper_id and reference.resolved_paper_id != paper_id:
                        cites.setdefault(paper_id, set()).add(reference.resolved_paper_id)
                        cited_by.setdefault(reference.resolved_paper_id, set()).add(paper_id)
            self._cites, self._cited_by, self._references, self._holders = cites, cited_by, references, holders
            self._version = version

    def neighbours(self, store: PaperStore, paper_id: str, n: int) -> list[str]:
        """Papers by direct citation (1 point, either direction) plus shared references / sqrt(|refs a|·|refs b|),
        counting references with an identifier (DOI, arXiv id or a long title), each once however many of its
        identifiers match."""
        self.refresh(store)
        with self._lock:  # one version's four maps, not a mix of two
            cites, cited_by, references, holders = self._cites, self._cited_by, self._references, self._holders
        scores: defaultdict[str, float] = defaultdict(float)
        own = references.get(paper_id, [])
        citing = (set().union(*(holders[key] for key in reference)) for reference in own)
        shared: Counter[str] = Counter(other for papers in citing for other in papers if other != paper_id)
        for other, count in shared.items():
            scores[other] += count / math.sqrt(len(own) * len(references[other]))
        for other in cites.get(paper_id, set()) | cited_by.get(paper_id, set()):
            scores[other] += 1.0
        return [other for other, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:n]]


def bm25_neighbours(searcher: Searcher, store: PaperStore, paper_id: str, n: int, words: int) -> list[str]:
    """Papers whose chunks best match the seed's title and abstract under BM25."""
    text = paper_summary_text(store.get_paper(paper_id), words)
    ranking = searcher.search(text, k=n + 1, method="bm25", prf=False)
    return [other for other in ranking.paper_ids if other != paper_id][:n]
