"""The cross-encoder path: one training step from the packaged MiniLM, saved under the store home, picked up by the
default reranker; a configured model path loads instead; synthetic pairs come from the fake LLM's queries."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.config import LLMSettings, Settings
from strata.documents.model import Paper
from strata.llm import LLMClient
from strata.rerank import FirstStage, make_reranker
from strata.rerank.crossencoder import (
    CrossEncoderReranker,
    TrainingPair,
    cross_encoder_source,
    fit_cross_encoder,
    query_groups,
    trained_model_dir,
)
from strata.store.sqlite import CorpusStore
from test_rerank_unit import RankingBackend, first_stage

pytestmark = pytest.mark.slow


@pytest.fixture()
def store(tmp_path: Path):
    store = CorpusStore(tmp_path / "home" / "corpus.sqlite3")
    for number in range(12):
        store.put_paper(
            Paper(id=f"p{number:03d}", title=f"Paper {number}", abstract=f"zinc trial {number}", source_format="test"),
            "sha",
        )
    yield store
    store.close()


def test_a_trained_cross_encoder_is_saved_under_the_store_and_loads_back(store: CorpusStore, tmp_path: Path):
    settings = Settings.load(overrides={"store.home": str(tmp_path / "home"), "rerank.train_epochs": 1})
    assert cross_encoder_source(settings) is None
    pairs = [
        TrainingPair(query="zinc and colds", passage="Zinc shortens colds", label=1.0),
        TrainingPair(query="zinc and colds", passage="Graph networks for tides", label=0.0),
    ]
    steps, loss = fit_cross_encoder(pairs, settings, trained_model_dir(settings))
    assert steps == 1 and loss > 0
    assert cross_encoder_source(settings) == str(tmp_path / "home" / "rerank" / "cross-encoder")
    # A model trained here is used when asked for; only a user-named one replaces the first stage by default.
    assert isinstance(make_reranker(settings, store), FirstStage)
    reranker = make_reranker(settings, store, method="cross-encoder")
    assert isinstance(reranker, CrossEncoderReranker)
    result = reranker.rank("zinc trial", first_stage(12))
    assert sorted(c.paper_id for c in result.candidates) == [f"p{n:03d}" for n in range(12)]
    assert result.method == "hybrid>cross-encoder"
    elsewhere = settings.model_copy(
        update={"rerank": settings.rerank.model_copy(update={"cross_encoder_model": str(tmp_path / "nowhere")})}
    )
    assert cross_encoder_source(elsewhere) == str(tmp_path / "nowhere")  # a named model wins over the trained one


def test_synthetic_pairs_take_the_llm_query_its_passage_and_mined_negatives(store: CorpusStore, tmp_path: Path):
    from strata.rerank.crossencoder import synthetic_pairs

    class Searcher:
        def search(self, query, k):
            return first_stage(6)

    settings = Settings.load(overrides={"rerank.train_passages": 2, "rerank.train_negatives": 2})
    backend = RankingBackend(scripted=['{"query": "does zinc help"}', '{"query": "zinc trial results"}'])
    pairs, kept, failed = synthetic_pairs(settings, store, Searcher(), LLMClient(backend, LLMSettings()))
    assert (kept, failed, len(pairs)) == (2, 0, 6)
    positives = [pair for pair in pairs if pair.label == 1.0]
    assert [pair.query for pair in positives] == ["does zinc help", "zinc trial results"]
    assert all(pair.passage.startswith("Paper") for pair in pairs)


def test_training_groups_each_positive_with_the_negatives_mined_for_its_query():
    pair = lambda query, passage, label: TrainingPair(query=query, passage=passage, label=label)  # noqa: E731
    pairs = [pair("q1", "a", 1.0), pair("q1", "b", 0.0), pair("q1", "c", 0.0),
             pair("q2", "d", 1.0),  # no negative mined: nothing to contrast, left out
             pair("q1", "e", 1.0), pair("q1", "f", 0.0)]  # the same words from another passage: its own group
    groups = query_groups(pairs)
    assert [[p.passage for p in group] for group in groups] == [["a", "b", "c"], ["e", "f"]]
