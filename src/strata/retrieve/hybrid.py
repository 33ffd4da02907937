"""Hybrid search: BM25 and dense over chunks, fused by reciprocal rank fusion (or by their scaled scores, with
`search.fusion`), rolled up to papers."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from operator import itemgetter

import numpy as np

from strata.config import EmbeddingSettings, SearchSettings
from strata.documents.model import Candidate, ChunkHit, Ranking
from strata.encoders.embedder import Embedder
from strata.index import CorpusIndex
from strata.index.dense import embedding_text
from strata.index.bm25 import rm3_weights
from strata.index.state import ChunkScore
from strata.retrieve.fusion import fuse_row_id_arrays, fuse_score_arrays
from strata.retrieve.protocol import Method
from strata.store.base import StoredChunk
from strata.store.protocol import PaperStore

METHODS: tuple[Method, ...] = ("bm25", "dense", "hybrid")
ROLL_UP_PAGE = 100  # chunks rolled up at a time
READ_AHEAD_PAGES = 2  # pages whose paper ids one store query reads
SHALLOW_DEPTH = 500  # hits a BM25 search asks for first (then search.depth, if the roll-up walks further)


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
        ranked = self._chunk_ranking(query, method, use_prf, paper_ids, query_vector)
        name = f"{method}+prf" if use_prf else method
        return Ranking(query=query, method=name, candidates=self._papers(ranked, k))

    def _chunk_ranking(
        self, query: str, method: Method, prf: bool, paper_ids: Collection[str] | None, query_vector: np.ndarray | None
    ) -> RankedPrefix:
        """The chunks to roll up, best first, as `RankedPrefix`: BM25 alone searched as deep as the roll-up reads."""
        if method == "bm25" and not prf:
            tie_breaker = self.settings.bm25_title_tie_breaker
            return BM25Prefix(lambda depth: self._index.bm25.search(query, depth, paper_ids, tie_breaker),
                              self.settings.depth)
        if method == "hybrid" and self.settings.fusion == "scores":
            sides = [self.bm25_chunks(query, prf, paper_ids), self.dense_chunks(query, paper_ids, query_vector)]
            scored = [(np.array([hit.rowid for hit in hits]), np.array([hit.score for hit in hits])) for hits in sides]
            weight = self.settings.dense_weight
            return pairs_as_read(*fuse_score_arrays(scored, [1 - weight, weight]))
        if method == "hybrid":
            lists = [self._bm25_rowids(query, prf, paper_ids), self._dense_rowids(query, paper_ids, query_vector)]
            return pairs_as_read(*fuse_row_id_arrays(lists, k=self.settings.rrf_k))
        if method == "bm25":
            hits = self.bm25_chunks(query, prf, paper_ids)
        else:
            hits = self.dense_chunks(query, paper_ids, query_vector)
        return lambda _: hits  # ChunkScores are (rowid, score) tuples already

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
        rowids = self._dense_filter(paper_ids)
        if query_vector is None:
            hits = self._index.dense.search_text(query, self.settings.depth, rowids)
        else:
            hits = self._index.dense.search(query_vector, self.settings.depth, rowids)
        if self._rescores() and hits:
            return rescore_with_model(query, hits, self._store, self._index.settings.embedding)
        return hits

    def _bm25_rowids(self, query: str, prf: bool, paper_ids: Collection[str] | None) -> Sequence[int] | np.ndarray:
        """`bm25_chunks`' row ids alone (fusion reads nothing else)."""
        if prf:
            return list(map(itemgetter(0), self.bm25_chunks(query, prf, paper_ids)))
        tie_breaker = self.settings.bm25_title_tie_breaker
        return self._index.bm25.search_rowids(query, self.settings.depth, paper_ids, tie_breaker)

    def _dense_rowids(
        self, query: str, paper_ids: Collection[str] | None, query_vector: np.ndarray | None
    ) -> Sequence[int] | np.ndarray:
        """`dense_chunks`' row ids alone."""
        if query_vector is None or self._rescores():
            return list(map(itemgetter(0), self.dense_chunks(query, paper_ids, query_vector)))
        return self._index.dense.search_rowids(query_vector, self.settings.depth, self._dense_filter(paper_ids))

    def _dense_filter(self, paper_ids: Collection[str] | None) -> list[int] | None:
        return None if paper_ids is None else self._index.bm25.rowids_of_papers(paper_ids)

    def _rescores(self) -> bool:
        """Whether dense hits of the static tier are re-scored by the model (`rescore_with_model`)."""
        embedding = self._index.settings.embedding
        return embedding.backend == "static" and bool(embedding.rescore_top_k)

    def _papers(self, ranked: RankedPrefix, k: int) -> list[Candidate]:
        """Roll chunks up to papers: a paper scores as its best chunk (ties by paper id) and keeps its best
        `chunks_per_paper`."""
        best_first = sorted(self._roll_up(ranked, k).items(), key=lambda item: (-item[1][0][1], item[0]))[:k]
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

    def _roll_up(self, ranked: RankedPrefix, k: int) -> dict[str, list[tuple[int, float]]]:
        """Each paper's chunks, best first, from a walk down the ranking.

        Paper ids are read from the store a page at a time, best first, until `k` papers have appeared, one more
        page has been read and the walk is past every chunk tying the k-th paper's score: paper scores and ranks are
        exact, and every paper tied at the cut is there for `_papers` to choose by id (not by which row came first);
        a supporting chunk ranked further down than that (a weak one) is left out, which saves looking up every fused
        chunk. Only the kept chunks' texts are read.
        """
        by_paper: dict[str, list[tuple[int, float]]] = {}
        paper_of: dict[int, str] = {}  # deleted chunks are absent: skipped
        fetched = 0  # fused[:fetched] have been looked up
        start = 0
        extra_pages = 1
        cut_score = math.inf  # the k-th paper's score, once k papers have appeared
        while True:
            # The walk reads this page, and the next when it looks the page up: that much must be exact.
            reads = ROLL_UP_PAGE if fetched >= start + ROLL_UP_PAGE else READ_AHEAD_PAGES * ROLL_UP_PAGE
            fused = ranked(start + reads)
            if not (start < len(fused) and (len(by_paper) < k or extra_pages > 0 or fused[start][1] >= cut_score)):
                return by_paper
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
                    hits = by_paper.setdefault(paper_of[rowid], [])
                    if not hits and len(by_paper) == k:
                        cut_score = score
                    hits.append((rowid, score))


# The first `n` entries of a ranking, exactly (more is fine; fewer only when the ranking has no more).
RankedPrefix = Callable[[int], Sequence[tuple[int, float]]]


class BM25Prefix:
    """A BM25 ranking at `search.depth`, searched only as deep as the roll-up walks (it mostly reads 2-4 pages of
    100, and each hit costs ~1 µs of Python to rank): first `SHALLOW_DEPTH`, then the full depth if the walk goes
    further. A shallow search is trusted only above its lowest score: every chunk scoring higher is among its hits
    (those tied with the lowest may be any of the tied), so that part is exactly the deep search's first part; and
    it is the whole ranking when it returns fewer hits than asked for."""

    def __init__(self, search: Callable[[int], list[ChunkScore]], depth: int, first: int | None = None) -> None:
        self._search = search  # the best hits at a depth
        self._depth = depth
        self._first = SHALLOW_DEPTH if first is None else first
        self._asked = 0
        self._hits: list[ChunkScore] = []

    def __call__(self, n: int) -> list[ChunkScore]:
        while len(self._hits) < n and self._asked < self._depth:
            self._asked = self._depth if self._asked else min(self._depth, max(self._first, n + 1))
            hits = self._search(self._asked)
            complete = self._asked >= self._depth or len(hits) < self._asked
            self._hits = hits if complete else _above_the_lowest_score(hits)
        return self._hits


def pairs_as_read(rowids: np.ndarray, scores: np.ndarray) -> RankedPrefix:
    """A ranking held as arrays, made (row id, score) pairs only as far as the roll-up reads it (it mostly reads 200
    to 400 of a hybrid search's ~2,000)."""
    pairs: list[tuple[int, float]] = []

    def first(n: int) -> list[tuple[int, float]]:
        if len(pairs) < min(n, rowids.size):
            pairs.extend(zip(rowids[len(pairs) : n].tolist(), scores[len(pairs) : n].tolist()))
        return pairs

    return first


def _above_the_lowest_score(hits: list[ChunkScore]) -> list[ChunkScore]:
    """`hits` (best first) without the ones tied with the last."""
    end = len(hits)
    while end and hits[end - 1].score == hits[-1].score:
        end -= 1
    return hits[:end]


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

