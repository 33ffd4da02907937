"""The scale corpus generator, and a streamed index build that goes straight to HNSW, on real SciFact sentences."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import faiss
import numpy as np
import pytest

from strata.config import Settings
from strata.experiments.scale_corpus import ScaleCorpus, SourceText
from strata.index import CorpusIndex
from strata.index.dense import DenseState
from strata.store.sqlite import CorpusStore


@pytest.fixture(scope="module")
def source(shared_data: Path) -> SourceText:
    lines = islice((shared_data / "scifact" / "beir" / "corpus.jsonl").open(encoding="utf-8"), 40)
    records = [json.loads(line) for line in lines]
    vectors = np.random.default_rng(0).standard_normal((len(records), 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return SourceText.from_chunks([r["text"] for r in records], vectors, [r["title"] for r in records])


def test_papers_are_real_sentences_recombined_and_reproducible(source: SourceText) -> None:
    corpus = ScaleCorpus(source, papers=3, chunks_per_paper=5, seed=7)
    paper = corpus.paper(1)
    assert paper == ScaleCorpus(source, papers=3, chunks_per_paper=5, seed=7).paper(1)
    assert paper != ScaleCorpus(source, papers=3, chunks_per_paper=5, seed=8).paper(1)
    assert len(paper.chunks) == 5 and paper.title in source.titles
    _, plan = corpus._plan(1)
    for chunk, picks in zip(paper.chunks, plan):
        assert paper.text[chunk.char_start : chunk.char_end] == chunk.text
        assert 4 <= len(picks) <= 8 and chunk.text == " ".join(source.sentences[i] for i in picks)
    assert len(source.sentences) > 3 * 40 and min(len(s) for s in source.sentences) >= 20  # split, short ones dropped
    assert corpus.chunks == 15 and [p.id for p in corpus.iter_papers()] == [corpus.paper_id(i) for i in range(3)]


def test_chunk_vectors_are_normalised_sums_of_their_sources(source: SourceText) -> None:
    corpus = ScaleCorpus(source, papers=2, chunks_per_paper=4)
    vectors = corpus.vectors(0)
    assert vectors.shape == (4, 16) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    _, plan = corpus._plan(0)
    expected = source.vectors[source.sentence_source[plan[2]]].sum(axis=0)
    assert np.allclose(vectors[2], expected / np.linalg.norm(expected), atol=1e-6)


def test_a_large_first_sync_builds_hnsw_directly_and_finds_the_chunks(source: SourceText, tmp_path: Path) -> None:
    corpus = ScaleCorpus(source, papers=6, chunks_per_paper=20)
    settings = Settings.load(overrides={"store.home": str(tmp_path), "index.hnsw_above": 50})
    store = CorpusStore(tmp_path / "corpus.sqlite3")
    for paper in corpus.iter_papers():
        store.put_paper(paper, "scale")
    index = CorpusIndex(store, settings)
    report = index.sync(vectors_of=corpus.vectors_of)
    assert report.chunks_added == report.dense_size == corpus.chunks
    state = DenseState.model_validate_json((tmp_path / "index" / "dense" / "state.json").read_text())
    assert state.chunk_rowid == store.max_chunk_rowid()
    assert isinstance(faiss.downcast_index(index.dense._current().index), faiss.IndexHNSW)
    stored = store.chunks_after(0, limit=1000)
    target = stored[37]
    hits = index.dense.search(corpus.vectors_of([target])[0], 3)
    assert hits[0].rowid == target.rowid and hits[0].score == pytest.approx(1.0, abs=1e-5)
    same_text = {s.rowid for s in stored if s.chunk.text == target.chunk.text}
    assert index.bm25.search(target.chunk.text, 5)[0].rowid in same_text
