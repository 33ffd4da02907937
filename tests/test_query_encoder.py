"""Query-side adaptation of the dense encoder: trained on the corpus's own queries against its papers' vectors,
validated on held-out papers, saved only when it beats the unadapted encoder, and used for queries only (documents
keep the indexed model's vectors, so the dense index stays valid)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from corpus_support import bm25_corpus
from strata.config import EmbeddingSettings, RerankSettings, Settings
from strata.corpus import Corpus
from strata.encoders.embedder import Embedder
from strata.retrieve.query_batch import QueryBatcher
from strata.train.pairs import TrainingQuery
from strata.train.query_encoder import fit, mrr_at_10, query_encoder_dir, train_query_encoder
from test_train_pairs import papers

pytestmark = pytest.mark.slow


def test_mrr_counts_the_rank_of_each_querys_own_paper_cut_at_ten():
    papers_ = np.eye(12, dtype=np.float32)
    queries = np.stack([papers_[0], 0.9 * papers_[1] + papers_[2]])  # own paper first; own paper second
    assert mrr_at_10(queries, papers_, [0, 1]) == pytest.approx((1.0 + 0.5) / 2)
    assert mrr_at_10(queries[:1], papers_, [5]) == 0.0  # ranked beyond 10 (tied last with 10 others): 0


class TinyEncoder(torch.nn.Module):
    """Stands in for a SentenceTransformer in `fit`: every query embedded as one learnt vector."""

    def __init__(self, prompts: dict[str, str] | None = None) -> None:
        super().__init__()
        self.vector = torch.nn.Parameter(torch.ones(3))
        self.prompts = prompts or {}
        self.prompted: list[str | None] = []

    def preprocess(self, texts, prompt=None):
        self.prompted.append(prompt)
        return len(texts)

    def forward(self, count):
        return {"sentence_embedding": self.vector.expand(count, 3)}

    def save(self, folder):
        Path(folder).mkdir(parents=True, exist_ok=True)


def test_validation_runs_the_configured_number_of_checks_spread_evenly_the_last_at_the_end(tmp_path):
    queries = [TrainingQuery(query=f"q{n}", paper_id=f"p{n % 3}", positive="", source="title") for n in range(6)]
    row = {f"p{n}": n for n in range(3)}
    papers_ = torch.eye(3)
    for steps, checks, expected in [(10, 3, [4, 7, 10]), (10, 4, [3, 5, 8, 10]), (8, 4, [2, 4, 6, 8]), (2, 4, [1, 2])]:
        rerank = RerankSettings(query_encoder_steps=steps, query_encoder_checks=checks, query_encoder_batch=2)
        made = fit(TinyEncoder(), queries, row, papers_, rerank, lambda: 0.5, tmp_path / "staged", lambda line: None,
                   None)
        assert [check.step for check in made] == expected
    # Trained on queries as search embeds them: with the model's query prompt.
    prompted = TinyEncoder({"query": "query: ", "document": "passage: "})
    rerank = RerankSettings(query_encoder_steps=2, query_encoder_checks=1, query_encoder_batch=2)
    fit(prompted, queries, row, papers_, rerank, lambda: 0.5, tmp_path / "staged", lambda line: None, None)
    assert prompted.prompted == ["query: ", "query: "]


def adapt(tmp_path, **overrides):
    with bm25_corpus(tmp_path, papers(60), dense=True) as (base, _):
        pass
    settings = Settings.load(overrides={
        "store.home": str(base.store.home), "rerank.train_queries_per_source": 60,
        "rerank.train_validation_share": 0.2, "rerank.query_encoder_steps": 6, "rerank.query_encoder_batch": 8,
        "rerank.query_encoder_checks": 2, **overrides,
    })
    with Corpus.open(settings) as corpus, pytest.MonkeyPatch.context() as patch:
        lines: list[str] = []
        tasks: list[str | None] = []
        encode = SentenceTransformer.encode

        def recorded(model, *args, **kwargs):
            tasks.append(kwargs.get("task"))
            return encode(model, *args, **kwargs)

        patch.setattr(SentenceTransformer, "encode", recorded)
        report = train_query_encoder(corpus, log=lines.append)
        assert any("validation MRR@10" in line for line in lines)
        # Validation embeds its queries as search does, by the query side (a model's query prompt applies).
        assert tasks and set(tasks) == {"query"}
        return settings, report, query_encoder_dir(corpus)


def test_an_adapted_query_encoder_is_saved_when_it_beats_the_unadapted_one_and_embeds_queries_only(tmp_path):
    settings, report, folder = adapt(tmp_path, **{"rerank.train_learning_rate": 1e-4})
    assert report.queries == {"title": 48, "inverse-cloze": 96}
    assert [check.step for check in report.checks] == [3, 6] and report.validation_queries == 36
    best = max(check.validation for check in report.checks)
    assert report.model_dir == str(folder) and best > report.base_validation and (folder / "modules.json").is_file()
    assert not folder.with_name(folder.name + ".partial").exists()
    adapted = Embedder(EmbeddingSettings(query_model=str(folder)))
    plain = Embedder(EmbeddingSettings())
    text = "zinc samples across sites"
    assert np.allclose(adapted.embed([text]), plain.embed([text]))  # documents: the indexed model's vectors
    assert not np.allclose(adapted.embed_query(text), plain.embed_query(text), atol=1e-4)
    batcher = QueryBatcher(adapted)  # a server's batched query embeddings use it too
    try:
        assert np.array_equal(batcher.embed_query(text), adapted.embed_query(text))
    finally:
        batcher.close()


def test_nothing_is_saved_when_training_does_not_beat_the_unadapted_encoder(tmp_path):
    _, report, folder = adapt(tmp_path, **{"rerank.train_learning_rate": 1e-12})  # weights practically unchanged
    assert report.model_dir is None and report.best_step == 0 and not folder.exists()
    assert all(check.validation <= report.base_validation for check in report.checks)


def test_a_corpus_without_vectors_or_too_small_gets_a_clear_message(tmp_path):
    with bm25_corpus(tmp_path / "bm25", papers(60)) as (_, corpus), pytest.raises(ValueError, match="no dense index"):
        train_query_encoder(corpus)
    with bm25_corpus(tmp_path / "small", papers(5), dense=True) as (_, corpus):
        with pytest.raises(ValueError, match="at least 50"):
            train_query_encoder(corpus)
        assert not query_encoder_dir(corpus).exists()
