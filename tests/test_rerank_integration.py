"""CoRank end to end with the real embedded LLM and MiniLM on a few SciFact abstracts: features are extracted,
cached, and a second ranking makes no extraction call; the result is a permutation of the first stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.config import Settings
from strata.documents.parsers.beir import PARSER
from strata.eval.beir import load_beir, write_subset
from strata.index import CorpusIndex
from strata.llm import make_client, tracing
from strata.rerank import make_reranker
from strata.retrieve.hybrid import HybridSearcher
from strata.store.sqlite import CorpusStore

pytestmark = pytest.mark.slow


def test_corank_on_real_scifact_abstracts_with_the_embedded_model(shared_data: Path, tmp_path: Path):
    folder = write_subset(load_beir(shared_data / "scifact" / "beir"), tmp_path / "mini", queries=1, documents=6)
    dataset = load_beir(folder)
    settings = Settings.load(
        overrides={
            "store.home": str(tmp_path / "home"),
            "rerank.pool": 3,
            "rerank.fine_k": 2,
            "rerank.features_input_words": 60,
            "rerank.passage_words": 40,
        }
    )
    with CorpusStore(tmp_path / "home" / "corpus.sqlite3") as store, make_client(settings, cache=False) as client:
        for paper in PARSER.parse(dataset.corpus_path, settings.parsing):
            store.put_paper(paper, "scifact-mini")
        index = CorpusIndex(store, settings)
        index.sync()
        query = dataset.queries[0].text
        first = HybridSearcher(store, index, settings.search).search(query, k=6)
        with tracing() as trace:
            reranked = make_reranker(settings, store, client, method="corank").rank(query, first)
        extractions = [call for call in trace.calls if call.prompt == "features_extract"]
        assert len(extractions) == 3 and all(call.ok for call in extractions)
        assert sorted(c.paper_id for c in reranked.candidates) == sorted(c.paper_id for c in first.candidates)
        assert [c.paper_id for c in reranked.candidates[3:]] == [c.paper_id for c in first.candidates[3:]]
        assert reranked.method == f"{first.method}>corank"
        with tracing() as again:
            make_reranker(settings, store, client, method="corank").rank(query, first)
        assert [call.prompt for call in again.calls] == ["rerank_listwise", "rerank_listwise"]
