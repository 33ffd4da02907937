"""Lit3R Relate on fakes: the three signals, switching each off, round-robin across seeds, and the deterministic
fusion of Rankings A and B in `find_candidates`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from strata.config import Settings
from strata.documents.model import Candidate, Paper, Ranking, Reference
from strata.pipeline.ask import find_candidates
from strata.relate import CandidateSet, Relater, round_robin
from strata.relate.expand import paper_vectors
from strata.relate.signals import PaperVectors, ReferenceGraph
from strata.store.sqlite import PaperSummary

# Unit vectors in 3-d: a and b point the same way, c between, d away.
VECTORS = {"a": (1.0, 0.0, 0.0), "b": (0.9, 0.1, 0.0), "c": (0.5, 0.5, 0.0), "d": (0.0, 0.0, 1.0), "e": (0.0, 1.0, 0.0)}
REFERENCES = {
    "a": [Reference(raw="x", doi="10.1/shared"), Reference(raw="y", doi="10.1/only-a"),
          Reference(raw="cites d", resolved_paper_id="d")],
    "b": [],
    "c": [Reference(raw="x", doi="10.1/shared"), Reference(raw="t", title="A long shared title about graph kernels")],
    "d": [],
    "e": [Reference(raw="t", title="A Long Shared Title About Graph Kernels!"), Reference(raw="x", doi="10.1/shared")],
}


class FakeEmbedder:
    identity = "fake"

    def __init__(self) -> None:
        self.embedded = 0

    def embed(self, texts):
        self.embedded += len(texts)
        rows = [np.array(VECTORS[text.split()[0]], dtype=np.float32) for text in texts]
        return np.stack([row / np.linalg.norm(row) for row in rows])


class FakeStore:
    def paper_ids(self):
        return sorted(VECTORS)

    def max_chunk_rowid(self):
        return len(VECTORS)

    def get_paper(self, paper_id):
        return Paper(id=paper_id, title=paper_id, abstract=f"words about {paper_id}", source_format="fake")

    def references_of(self, paper_id):
        return REFERENCES[paper_id]

    def paper_summaries(self, paper_ids):
        return {pid: PaperSummary(id=pid, title=f"Title {pid}", year=None, venue=None, doi=None, arxiv_id=None)
                for pid in paper_ids}


class FakeIndex:
    class dense:  # noqa: N801
        embedder = FakeEmbedder()


class FakeCorpus:
    """A corpus that is its own searcher: BM25 'search' with a seed's text returns a fixed list per seed; any other
    query finds `question_hits`."""

    BM25 = {"a": ["a", "e", "d"], "b": ["b", "d", "c"], "c": ["c", "a"]}
    vectors = FakeIndex.dense

    def __init__(self, question_hits: list[str]) -> None:
        self.store = FakeStore()
        self.searcher = self
        self.question_hits = question_hits
        self._cache = {}

    def cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def search(self, query, k=None, method="hybrid", prf=None, paper_ids=None):
        seed = query.split()[0]
        ids = self.BM25.get(seed, []) if method == "bm25" else self.question_hits
        return ranking(ids[:k], query)


class FirstStage:
    name = "first-stage"

    def rank(self, query, candidates):
        return candidates


def ranking(ids, query="q"):
    return Ranking(query=query, method="fake",
                   candidates=[Candidate(paper_id=pid, score=1.0 / r, rank=r) for r, pid in enumerate(ids, 1)])


def settings(tmp_path: Path, **relate) -> Settings:
    return Settings.load(overrides={"store.home": str(tmp_path), **{f"relate.{k}": v for k, v in relate.items()}})


def test_round_robin_takes_each_seeds_best_first_and_keeps_first_places():
    assert round_robin([["x", "y", "z"], ["y", "w"], []]) == ["x", "y", "w", "z"]
    assert round_robin([]) == []


def test_paper_vectors_rank_by_cosine_and_are_cached_on_disk(tmp_path):
    store, embedder = FakeStore(), FakeEmbedder()
    vectors = PaperVectors(embedder, tmp_path)
    assert vectors.neighbours(store, "a", 4) == ["b", "c", "d", "e"]  # d and e tie at 0: by id
    assert embedder.embedded == 5 and vectors.path.is_file()
    again = PaperVectors(embedder, tmp_path)
    assert again.neighbours(store, "a", 2) == ["b", "c"] and embedder.embedded == 5  # read back, not re-embedded


def test_relate_and_training_share_one_paper_vector_cache_per_folder_and_source(tmp_path):
    corpus = FakeCorpus([])
    relate = settings(tmp_path, paper_vector_cache=str(tmp_path / "vectors")).relate
    shared = paper_vectors(corpus, relate, tmp_path)
    assert Relater(corpus, relate, tmp_path).vectors is shared and shared.path.parent == tmp_path / "vectors"
    assert shared.source == "chunk-mean" and paper_vectors(corpus, relate, tmp_path, "abstract") is not shared
    assert paper_vectors(corpus, settings(tmp_path).relate, tmp_path).path.parent == tmp_path / "relate"


def test_references_signal_scores_coupling_and_direct_citation():
    graph = ReferenceGraph()
    # a shares one of its 3 keys with c (1/sqrt(3*2)) and with e (1/sqrt(3*2)); a cites d (1 point).
    assert graph.neighbours(FakeStore(), "a", 5) == ["d", "c", "e"]
    # c and e share both their references (normalised titles match): the strongest coupling.
    assert graph.neighbours(FakeStore(), "c", 5)[0] == "e"
    assert graph.neighbours(FakeStore(), "b", 5) == []


def test_a_shared_work_counts_once_however_many_of_its_identifiers_match():
    work = "A long title of the one shared work on graph kernels"
    references = {
        "s": [Reference(raw="w", doi="10.1/w", title=work), Reference(raw="z", doi="10.1/z")],
        "p": [Reference(raw="w", doi="10.1/w", title=work), Reference(raw="q", doi="10.1/q")],  # DOI and title
        "m": [Reference(raw="w", title=work), Reference(raw="r", doi="10.1/r")],  # the title alone
    }

    class SharedStore(FakeStore):
        def paper_ids(self):
            return sorted(references)

        def references_of(self, paper_id):
            return references[paper_id]

    # One shared work of two references each for both: equal scores, so the ids break the tie.
    assert ReferenceGraph().neighbours(SharedStore(), "s", 5) == ["m", "p"]


def test_each_signal_can_be_switched_off(tmp_path):
    corpus = FakeCorpus([])
    all_on = Relater(corpus, settings(tmp_path).relate, tmp_path).expand(ranking(["a", "c"]))
    assert [signal.signal for signal in all_on.signals] == ["embedding", "references", "bm25"]
    for off in ("embedding", "references", "bm25"):
        expansion = Relater(corpus, settings(tmp_path, **{off: False}).relate, tmp_path).expand(ranking(["a", "c"]))
        assert off not in [signal.signal for signal in expansion.signals] and len(expansion.signals) == 2
    none = settings(tmp_path, embedding=False, references=False, bm25=False).relate
    assert Relater(corpus, none, tmp_path).expand(ranking(["a"])).ranking.candidates == []


def test_bm25_signal_round_robins_across_seeds(tmp_path):
    only_bm25 = settings(tmp_path, embedding=False, references=False, seeds=2).relate
    expansion = Relater(FakeCorpus([]), only_bm25, tmp_path).expand(ranking(["a", "b", "c"]))
    assert expansion.seeds == ["a", "b"]
    # a seed is not its own neighbour: B holds what the seeds lead to, not a copy of A's head
    assert expansion.signals[0].per_seed == [["e", "d"], ["d", "c"]]
    assert expansion.signals[0].interleaved == ["e", "d", "c"] == expansion.ranking.paper_ids
    assert [c.title for c in expansion.ranking.candidates] == ["Title e", "Title d", "Title c"]


def test_find_candidates_fuses_a_and_b_deterministically(tmp_path):
    options = settings(tmp_path, candidates=4, keep_a=2)
    run = lambda: find_candidates("q", corpus=FakeCorpus(["a", "b"]), client=None, reranker=FirstStage(),  # noqa: E731
                                  settings=options)
    result = run()
    assert isinstance(result, CandidateSet) and result == run()
    assert result.ranking_a.paper_ids == ["a", "b"] and result.stop_reason == "no_llm" and len(result.rounds) == 1
    assert len(result.candidates.candidates) == 4 and set(result.ranking_b.paper_ids) >= {"c", "d", "e"}
    assert result.candidates.paper_ids[:2] == ["a", "b"]  # keep_a: A's head keeps its places
    assert [c.rank for c in result.candidates.candidates] == [1, 2, 3, 4]
    scores = [c.score for c in result.candidates.candidates]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4


def test_without_a_kept_head_ranking_b_can_reorder_a(tmp_path):
    # B lists d (a neighbour of both seeds) first and never a: fused with equal weight, d overtakes a
    result = find_candidates("q", corpus=FakeCorpus(["a", "b", "d"]), client=None, reranker=FirstStage(),
                             settings=settings(tmp_path, keep_a=0, embedding=False, references=False))
    assert result.candidates.paper_ids[0] == "d"
    kept = find_candidates("q", corpus=FakeCorpus(["a", "b", "d"]), client=None, reranker=FirstStage(),
                           settings=settings(tmp_path, keep_a=1, embedding=False, references=False))
    assert kept.candidates.paper_ids[:2] == ["a", "d"]


def test_find_candidates_without_relate_returns_ranking_a(tmp_path):
    result = find_candidates("q", corpus=FakeCorpus(["a", "b", "c"]), client=None, reranker=FirstStage(),
                             settings=settings(tmp_path, enabled=False, candidates=2))
    assert result.candidates.paper_ids == ["a", "b"] and result.ranking_b.candidates == [] and result.expansion is None


def test_chunk_means_average_a_papers_chunks_and_skip_its_reference_list():
    from strata.documents.model import Chunk, ContentType
    from strata.relate.signals import chunk_means
    from strata.store.sqlite import StoredChunk

    def stored(rowid, paper_id, kind=ContentType.TEXT):
        chunk = Chunk(paper_id=paper_id, ordinal=rowid, text="t", content_type=kind, char_start=0, char_end=1)
        return StoredChunk(rowid=rowid, chunk=chunk, paper_title=paper_id)

    class ChunkStore:
        chunks = [stored(1, "p"), stored(2, "p"), stored(3, "p", ContentType.REFERENCE), stored(4, "q", ContentType.REFERENCE)]

        def chunks_after(self, rowid, limit):
            return [c for c in self.chunks if c.rowid > rowid][:limit]

    vectors = {1: np.array([1.0, 0.0]), 2: np.array([0.0, 1.0]), 3: np.array([-1.0, 0.0]), 4: np.array([0.0, 2.0])}
    means = chunk_means(ChunkStore(), vectors, ["p", "q", "missing"])
    assert np.allclose(means["p"], [2 ** -0.5, 2 ** -0.5])  # reference chunk 3 left out
    assert np.allclose(means["q"], [0.0, 1.0]) and "missing" not in means  # only references: they are used


def test_a_torn_or_empty_paper_vector_cache_is_rebuilt(tmp_path):
    from strata.relate.signals import PaperVectors

    vectors = PaperVectors(FakeEmbedder(), tmp_path, source="abstract")
    vectors._save({"a": np.ones(3, dtype=np.float32)})
    assert list(vectors._load()) == ["a"] and [p.name for p in tmp_path.iterdir()] == [vectors.path.name]
    vectors.path.write_bytes(vectors.path.read_bytes()[:40])  # torn by a crash or a second writer
    assert vectors._load() == {}
    vectors.path.write_bytes(b"")
    assert vectors._load() == {}
