"""The BM25 and dense indices stay in step with the store: incremental, idempotent, atomic, never confused by input.

The dense index's mechanics are tested with a small deterministic bag-of-words encoder standing in for MiniLM (the
real encoder is exercised in test_search.py on SciFact).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from strata.config import Settings
from strata.documents.builder import PaperBuilder
from strata.documents.model import Paper
from strata.index import CorpusIndex
from strata.index.bm25 import rm3_weights
from strata.index.dense import DenseState
from strata.encoders.embedder import resolve_model_path
from strata.index.state import SyncState, read_state
from strata.store.sqlite import CorpusStore

DIMENSION = 64


class BagOfWordsEncoder:
    """Hashes lower-cased words into DIMENSION buckets: texts sharing words get similar unit vectors."""

    dimension = DIMENSION

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                vectors[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % DIMENSION] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def make_paper(paper_id: str, title: str, *paragraphs: str) -> Paper:
    """One section, hence one chunk, per paragraph."""
    builder = PaperBuilder(paper_id, "test")
    for number, paragraph in enumerate(paragraphs, start=1):
        builder.open_section(f"Part {number}", level=1)
        builder.add_block(paragraph)
    return builder.build(title=title)


PAPERS = [
    make_paper("alpha", "Graphene conductivity", "Graphene sheets conduct electricity remarkably well."),
    make_paper(
        "beta", "Protein folding", "Chaperones assist protein folding in the cell.", "Misfolded proteins aggregate."
    ),
    make_paper("gamma", "Coral reefs", "Bleaching of coral reefs follows ocean warming events."),
]


def open_index(home: Path, **overrides: object) -> tuple[CorpusStore, CorpusIndex]:
    settings = Settings.load(overrides={"store.home": str(home), **overrides})
    store = CorpusStore(home / "corpus.sqlite3")
    index = CorpusIndex(store, settings)
    index.dense.embedder = BagOfWordsEncoder()  # type: ignore[assignment]
    return store, index


@pytest.fixture()
def corpus(tmp_path: Path):
    store, index = open_index(tmp_path)
    for paper in PAPERS:
        store.put_paper(paper, "sha")
    yield store, index
    store.close()


def dense_ids(index: CorpusIndex) -> set[int]:
    import faiss

    loaded = index.dense._current()
    return set() if loaded is None else set(faiss.vector_to_array(loaded.id_map).tolist())


def test_sync_indexes_every_chunk_once_and_resync_adds_nothing(corpus) -> None:
    store, index = corpus
    first = index.sync()
    chunks = store.stats().chunks
    assert first.chunks_added == chunks and first.bm25_size == chunks and first.dense_size == chunks
    again = index.sync()
    assert (again.chunks_added, again.chunks_deleted) == (0, 0)
    assert len(index.bm25) == chunks == len(index.dense)


def test_sync_is_incremental(corpus) -> None:
    store, index = corpus
    index.sync()
    store.put_paper(make_paper("delta", "Dark matter", "Galaxy rotation curves imply dark matter halos."), "sha")
    report = index.sync()
    assert report.chunks_added == 1 and report.chunks_deleted == 0
    assert index.bm25.search("rotation curves", 5)[0].rowid == store.max_chunk_rowid()


def test_replacing_a_paper_removes_its_old_chunks_from_both_indices(corpus) -> None:
    store, index = corpus
    index.sync()
    old_rowids = {hit.rowid for hit in index.bm25.search("chaperones misfolded", 10)}
    assert len(old_rowids) == 2
    store.put_paper(make_paper("beta", "Protein folding", "Ribosomes translate messenger RNA."), "sha2")
    report = index.sync()
    assert report.chunks_deleted == 2 and report.chunks_added == 1
    assert index.bm25.search("chaperones misfolded", 10) == []
    assert not old_rowids & dense_ids(index)
    assert len(index.bm25) == len(index.dense) == store.stats().chunks


def test_bm25_replay_after_a_crash_before_the_state_write_is_idempotent(corpus, tmp_path: Path) -> None:
    store, index = corpus
    state_path = index.bm25.state_path
    index.sync()
    # Simulate dying after tantivy's commit but before the watermark was saved: the next sync replays everything.
    state_path.write_text(SyncState(format=read_state(state_path, SyncState).format).model_dump_json())
    assert index.sync().chunks_added == store.stats().chunks
    assert len(index.bm25) == store.stats().chunks


def test_a_reader_opened_before_a_sync_sees_the_new_commit(corpus) -> None:
    store, index = corpus
    index.sync()
    _, reader = open_index(index.folder.parent)
    assert len(reader.bm25.search("graphene", 5)) == 1
    assert len(reader.dense.search(BagOfWordsEncoder().embed(["graphene"])[0], 5)) == len(index.dense)
    store.put_paper(make_paper("eps", "More graphene", "Graphene again."), "sha")
    index.sync()
    reader.bm25._open().reload()  # tantivy readers reload on commit after a short delay; force it in a test
    assert len(reader.bm25.search("graphene", 5)) == 2
    assert len(reader.dense.search(BagOfWordsEncoder().embed(["graphene"])[0], 10)) == len(index.dense)


@pytest.mark.parametrize(
    "query",
    ['"unbalanced quote', "title:(graphene", "a AND OR NOT", "))((", "field:value^2 -x +y ~", "", "the of and",
     "ünïcødé 石墨烯 🙂", "x" * 5000],
)
def test_bm25_never_fails_on_user_text(corpus, query: str) -> None:
    _, index = corpus
    index.sync()
    assert isinstance(index.bm25.search(query, 10), list)


def test_bm25_scores_title_and_text_and_filters_by_paper(corpus) -> None:
    store, index = corpus
    index.sync()
    by_title = index.bm25.search("conductivity", 5)  # only in alpha's title
    assert [store.get_chunks([hit.rowid])[hit.rowid].chunk.paper_id for hit in by_title] == ["alpha"]
    assert index.bm25.search("protein", 10, paper_ids={"gamma"}) == []
    assert {hit.rowid for hit in index.bm25.search("protein", 10, paper_ids={"beta"})} == set(
        index.bm25.rowids_of_papers({"beta"})
    )


def test_dense_search_is_ranked_filtered_and_tie_broken_by_rowid(corpus) -> None:
    _, index = corpus
    index.sync()
    query = BagOfWordsEncoder().embed(["coral reefs bleaching"])[0]
    hits = index.dense.search(query, 10)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert hits[0].rowid == index.bm25.rowids_of_papers({"gamma"})[0]
    allowed = index.bm25.rowids_of_papers({"alpha", "beta"})
    assert {hit.rowid for hit in index.dense.search(query, 10, allowed)} <= set(allowed)
    zero = index.dense.search(np.zeros(DIMENSION, dtype=np.float32), 10)
    assert [hit.rowid for hit in zero] == sorted(hit.rowid for hit in zero)


def test_dense_switches_to_hnsw_and_hides_deleted_chunks(tmp_path: Path) -> None:
    import faiss

    store, index = open_index(tmp_path, **{"index.hnsw_above": 3})
    for paper in PAPERS:
        store.put_paper(paper, "sha")
    index.sync()
    graph = index.dense._current()
    assert isinstance(faiss.downcast_index(graph.index), faiss.IndexHNSW)
    old_beta = index.bm25.rowids_of_papers({"beta"})
    store.put_paper(make_paper("beta", "Protein folding", "Ribosomes translate messenger RNA."), "sha2")
    index.sync()
    query = BagOfWordsEncoder().embed(["protein folding"])[0]
    live = {hit.rowid for hit in index.dense.search(query, 10)}
    assert live == set(index.bm25.rowids_of_papers({"alpha", "beta", "gamma"}))
    new_beta = index.bm25.rowids_of_papers({"beta"})
    limited = {hit.rowid for hit in index.dense.search(query, 10, [*old_beta, *new_beta])}
    assert limited == set(new_beta)  # a search limited to some chunks still hides the deleted ones
    store.close()


def test_an_hnsw_search_limited_to_a_few_chunks_finds_every_one_of_them() -> None:
    import faiss

    from strata.index.dense import _exact_among

    vectors = np.random.default_rng(0).standard_normal((5000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = faiss.IndexIDMap(faiss.IndexHNSWFlat(16, 8, faiss.METRIC_INNER_PRODUCT))
    index.add_with_ids(vectors, np.arange(5000, dtype=np.int64))
    allowed = set(range(0, 5000, 83))  # 61 chunks scattered over the graph
    rowids, scores = _exact_among(index, vectors[1], allowed, 100)
    assert set(rowids.tolist()) == allowed and list(scores) == sorted(scores, reverse=True)


def test_dense_saves_atomically_and_rebuilds_for_another_model(corpus) -> None:
    store, index = corpus
    index.sync()
    saved = index.dense.state_path.stat().st_mtime_ns
    index.sync()
    assert index.dense.state_path.stat().st_mtime_ns == saved  # nothing changed, nothing rewritten
    store.put_paper(make_paper("delta", "Dark matter", "Galaxy rotation curves imply dark matter halos."), "sha")
    index.sync()
    assert [path.name for path in index.dense.folder.glob("vectors-*.faiss")] == [
        read_state(index.dense.state_path, DenseState).vectors_file
    ]
    assert not list(index.dense.folder.glob(".*tmp"))
    _, other = open_index(index.folder.parent, **{"index.embedding.title_prefix": False})
    with pytest.raises(ValueError, match="title prefix"):
        other.dense.search_text("graphene", 5)
    assert other.sync().dense_size == store.stats().chunks  # a sync rebuilds it under the new settings
    assert len(other.dense.search_text("graphene", 5)) > 0


def test_dense_index_can_be_turned_off(tmp_path: Path) -> None:
    from strata.retrieve.hybrid import HybridSearcher

    store, index = open_index(tmp_path, **{"index.dense": False})
    store.put_paper(PAPERS[0], "sha")
    report = index.sync()
    assert report.bm25_size == 1 and report.dense_size == 0 and len(index.dense) == 0
    searcher = HybridSearcher(store, index, Settings().search)
    assert searcher.search("graphene", method="hybrid").method == "bm25"
    with pytest.raises(ValueError, match="dense search is off"):
        searcher.search("graphene", method="dense")
    store.close()


def test_rm3_mixes_query_and_feedback_terms() -> None:
    weights = rm3_weights(
        ["coral", "bleach"],
        [(["coral", "reef", "reef", "warm"], 2.0), (["reef", "ocean"], 1.0), (["ignored"], 0.0)],
        expansion_terms=2,
        original_weight=0.5,
    )
    # Relevance model: reef 2*2/4 + 1*1/2 = 1.5, then coral, ocean, warm tied at 0.5 (coral first by name);
    # the best two, normalised: reef 0.75, coral 0.25; mixed half and half with the query's 0.5 / 0.5.
    assert weights == pytest.approx({"coral": 0.375, "bleach": 0.25, "reef": 0.375})
    assert rm3_weights(["x"], [], expansion_terms=5, original_weight=0.5) == {"x": 0.5}


def test_embedder_resolves_models_and_rejects_unknown_ones(tmp_path: Path) -> None:
    assert (resolve_model_path("packaged:all-MiniLM-L6-v2") / "modules.json").is_file()
    with pytest.raises(ValueError, match="unknown packaged"):
        resolve_model_path("packaged:nope")
    with pytest.raises(ValueError, match="neither"):
        resolve_model_path(str(tmp_path))


def test_reference_entries_stay_in_the_store_but_are_searched_only_when_asked_for(tmp_path: Path) -> None:
    from strata.documents.model import ContentType

    builder = PaperBuilder("cited", "test")
    builder.open_section("Results", level=1)
    builder.add_block("Graphene sheets conduct electricity remarkably well.")
    builder.open_section("References", level=1)
    builder.add_block("Novoselov K. Electric field effect in atomically thin carbon films.", ContentType.REFERENCE)
    paper = builder.build(title="Graphene conductivity")
    store, index = open_index(tmp_path)
    store.put_paper(paper, "sha")
    report = index.sync()
    assert store.stats().chunks == 2 and report.bm25_size == report.dense_size == 1
    assert not index.bm25.search("Novoselov atomically thin carbon films", 5)
    assert [hit.rowid for hit in index.dense.search_text("atomically thin carbon films", 5)] == [
        s.rowid for s in store.chunks_after(0, references=False)
    ]
    assert [s.chunk.content_type for s in store.chunks_after(0)] == [ContentType.TEXT, ContentType.REFERENCE]
    _, everything = open_index(tmp_path, **{"index.reference_entries": True})
    again = everything.sync()  # another choice of chunks: both indices are rebuilt with the entries in
    assert again.bm25_size == again.dense_size == 2
    reference = store.chunks_after(0)[1].rowid
    assert [hit.rowid for hit in everything.bm25.search("Novoselov atomically thin carbon films", 5)] == [reference]
    store.close()


def test_a_store_without_reference_entries_keeps_its_indices_when_the_choice_flips(corpus) -> None:
    store, index = corpus
    index.sync()
    vectors = read_state(index.dense.state_path, DenseState).vectors_file
    _, flipped = open_index(index.folder.parent, **{"index.reference_entries": True})
    again = flipped.sync()  # the same chunks either way: nothing to rebuild
    assert again.chunks_added == 0 and again.bm25_size == again.dense_size == store.stats().chunks
    assert read_state(index.dense.state_path, DenseState).vectors_file == vectors


def test_sentence_vectors_score_a_chunk_by_its_best_sentence(tmp_path: Path) -> None:
    import faiss

    long_chunk = "Graphene conducts electricity well. Coral reefs bleach when oceans warm. Bees pollinate crops."
    papers = [make_paper("mixed", "Assorted findings", long_chunk), PAPERS[2]]
    scores = {}
    for sentences in (False, True):
        store, index = open_index(tmp_path / str(sentences), **{"index.embedding.sentences": sentences})
        for paper in papers:
            store.put_paper(paper, "sha")
        report = index.sync()
        assert report.dense_size == len(index.dense) == store.stats().chunks == 2
        loaded = index.dense._current()
        assert loaded.ntotal == (2 + 3 if sentences else 2)  # the long chunk's three sentences, the short one's none
        query = BagOfWordsEncoder().embed(["Assorted findings bees pollinate crops"])[0]
        hits = index.dense.search(query, 10)
        assert len(hits) == 2 and len({hit.rowid for hit in hits}) == 2  # one hit per chunk, not per vector
        mixed = index.bm25.rowids_of_papers({"mixed"})[0]
        scores[sentences] = next(hit.score for hit in hits if hit.rowid == mixed)
        # Relate's paper vectors and backend moves read each chunk's own vector, not a sentence's.
        own = BagOfWordsEncoder().embed([index.dense.embedding_text(store.chunks_after(0, limit=10)[0])])[0]
        assert np.allclose(index.dense.vectors()[mixed], own)
        store.put_paper(make_paper("mixed", "Assorted findings", "Nothing else."), "sha2")
        index.sync()
        assert mixed not in set(faiss.vector_to_array(index.dense._current().id_map).tolist())
        store.close()
    assert scores[True] > scores[False] + 0.1  # the sentence about bees matches undiluted
    _, other = open_index(tmp_path / "True", **{"index.embedding.sentences": False})
    with pytest.raises(ValueError, match="sentences True"):
        other.dense.search_text("graphene", 5)


def test_a_chunk_of_many_matching_sentences_does_not_crowd_out_the_other_chunks(tmp_path: Path) -> None:
    store, index = open_index(tmp_path, **{"index.embedding.sentences": True})
    bees = " ".join(f"Bees pollinate crops in field {number}." for number in range(30))
    store.put_paper(make_paper("bees", "Pollination", bees), "sha")
    for number in range(20):
        store.put_paper(make_paper(f"other{number}", f"Topic {number}", f"Bees visit garden {number}."), "sha")
    index.sync()
    assert index.dense._current().ntotal > 2 * len(index.dense)  # far more vectors than chunks
    query = BagOfWordsEncoder().embed(["bees pollinate crops"])[0]
    hits = index.dense.search(query, 5)
    assert len({hit.rowid for hit in hits}) == 5  # the best chunk once, then four others
    store.close()


def test_sentence_vectors_are_refused_on_postgres_with_a_clear_error() -> None:
    from strata.index.postgres import PostgresDenseIndex

    settings = Settings.load(overrides={"index.embedding.sentences": True})
    with pytest.raises(ValueError, match="sentences needs the sqlite backend"):
        PostgresDenseIndex(None, settings.index)  # type: ignore[arg-type]  # refused before the store is touched


def test_hnsw_above_counts_the_vectors_a_first_sync_indexes_not_the_chunks_it_reads(tmp_path: Path) -> None:
    """Reference-list entries are read from the store but not indexed: they must not push the index to HNSW."""
    import faiss
    from strata.documents.model import ContentType

    builder = PaperBuilder("cited", "test")
    builder.open_section("Results", level=1)
    builder.add_block("Graphene sheets conduct electricity remarkably well.")
    builder.open_section("References", level=1)
    for number in range(4):
        builder.add_block(f"Author {number}. A cited work on carbon films.", ContentType.REFERENCE)
    store, index = open_index(tmp_path, **{"index.hnsw_above": 2})
    store.put_paper(builder.build(title="Graphene conductivity"), "sha")
    index.sync()
    graph = index.dense._current()
    assert graph.ntotal == 1 and not isinstance(faiss.downcast_index(graph.index), faiss.IndexHNSW)
    store.close()


def test_hnsw_above_counts_sentence_vectors_at_every_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With sentence vectors an index has more vectors than chunks: past `hnsw_above` vectors it is HNSW, at a
    checkpoint of the first sync too (exact search there would be copied into a graph at the end)."""
    import faiss
    from strata.index import dense

    monkeypatch.setattr(dense, "READ_BATCH", 1)
    monkeypatch.setattr(dense, "CHECKPOINT_CHUNKS", 1)
    saved: list[tuple[int, bool]] = []
    save = dense.DenseIndex._save

    def recording_save(self: dense.DenseIndex, index: faiss.IndexIDMap, state: DenseState) -> None:
        saved.append((index.ntotal, isinstance(faiss.downcast_index(index.index), faiss.IndexHNSW)))
        save(self, index, state)

    monkeypatch.setattr(dense.DenseIndex, "_save", recording_save)
    store, index = open_index(tmp_path, **{"index.hnsw_above": 3, "index.embedding.sentences": True})
    long_chunk = "Graphene conducts electricity well. Coral reefs bleach when oceans warm. Bees pollinate crops."
    store.put_paper(make_paper("mixed", "Assorted findings", long_chunk, "Short one."), "sha")
    index.sync()
    assert len(index.dense) == 2 and saved and saved[-1] == (5, True)  # 2 chunks, 1 + 3 + 1 vectors
    assert all(hnsw == (vectors > 3) for vectors, hnsw in saved), saved
    store.close()


def test_vectors_from_elsewhere_still_get_their_sentence_vectors(tmp_path: Path) -> None:
    """Ray workers and migrations supply chunk vectors only: the sync embeds the sentences itself, so the index is
    the one a local sync builds."""
    long_chunk = "Graphene conducts electricity well. Coral reefs bleach when oceans warm. Bees pollinate crops."
    built = []
    for supplied in (False, True):
        store, index = open_index(tmp_path / str(supplied), **{"index.embedding.sentences": True})
        store.put_paper(make_paper("mixed", "Assorted findings", long_chunk), "sha")
        texts = index.dense.embedding_text
        index.sync(vectors_of=(lambda batch: BagOfWordsEncoder().embed(list(map(texts, batch)))) if supplied else None)
        loaded = index.dense._current()
        built.append(loaded.index.reconstruct_n(0, loaded.ntotal))
        store.close()
    assert len(built[1]) == 1 + 3 and np.array_equal(built[0], built[1])


def test_relate_caches_a_papers_chunk_mean_only_once_the_dense_sync_covers_it(tmp_path: Path) -> None:
    from strata.relate.signals import PaperVectors

    class Encoder(BagOfWordsEncoder):
        identity = "bag-of-words"

    store, index = open_index(tmp_path)
    for paper in PAPERS[:2]:
        store.put_paper(paper, "sha")
    index.sync()
    store.put_paper(PAPERS[2], "sha")  # stored by an ingest whose dense sync has not run yet
    vectors = PaperVectors(Encoder(), tmp_path / "relate", dense=index.dense)  # type: ignore[arg-type]
    vectors.refresh(store)
    assert vectors.ids == ["alpha", "beta", "gamma"]  # gamma stands in by its abstract for now...
    assert sorted(vectors._load()) == ["alpha", "beta"]  # ...and is not cached as its chunk mean
    index.sync()
    vectors.refresh(store)  # the sync caught up: a new version, gamma's chunk mean computed and kept
    assert sorted(vectors._load()) == ["alpha", "beta", "gamma"]
    gamma = index.dense.vectors()[index.bm25.rowids_of_papers({"gamma"})[0]]
    assert np.allclose(vectors._load()["gamma"], gamma)
    store.close()


def test_a_replaced_index_is_freed_by_reference_counting_alone(tmp_path: Path) -> None:
    # A server freezes its startup objects out of the cycle collector's sight: an index in a reference cycle was
    # never freed once an ingest replaced it (its faiss copy and tantivy readers stayed for the process's life).
    import gc
    import weakref

    store, index = open_index(tmp_path)
    gone = weakref.ref(index)
    gc.disable()
    try:
        del index
        assert gone() is None
    finally:
        gc.enable()
        store.close()
