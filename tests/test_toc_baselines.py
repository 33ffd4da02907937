"""Leaf-level baselines: BM25 on a real OpenStax book beats chance by far; dense scores a leaf by its best chunk and
keeps its vectors in a cache folder only for the texts and encoder that made them."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import numpy as np

from strata.config import EmbeddingSettings, SearchSettings, Settings
from strata.documents.builder import PaperBuilder
from strata.documents.parsers import iter_papers
from strata.eval.toc import load_toc_queries, score_rankings
from strata.toc.baselines import LeafBM25, LeafDense, LeafHybrid
from strata.toc.tree import document_toc


def test_bm25_over_leaves_of_a_real_book_beats_random_leaves(shared_data: Path):
    book = shared_data / "openstax-toc-qa" / "introduction-sociology-3e" / "derived"
    (paper,) = iter_papers(book, Settings.load().parsing)
    toc = document_toc(paper)
    queries = load_toc_queries(book)[::3]
    bm25 = LeafBM25(toc)
    results = score_rankings(queries, [bm25.rank(q.question, 3) for q in queries])
    r1 = statistics.fmean(r.metrics["R@1"] for r in results)
    # A random leaf hits the gold section with probability (leaves under gold) / (all leaves).
    leaves = toc.leaves()
    chance = statistics.fmean(
        sum(1 for leaf in leaves if leaf.path[: len(q.gold_path)] == q.gold_path) / len(leaves) for q in queries
    )
    assert chance < 0.02 and r1 > 0.25 and r1 > 10 * chance


def earth(extra: str = ""):
    builder = PaperBuilder("doc", "test")
    builder.open_section("Oceans", 1)
    builder.add_block("Tides rise and fall twice a day because of the moon's gravity.")
    builder.open_section("Volcanoes", 1)
    builder.add_block("Magma rises through the crust and erupts as lava.")
    builder.add_block("Ash clouds from eruptions can disrupt air travel." + extra)
    return document_toc(builder.build(title="Earth"))


def test_dense_scores_a_leaf_by_its_best_chunk():
    toc = earth()
    dense = LeafDense(toc, EmbeddingSettings(threads=1))
    ranking = dense.rank("Why do volcanic ash clouds stop flights?", 2)
    assert [leaf.title for leaf in (toc.entry(hit.number) for hit in ranking.leaves)] == ["Volcanoes", "Oceans"]
    assert dense.rank("What causes ocean tides?", 1).leaves[0].number == "1"


def test_dense_embeds_the_question_as_a_query_and_minilm_gives_both_sides_the_same_vector(monkeypatch):
    dense = LeafDense(earth(), EmbeddingSettings())

    def as_document(texts):
        raise AssertionError("the question was embedded as a document")

    question = "What causes ocean tides?"
    document_side = dense.embedder.embed([question])[0]
    monkeypatch.setattr(dense.embedder, "embed", as_document)  # a model with query and document prompts differs
    [best] = dense.rank(question, 1).leaves
    # The packaged MiniLM has no prompts: the query side is bit for bit the document side, so scores do not move.
    assert best.number == "1" and best.score == float((dense.vectors @ document_side).max())


def test_leaf_vectors_are_reused_from_the_cache_until_the_text_changes(tmp_path: Path, monkeypatch):
    settings, cache = EmbeddingSettings(threads=1), tmp_path / "vectors"
    first = LeafDense(earth(), settings, cache=cache)
    [saved] = list(cache.iterdir())

    def no_embedding(texts):
        raise AssertionError("embedded again")

    monkeypatch.setattr(first.embedder, "embed", no_embedding)
    again = LeafDense(earth(), settings, first.embedder, cache)  # would raise if it embedded
    assert (again.vectors == first.vectors).all()

    monkeypatch.undo()
    changed = LeafDense(earth(" Pilots reroute."), settings, first.embedder, cache)
    assert not (changed.vectors == first.vectors).all() and len(list(cache.iterdir())) == 2  # both texts kept
    os.utime(saved, (1, 1))  # the oldest version
    LeafDense(earth(" Airports close."), settings, first.embedder, cache)
    assert len(list(cache.iterdir())) == 2 and not saved.exists()  # a third text replaces the oldest file

    [damaged] = [path for path in cache.iterdir() if (np.load(path) == changed.vectors).all()]
    for content in (b"not an array", b""):  # damaged or empty: embedded again, never a crash
        damaged.write_bytes(content)
        assert (LeafDense(earth(" Pilots reroute."), settings, first.embedder, cache).vectors == changed.vectors).all()
    assert not list(cache.glob("*.partial"))


def test_with_sentences_a_leaf_also_scores_by_its_best_sentence():
    toc = earth(" Pilots reroute flights around the plume.")
    plain = LeafDense(toc, EmbeddingSettings(threads=1))
    with_sentences = LeafDense(toc, EmbeddingSettings(threads=1, sentences=True), plain.embedder)
    assert len(with_sentences.vectors) == len(plain.vectors) + 3  # the volcano chunk's sentences; the tides one none
    query = "Pilots reroute flights around the plume."
    best = [dense.rank(query, 1).leaves[0] for dense in (plain, with_sentences)]
    assert [toc.entry(hit.number).title for hit in best] == ["Volcanoes", "Volcanoes"]
    assert best[1].score > best[0].score + 0.05  # the restated sentence matches undiluted by the chunk


def test_leaf_hybrid_fuses_as_the_corpus_search_is_set_to():
    toc = earth()
    dense = LeafDense(toc, EmbeddingSettings(threads=1))
    question = "Why do volcanic ash clouds stop flights?"
    rankings = {
        fusion: LeafHybrid(LeafBM25(toc), dense, SearchSettings(fusion=fusion)).rank(question, 2)
        for fusion in ("rrf", "scores")
    }
    assert [hit.number for hit in rankings["rrf"].leaves] == [hit.number for hit in rankings["scores"].leaves]
    assert toc.entry(rankings["scores"].leaves[0].number).title == "Volcanoes"
    assert rankings["rrf"].leaves[0].score == 2 / 61  # first on both sides: 1 / (60 + 1) twice
    assert rankings["scores"].leaves[0].score == 1.0  # the best of both sides, scaled to 1 on each
