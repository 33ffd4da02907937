"""Retrieve + Relate on real data: 80 SciFact abstracts (the judged ones of the first 3 test claims plus others),
indexed with the packaged MiniLM encoder, asked with the embedded LLM (answers come from the response cache after
the first run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.config import Settings
from strata.corpus import Corpus
from strata.documents.parsers.beir import PARSER
from strata.eval.beir import load_beir, write_subset
from strata.llm import Trace, make_client
from strata.pipeline.ask import find_candidates
from strata.rerank import FirstStage


@pytest.fixture(scope="module")
def tiny(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = write_subset(load_beir(shared_data / "scifact" / "beir"), tmp_path_factory.mktemp("scifact-tiny"),
                          queries=3, documents=80)
    dataset = load_beir(folder)
    home = tmp_path_factory.mktemp("home")
    # Two rounds and short evidence keep the embedded LLM's work small: decompose, verify, maybe one follow-up.
    settings = Settings.load(overrides={"store.home": str(home), "retrieve.max_rounds": 2,
                                        "retrieve.verify_papers": 3, "retrieve.verify_words": 40})
    with Corpus.open(settings) as corpus:
        for paper in PARSER.parse(dataset.corpus_path, settings.parsing):
            corpus.store.put_paper(paper, "scifact-tiny")
        corpus.index.sync()
        yield dataset, settings, corpus


def test_find_candidates_with_the_embedded_llm(tiny):
    dataset, settings, corpus = tiny
    query = dataset.queries[0]
    trace = Trace()
    with make_client(Settings.load()) as client:
        result = find_candidates(query.text, corpus=corpus, client=client, reranker=FirstStage(),
                                 settings=settings, trace=trace)
    ids = result.candidates.paper_ids
    assert len(ids) == 50 == len(set(ids)) and set(dataset.qrels[query.id]) <= set(ids)
    assert set(ids) <= set(corpus.store.paper_ids())
    assert result.rounds[0].queries[0] == query.text and 1 <= len(result.rounds) <= 2
    assert result.stop_reason in ("sufficient", "no_new_subquery", "max_rounds")
    prompts = [call.prompt for call in trace.calls if call.ok]
    assert prompts[:2] == ["retrieve_decompose", "retrieve_verify"]
    assert result.expansion is not None and [s.signal for s in result.expansion.signals] == [
        "embedding", "references", "bm25"]
    assert result.ranking_b.candidates and all(c.chunks for c in result.candidates.candidates[:5])


def test_without_an_llm_ranking_a_is_the_hybrid_search_and_keeps_its_head(tiny):
    dataset, settings, corpus = tiny
    query = dataset.queries[1].text
    result = find_candidates(query, corpus=corpus, client=None, reranker=FirstStage(), settings=settings)
    plain = corpus.searcher.search(query, k=settings.retrieve.per_query_k, prf=settings.retrieve.prf)
    assert result.ranking_a.paper_ids == plain.paper_ids and result.stop_reason == "no_llm"
    keep = settings.relate.keep_a
    assert keep > 0 and result.candidates.paper_ids[:keep] == plain.paper_ids[:keep]
    assert set(result.candidates.paper_ids[keep:]) - set(plain.paper_ids[:50])  # Relate brought in papers of its own
