"""Hybrid search: BM25 and dense over chunks, fused by reciprocal rank fusion, rolled up to papers."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from strata.config import EmbeddingSettings, SearchSettings
from strata.documents.model import Candidate, ChunkHit, Ranking
from strata.encoders.embedder import Embedder
from strata.index import CorpusIndex
from strata.index.dense import embedding_text
from strata.index.bm25 import rm3_weights
from strata.index.state import ChunkScore
from strata.retrieve.fusion import reciprocal_rank_fusion
from strata.retrieve.protocol import Method
from strata.store.base import StoredChunk
from strata.store.protocol import PaperStore

METHODS: tuple[Method, ...] = ("bm25", "dense", "hybrid")
ROLL_UP_PAGE = 100  # chunks rolled up at a time
READ_AHEAD_PAGES = 2  # pages whose paper ids one store query reads


class HybridSearcher:
    """The `Searcher` over a store's own indices; open one through `strata.corpus.Corpus`."""

    def __init__(self, store: PaperStore, index: CorpusIndex, settings: SearchSettings) -> None:
        self._store = store
        self._index = index
        self.settings = settings

    def with_settings(self, settings: SearchSettings) -> HybridSearcher:
        return HybridSearcher(self._store, self._index, settings)

    def resolved_method(self, method: Method) -> Method:
        """The method a search with `method` runs: 'hybrid' is 'bm25' on a corpus without a dense index."""
        if method not in METHODS:
            raise ValueError(f"unknown search method {method!r}; expected one of {', '.join(METHODS)}")
        if method != "bm25" and not self._index.settings.dense:
            if method == "dense":
                raise ValueError("dense search is off for this corpus (index.dense = false)")
            return "bm25"  # hybrid on a BM25-only corpus
        return method

    def needs_query_vector(self, method: Method) -> bool:
        """Whether a search with `method` embeds its query (so a caller may embed it first, e.g. in a batch)."""
        return self.resolved_method(method) != "bm25"

    def search(
        self,
        query: str,
        k: int | None = None,
        method: Method = "hybrid",
        prf: bool | None = None,
        paper_ids: Collection[str] | None = None,
        query_vector: np.ndarray | None = None,
    ) -> Ranking:
        """The best `k` papers for `query`, each with its best chunks and their locators.

        `prf` (default: settings) expands the BM25 side with RM3 feedback; it does not apply to 'dense'.
        `paper_ids`, when given, restricts the search to those papers. On a corpus without a dense index
        (index.dense off), 'hybrid' is BM25 alone and the ranking says so. `query_vector`, when given, is the
        query's embedding by the corpus's encoder, computed elsewhere (a server batches them across requests).
        """
        method = self.resolved_method(method)
        k = k or self.settings.k
        use_prf = (self.settings.prf if prf is None else prf) and method != "dense"
        chunk_lists: list[list[ChunkScore]] = []
        if method in ("bm25", "hybrid"):
            chunk_lists.append(self.bm25_chunks(query, use_prf, paper_ids))
        if method in ("dense", "hybrid"):
            chunk_lists.append(self.dense_chunks(query, paper_ids, query_vector))
        fused: Sequence[tuple[int, float]]
        if method == "hybrid":
            rowid_lists = [[hit.rowid for hit in hits] for hits in chunk_lists]
            fused = reciprocal_rank_fusion(rowid_lists, k=self.settings.rrf_k)
        else:
            fused = chunk_lists[0]  # ChunkScores are (rowid, score) tuples already
        name = f"{method}+prf" if use_prf else method
        return Ranking(query=query, method=name, candidates=self._papers(fused, k))

    def bm25_chunks(self, query: str, prf: bool, paper_ids: Collection[str] | None = None) -> list[ChunkScore]:
        bm25 = self._index.bm25
        tie_breaker = self.settings.bm25_title_tie_breaker
        hits = bm25.search(query, self.settings.depth, paper_ids, tie_breaker)
        if not prf or not hits:
            return hits
        feedback = hits[: self.settings.prf_docs]
        texts = self._store.get_chunks(hit.rowid for hit in feedback)
        weights = rm3_weights(
            bm25.terms(query),
            [(bm25.terms(texts[hit.rowid].chunk.text), hit.score) for hit in feedback if hit.rowid in texts],
            expansion_terms=self.settings.prf_terms,
            original_weight=self.settings.prf_original_weight,
        )
        return bm25.search_terms(weights, self.settings.depth, paper_ids, tie_breaker)

    def dense_chunks(
        self, query: str, paper_ids: Collection[str] | None = None, query_vector: np.ndarray | None = None
    ) -> list[ChunkScore]:
        rowids = None if paper_ids is None else self._index.bm25.rowids_of_papers(paper_ids)
        if query_vector is None:
            hits = self._index.dense.search_text(query, self.settings.depth, rowids)
        else:
            hits = self._index.dense.search(query_vector, self.settings.depth, rowids)
        embedding = self._index.settings.embedding
        if embedding.backend == "static" and embedding.rescore_top_k and hits:
            return rescore_with_model(query, hits, self._store, embedding)
        return hits

    def _papers(self, fused: Sequence[tuple[int, float]], k: int) -> list[Candidate]:
        """Roll chunks up to papers: a paper scores as its best chunk and keeps its best `chunks_per_paper`.

        Paper ids are read from the store a page at a time, best first, until `k` papers have appeared and one more
        page has been read: paper scores and ranks are exact; a supporting chunk ranked further down than that
        (a weak one) is left out, which saves looking up every fused chunk. Only the kept chunks' texts are read.
        """
        by_paper: dict[str, list[tuple[int, float]]] = {}
        paper_of: dict[int, str] = {}  # deleted chunks are absent: skipped
        fetched = 0  # fused[:fetched] have been looked up
        start = 0
        extra_pages = 1
        while start < len(fused) and (len(by_paper) < k or extra_pages > 0):
            if len(by_paper) >= k:
                extra_pages -= 1
            page = fused[start : start + ROLL_UP_PAGE]
            if start + len(page) > fetched:
                # Look this page and the next up in one query: a roll-up mostly reads the page that reaches k papers
                # and then one more. The pages walked, so the result, are the same as one query per page.
                window = fused[fetched : start + READ_AHEAD_PAGES * ROLL_UP_PAGE]
                paper_of.update(self._store.chunk_paper_ids(rowid for rowid, _ in window))
                fetched += len(window)
            start += ROLL_UP_PAGE
            for rowid, score in page:
                if rowid in paper_of:
                    by_paper.setdefault(paper_of[rowid], []).append((rowid, score))
        best_first = sorted(by_paper.items(), key=lambda item: (-item[1][0][1], item[0]))[:k]
        kept = [(paper_id, hits[: self.settings.chunks_per_paper]) for paper_id, hits in best_first]
        stored = self._store.get_chunks(rowid for _, hits in kept for rowid, _ in hits)
        candidates: list[Candidate] = []
        for paper_id, hits in kept:
            chunks = [_hit(stored[rowid], score) for rowid, score in hits if rowid in stored]
            if chunks:  # else every kept chunk was deleted since the lookup above
                candidates.append(
                    Candidate(
                        paper_id=paper_id,
                        title=stored[chunks[0].rowid].paper_title,
                        score=chunks[0].score,
                        rank=len(candidates) + 1,
                        chunks=chunks,
                    )
                )
        return candidates


def rescore_with_model(
    query: str, hits: list[ChunkScore], store: PaperStore, settings: EmbeddingSettings
) -> list[ChunkScore]:
    """Static first pass, model second: `settings.model` (sentence-transformers) embeds the best `rescore_top_k`
    hits and the query, and those hits are re-ordered by its cosine; the hits below keep their order, shifted to
    score below every re-scored one."""
    top = hits[: settings.rescore_top_k]
    stored = store.get_chunks(hit.rowid for hit in top)
    top = [hit for hit in top if hit.rowid in stored]  # a chunk deleted since the search drops out
    if not top:
        return hits[settings.rescore_top_k :]
    model = Embedder(settings.model_copy(update={"backend": "sentence-transformers"}))
    vectors = model.embed([embedding_text(stored[hit.rowid], settings) for hit in top])
    scores = (vectors @ model.embed_query(query)).tolist()
    rescored = sorted((ChunkScore(hit.rowid, score) for hit, score in zip(top, scores)), key=lambda h: (-h.score, h.rowid))
    rest = hits[settings.rescore_top_k :]
    if rest:
        shift = min(0.0, rescored[-1].score - rest[0].score - 1e-6)
        rest = [ChunkScore(hit.rowid, hit.score + shift) for hit in rest]
    return rescored + rest


def _hit(stored: StoredChunk, score: float) -> ChunkHit:
    return ChunkHit(
        rowid=stored.rowid,
        text=stored.chunk.text,
        content_type=stored.chunk.content_type,
        locator=stored.chunk.locator,
        score=score,
    )

