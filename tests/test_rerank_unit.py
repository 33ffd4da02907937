"""Rerankers on a scripted fake LLM: permutation parsing, windowing over 200 candidates, CoRank's coarse-to-fine
flow, feature caching, the controls and the factory's choice."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from strata.config import LLMSettings, RerankSettings, Settings
from strata.documents.model import Candidate, Paper, Ranking
from strata.llm import ContinuationScore, Generation, LLMClient, LLMError, Scoring, tracing
from strata.rerank import FirstStage, make_reranker
from strata.rerank.features import CompactFeatures, FeatureCache
from strata.rerank.listwise import ListwiseLLM, estimated_tokens
from strata.rerank.permutation import ParseErrors, parse_permutation
from strata.rerank.rerankers import (
    CoarseToFineReranker,
    RandomPoolReranker,
    form4_representation,
    truncated_representation,
)
from strata.rerank.texts import PaperTexts
from strata.store.sqlite import CorpusStore

LINE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
GRADE = re.compile(r"grade(\d+)")
EXTRACTOR = "fake-llm\x00hash-encoder\x00300"


class RankingBackend:
    """A fake LLM: ranks listwise windows by the 'gradeNN' tag in each line (or answers from a script), extracts
    features from the title, and records every request."""

    name = "fake"
    model = "fake-1"
    load_seconds = None

    def __init__(self, scripted: list[str] | None = None) -> None:
        self.scripted = list(scripted or [])
        self.requests: list[str] = []

    def generate(self, system, user, schema, options) -> Generation:
        self.requests.append(user)
        if self.scripted:
            text = self.scripted.pop(0)
        elif "Document:" in user:
            title = user.split("Title: ", 1)[1].splitlines()[0]
            text = json.dumps(
                {
                    "category": ["Science", title.split()[0]],
                    "sections": [{"title": "Results", "gist": f"{title} results"}],
                    "keywords": [f"{title} keyword", "generic"],
                }
            )
        else:
            lines = LINE.findall(user)
            count = int(re.search(r"numbers of the (\d+) most", user).group(1))
            grades = [int(GRADE.search(text).group(1)) if GRADE.search(text) else 0 for _, text in lines]
            best = sorted(range(len(lines)), key=lambda index: (-grades[index], index))[:count]
            text = json.dumps({"ranking": [index + 1 for index in best]})
        return Generation(text=text, tokens_in=len(user) // 4, tokens_out=10)

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        """First-token listwise answers ('{"ranking": [N,') score by candidate N's grade; anything else ties."""
        self.requests.append(user)
        grades = {number: GRADE.search(text) for number, text in LINE.findall(user)}

        def logprob(opening: str) -> float:
            found = re.fullmatch(r'\{"ranking": \[(\d+),', opening)
            grade = grades.get(found.group(1)) if found else None
            return -1.0 / (1 + int(grade.group(1))) if grade else -2.0

        scores = [ContinuationScore(continuation=c, logprob=logprob(c), n_tokens=3) for c in continuations]
        return Scoring(scores=scores, tokens_in=len(user) // 4)

    def close(self) -> None:
        pass

    def listwise_requests(self) -> list[str]:
        return [request for request in self.requests if request.startswith("Query:")]


class HashEmbedder:
    """Unit vectors from word hashes: similar wording, similar vectors; no model to load."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.embed_query(text) for text in texts]) if texts else np.zeros((0, 64), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        vector = np.zeros(64, dtype=np.float32)
        for word in text.lower().split():
            vector[sum(map(ord, word)) % 64] += 1.0
        return vector / max(float(np.linalg.norm(vector)), 1e-9)


def client_with(backend: RankingBackend) -> LLMClient:
    return LLMClient(backend, LLMSettings(repair_retries=0))


@pytest.fixture()
def store(tmp_path: Path):
    """200 papers: paper NNN has grade NNN % 7 except a few planted best ones deep in the ranking."""
    store = CorpusStore(tmp_path / "corpus.sqlite3")
    for number in range(200):
        grade = 50 if number in (150, 170, 199) else number % 7
        store.put_paper(
            Paper(
                id=f"p{number:03d}",
                title=f"Paper{number:03d} grade{grade:02d}",
                abstract=" ".join(["word"] * 40) + f" grade{grade:02d}",
                source_format="test",
            ),
            "sha",
        )
    yield store
    store.close()


def first_stage(count: int = 200) -> Ranking:
    return Ranking(
        query="what is best",
        method="hybrid",
        candidates=[
            Candidate(paper_id=f"p{number:03d}", score=1.0 - number / 1000, rank=number + 1) for number in range(count)
        ],
    )


def ids(ranking: Ranking) -> list[str]:
    return [candidate.paper_id for candidate in ranking.candidates]


# permutation parsing


def test_parser_drops_duplicates_and_unknown_ids_and_appends_missing_in_prior_order():
    order, errors = parse_permutation([3, 3, 9, 1, 0], 5)
    assert order == [2, 0, 1, 3, 4]
    assert errors == ParseErrors(answers=1, duplicates=1, unknown=2, missing=3, incomplete_answers=1)


def test_parser_counts_nothing_for_a_clean_answer_and_keeps_prior_order_for_an_unusable_one():
    assert parse_permutation([2, 1, 3], 3) == ([1, 0, 2], ParseErrors(answers=1))
    order, errors = parse_permutation(None, 3)
    assert order == [0, 1, 2] and errors.unusable == 1 and errors.missing == 3
    order, errors = parse_permutation([3], 4, requested=2)  # asked for the best 2, named 1
    assert order == [2, 0, 1, 3] and errors.missing == 1 and errors.incomplete_answers == 1
    assert parse_permutation([3, 1], 4, requested=2)[1] == ParseErrors(answers=1)


def test_an_answer_echoing_the_prior_order_is_counted_as_unchanged():
    assert parse_permutation([1, 2, 3], 3)[1] == ParseErrors(answers=1, unchanged=1)
    assert parse_permutation([1], 3, requested=1)[1].unchanged == 1  # the rest appended in prior order
    assert parse_permutation(None, 3)[1].unchanged == 0  # unusable, counted as such


def test_an_unparseable_listwise_answer_keeps_the_prior_order_and_is_counted():
    backend = RankingBackend(scripted=["no idea", '{"ranking": [2, 2, 7]}'])
    llm = ListwiseLLM(client_with(backend), window_tokens=1000)
    assert llm.order_window("q", ["a", "b", "c"]) == [0, 1, 2]
    assert llm.order_window("q", ["a", "b", "c"]) == [1, 0, 2]  # duplicate and unknown dropped, rest appended
    assert (llm.errors.unusable, llm.errors.duplicates, llm.errors.unknown, llm.errors.answers) == (1, 1, 1, 2)


def test_first_token_calibration_asks_the_same_question_with_blank_documents():
    backend = RankingBackend()
    llm = ListwiseLLM(client_with(backend), window_tokens=1000, answer="first-token")
    llm.order_window("q", ["grade1 a", "grade5 b", "c", "grade2 d"], count=2)
    real, blank = backend.requests
    assert "numbers of the 2 most" in real and "numbers of the 2 most" in blank and "[1] N/A" in blank


def test_first_token_answers_rank_every_candidate_by_its_score_as_the_first_number():
    backend = RankingBackend()
    llm = ListwiseLLM(client_with(backend), window_tokens=1000, answer="first-token")
    texts = ["plain", "grade12 text", "grade3 text", "also plain", "grade12 again"]
    assert llm.order_window("q", texts) == [1, 4, 2, 0, 3]  # ties (equal grades, no grade) keep input order
    assert llm.errors == ParseErrors(answers=1)
    assert llm.order_window("q", ["grade9", "grade2"]) == [0, 1] and llm.errors.unchanged == 1


class BrokenScoreBackend(RankingBackend):
    """RankingBackend, but the first-number log-probability of a 'broken' candidate is NaN."""

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        scoring = super().score(system, user, continuations)
        broken = {f'{{"ranking": [{number},' for number, text in LINE.findall(user) if "broken" in text}
        return scoring.model_copy(update={"scores": [
            s.model_copy(update={"logprob": float("nan")}) if s.continuation in broken else s
            for s in scoring.scores]})  # fmt: skip


def test_a_nan_first_number_score_ranks_that_candidate_last_and_the_others_by_theirs():
    llm = ListwiseLLM(client_with(BrokenScoreBackend()), window_tokens=1000, answer="first-token")
    # A NaN key compares false with everything: the sort left 'plain' and 'broken' above both graded candidates.
    assert llm.order_window("q", ["plain", "broken", "grade3 text", "grade12 text"]) == [3, 2, 0, 1]


# windowing


def test_coarse_windows_over_200_candidates_fit_the_budget_and_bubble_up_the_best(store: CorpusStore):
    backend = RankingBackend()
    llm = ListwiseLLM(client_with(backend), window_tokens=600)
    texts = PaperTexts(store)
    passages = [texts.passage(f"p{number:03d}", 8) for number in range(200)]
    order = llm.sliding("what is best", passages, window=200, carry=10, full_answers=False)
    assert sorted(order) == list(range(200))
    assert set(order[:3]) == {150, 170, 199}  # planted deep in the list, found by windows sliding up
    windows = [LINE.findall(request) for request in backend.listwise_requests()]
    assert len(windows) > 1
    assert all(sum(estimated_tokens(text) for _, text in window) <= 600 for window in windows)
    assert all("numbers of the 10 most" in request for request in backend.listwise_requests())


def test_vanilla_listwise_shortens_every_passage_until_the_prompt_fits_its_budget(store: CorpusStore):
    backend = RankingBackend()
    overrides = {"rerank.listwise_depth": 20, "rerank.passage_words": 40, "rerank.window_tokens": 800}
    reranker = make_reranker(Settings.load(overrides=overrides), store, client_with(backend), method="listwise")
    result = reranker.rank("what is best", first_stage())
    (window,) = [LINE.findall(request) for request in backend.listwise_requests()]
    assert len(window) == 20 and sum(estimated_tokens(text) for _, text in window) <= 800
    words = {len(text.split()) for _, text in window}
    assert len(words) == 1 and 10 < words.pop() < 40  # evenly shortened, not to the floor
    assert ids(result)[0] in {"p006", "p013"}  # still ranked: grade 6 is the best of the first 20


def test_rankgpt_sliding_window_makes_the_expected_windows(store: CorpusStore):
    backend = RankingBackend()
    settings = Settings.load(overrides={"rerank.window": 20, "rerank.stride": 10, "rerank.sliding_depth": 100})
    reranker = make_reranker(settings, store, client_with(backend), method="sliding-window")
    result = reranker.rank("what is best", first_stage())
    windows = [LINE.findall(request) for request in backend.listwise_requests()]
    assert [len(window) for window in windows] == [20] * 9  # (100 - 20) / 10 + 1
    assert ids(result)[:1] == ["p006"] and result.method == "hybrid>sliding-window"  # best grade in the top 100
    assert ids(result)[100:] == ids(first_stage())[100:]  # beyond the depth: first-stage order
    assert sorted(ids(result)) == sorted(ids(first_stage())) and [c.rank for c in result.candidates] == list(
        range(1, 201)
    )


# coarse -> fine


def corank(store: CorpusStore, backend: RankingBackend, tmp_path: Path, **overrides) -> CoarseToFineReranker:
    settings = RerankSettings(pool=200, fine_k=5, window_tokens=1500, **overrides)
    texts = PaperTexts(store)
    features = CompactFeatures(
        FeatureCache(tmp_path / "features.sqlite3", EXTRACTOR), texts, HashEmbedder(), settings, client_with(backend)
    )
    llm = ListwiseLLM(client_with(backend), settings.window_tokens)
    return CoarseToFineReranker("corank", llm, texts, settings, form4_representation(features, texts, settings))


def test_corank_ranks_features_coarsely_then_the_shortlist_on_full_text(store: CorpusStore, tmp_path: Path):
    backend = RankingBackend()
    result = corank(store, backend, tmp_path).rank("what is best", first_stage())
    listwise = backend.listwise_requests()
    coarse, fine = listwise[:-1], listwise[-1]
    assert coarse and all("Category: Science > Paper" in request for request in coarse)
    assert "Category:" not in fine and len(LINE.findall(fine)) == 5 and "word word" in fine
    assert set(ids(result)[:3]) == {"p150", "p170", "p199"}
    assert sorted(ids(result)) == sorted(ids(first_stage()))
    assert result.method == "hybrid>corank"


def test_features_are_extracted_once_and_reused_until_the_content_changes(store: CorpusStore, tmp_path: Path):
    backend = RankingBackend()
    reranker = corank(store, backend, tmp_path)
    reranker.rank("what is best", first_stage(20))
    extractions = [request for request in backend.requests if request.startswith("Document:")]
    assert len(extractions) == 20
    backend.requests.clear()
    second = corank(store, backend, tmp_path)  # a fresh process would open the same cache file
    with tracing() as trace:
        second.rank("what is best", first_stage(20))
    assert not [request for request in backend.requests if request.startswith("Document:")]
    assert all(call.prompt == "rerank_listwise" for call in trace.calls)
    paper = store.get_paper("p003")
    store.put_paper(paper.model_copy(update={"abstract": "changed text grade01"}), "sha2")
    backend.requests.clear()
    corank(store, backend, tmp_path).rank("what is best", first_stage(20))
    assert len([request for request in backend.requests if request.startswith("Document:")]) == 1


def test_form4_keeps_the_most_query_similar_section_and_keywords(store: CorpusStore, tmp_path: Path):
    settings = RerankSettings(keywords=1)
    features = CompactFeatures(
        FeatureCache(tmp_path / "f.sqlite3", EXTRACTOR), PaperTexts(store), HashEmbedder(), settings, client_with(RankingBackend())
    )
    features.ensure(["p001"])
    text = features.form4(HashEmbedder().embed_query("generic"), "p001")
    assert text == "Category: Science > Paper001. Section: Results: Paper001 grade01 results. Keywords: generic"


def test_truncated_control_matches_the_form4_length_without_features(store: CorpusStore, tmp_path: Path):
    backend = RankingBackend()
    settings = RerankSettings()
    texts = PaperTexts(store)
    features = CompactFeatures(FeatureCache(tmp_path / "f.sqlite3", EXTRACTOR), texts, HashEmbedder(), settings, client_with(backend))
    form4 = form4_representation(features, texts, settings)
    pool = first_stage(3).candidates
    compact, truncated = form4("q", pool), truncated_representation(form4, texts)("q", pool)
    assert [len(text.split()) for text in truncated] == [len(text.split()) for text in compact]
    assert all(text.startswith("Paper") and "Category" not in text for text in truncated)


def test_random_pool_control_is_seeded_and_reranks_only_its_draw(store: CorpusStore):
    settings = RerankSettings(pool=200, fine_k=5)
    backend = RankingBackend()
    reranker = RandomPoolReranker(ListwiseLLM(client_with(backend), 3000), PaperTexts(store), settings)
    first, again = reranker.rank("q", first_stage()), reranker.rank("q", first_stage())
    assert ids(first) == ids(again) and len(LINE.findall(backend.listwise_requests()[0])) == 5
    other = RandomPoolReranker(ListwiseLLM(client_with(backend), 3000), PaperTexts(store), settings.model_copy(
        update={"random_seed": 1}))
    assert ids(other.rank("q", first_stage()))[:5] != ids(first)[:5]


# factory


def test_default_is_first_stage_without_a_trained_cross_encoder(store: CorpusStore, tmp_path: Path):
    settings = Settings.load(overrides={"store.home": str(tmp_path / "home")})
    assert isinstance(make_reranker(settings, store), FirstStage)
    with pytest.raises(ValueError, match="needs an LLM client"):
        make_reranker(settings, store, method="corank")
    with pytest.raises(ValueError, match="train-reranker"):
        make_reranker(settings, store, method="cross-encoder")


# pointwise


class GradeBackend:
    """Says yes in proportion to the grade written in the document (grade NN: log-odds NN / 10); records prompts."""

    name = "grades"
    model = "grades-1"
    load_seconds = None

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def score(self, system: str, user: str, continuations) -> Scoring:
        self.prompts.append(user)
        grade = int(GRADE.search(user).group(1))  # type: ignore[union-attr]
        scores = [ContinuationScore(continuation=c, logprob=grade / 10 if c.lower() == "yes" else 0.0, n_tokens=1)
                  for c in continuations]  # fmt: skip
        return Scoring(scores=scores, tokens_in=len(user.split()))

    def generate(self, system, user, schema, options) -> Generation:
        raise AssertionError("pointwise relevance is scored, never generated")

    def close(self) -> None:
        pass


def test_pointwise_orders_the_top_by_p_yes_ties_in_first_stage_order_and_leaves_the_rest(store: CorpusStore):
    from strata.rerank.pointwise import PointwiseReranker

    backend = GradeBackend()
    reranker = PointwiseReranker(client_with(backend), PaperTexts(store), RerankSettings(pointwise_depth=30))
    reranked = reranker.rank("what is best", first_stage(60))
    head = ids(reranked)[:30]
    grades = [int(paper_id[1:]) % 7 for paper_id in head]
    assert grades == sorted(grades, reverse=True)  # by P(yes)
    for grade in set(grades):  # equal P(yes): first-stage order
        tied = [paper_id for paper_id in head if int(paper_id[1:]) % 7 == grade]
        assert tied == sorted(tied)
    assert ids(reranked)[30:] == [f"p{number:03d}" for number in range(30, 60)]  # below the depth: untouched
    assert len(backend.prompts) == 30 and reranked.method == "hybrid>pointwise"
    assert all(prompt.rstrip().endswith("Reply yes or no.") and "Query: what is best" in prompt
               for prompt in backend.prompts)  # fmt: skip
    assert "Document: Paper000 grade00. word word" in backend.prompts[0]  # title, then the text's first words
    assert reranker.rank("what is best", first_stage(0)).candidates == [] and len(backend.prompts) == 30


class FailingBackend(GradeBackend):
    """Answers two candidates, then fails as a prompt over the context window does."""

    def score(self, system: str, user: str, continuations) -> Scoring:
        if len(self.prompts) == 2:
            raise LLMError("prompt of 5000 tokens exceeds n_ctx 4096")
        return super().score(system, user, continuations)


def test_pointwise_keeps_the_first_stage_order_when_an_llm_call_fails(store: CorpusStore, caplog):
    from strata.rerank.pointwise import PointwiseReranker

    reranker = PointwiseReranker(client_with(FailingBackend()), PaperTexts(store), RerankSettings(pointwise_depth=5))
    with caplog.at_level("WARNING", logger="strata.rerank.pointwise"):
        kept = reranker.rank("q", first_stage(10))
    assert kept == first_stage(10) and "kept the first-stage order" in caplog.records[0].getMessage()


def test_a_stride_past_the_window_is_refused():
    with pytest.raises(ValueError, match="stride"):
        RerankSettings(window=10, stride=12)
    assert RerankSettings(window=10, stride=10).stride == 10  # windows that meet skip nothing


def test_features_made_by_another_llm_encoder_or_input_length_are_extracted_again(store: CorpusStore, tmp_path):
    from strata.rerank.features import extractor_identity

    texts, path = PaperTexts(store), tmp_path / "f.sqlite3"
    features = CompactFeatures(FeatureCache(path, EXTRACTOR), texts, HashEmbedder(), RerankSettings(),
                               client_with(RankingBackend()))  # fmt: skip
    features.ensure(["p001"])
    assert not FeatureCache(path, EXTRACTOR).stale(["p001"], texts)
    assert list(FeatureCache(path, "another-llm\x00hash-encoder\x00300").stale(["p001"], texts)) == ["p001"]
    identities = {extractor_identity(Settings.load(overrides=overrides)) for overrides in (
        {}, {"llm.model": "packaged:qwen2.5-coder-1.5b"}, {"index.embedding.model": "other-encoder"},
        {"rerank.features_input_words": 120})}  # fmt: skip
    assert len(identities) == 4


def test_pointwise_asks_nothing_about_a_paper_without_text_and_ranks_it_below_those_judged(store: CorpusStore):
    from strata.rerank.pointwise import PointwiseReranker

    store.put_paper(Paper(id="p200", title="", abstract="", source_format="test"), "sha")
    backend = GradeBackend()
    reranker = PointwiseReranker(client_with(backend), PaperTexts(store), RerankSettings(pointwise_depth=5))
    empty_first = Ranking(query="q", method="hybrid", candidates=[
        Candidate(paper_id="p200", score=2.0, rank=1), *first_stage(4).candidates])  # fmt: skip
    assert ids(reranker.rank("q", empty_first))[-1] == "p200" and len(backend.prompts) == 4


def test_an_llm_reranker_never_tuned_on_the_corpus_says_it_runs_alone(store: CorpusStore, tmp_path, caplog):
    from strata.rerank.pointwise import PointwiseReranker

    settings = Settings.load(overrides={"rerank.method": "pointwise", "store.home": str(tmp_path / "untuned")})
    with caplog.at_level("WARNING", logger="strata.rerank.factory"):
        alone = make_reranker(settings, store, client_with(GradeBackend()))
        make_reranker(settings, store, client_with(GradeBackend()))  # said once, not on every search
    assert isinstance(alone, PointwiseReranker)
    warned = [record.getMessage() for record in caplog.records]
    assert len(warned) == 1 and "unfused" in warned[0] and "tune-reranker --method pointwise" in warned[0]
    caplog.clear()
    chosen = settings.model_copy(update={"rerank": settings.rerank.model_copy(update={"fusion_weight": 0.5})})
    make_reranker(chosen, store, client_with(GradeBackend()))  # a weight the user set: nothing to say
    assert not caplog.records


def test_pointwise_is_an_llm_method_the_factory_builds_and_fuses(store: CorpusStore):
    from strata.rerank.fusion import FusedReranker
    from strata.rerank.pointwise import PointwiseReranker

    settings = Settings.load(overrides={"rerank.method": "pointwise", "rerank.fusion_weight": 0.5})
    with pytest.raises(ValueError, match="needs an LLM client"):
        make_reranker(settings, store)
    fused = make_reranker(settings, store, client_with(GradeBackend()))
    assert isinstance(fused, FusedReranker) and isinstance(fused.inner, PointwiseReranker)
    reranked = fused.rank("what is best", first_stage(20))
    assert sorted(ids(reranked)) == ids(first_stage(20)) and reranked.method == "hybrid>pointwise+fusion(0.5)"


class WindowScores:
    """A fake cross-encoder: each (query, window) pair scores as a table says."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.table = scores

    def predict(self, pairs, batch_size: int) -> np.ndarray:
        return np.array([self.table[window] for _, window in pairs], dtype=np.float32)


class TwoWindows:
    def windows(self, paper_id: str, words: int, limit: int) -> list[str]:
        return [f"{paper_id} opening", f"{paper_id} ending"]


def test_a_window_the_cross_encoder_could_not_score_neither_hides_nor_decides_the_papers_best_window():
    from strata.rerank.crossencoder import CrossEncoderReranker

    nan = float("nan")
    # max() kept a NaN that came first and skipped one that came later: the same scores gave p000 NaN, p001 3.
    model = WindowScores({"p000 opening": nan, "p000 ending": 3.0, "p001 opening": 3.0, "p001 ending": nan,
                          "p002 opening": nan, "p002 ending": nan, "p003 opening": 1.0, "p003 ending": 0.0})
    reranker = CrossEncoderReranker(model, TwoWindows(), depth=4, passage_words=80, batch=8, windows=2)
    assert reranker.scores("q", first_stage(4)) == {"p000": 3.0, "p001": 3.0, "p002": -np.inf, "p003": 1.0}
    assert ids(reranker.rank("q", first_stage(5))) == ["p000", "p001", "p003", "p002", "p004"]


class NaNBackend(GradeBackend):
    """GradeBackend, but a grade-1 document's yes and no both score NaN, so its P(yes) is NaN."""

    def score(self, system: str, user: str, continuations) -> Scoring:
        scoring = super().score(system, user, continuations)
        if "grade01" not in user:
            return scoring
        return scoring.model_copy(update={"scores": [s.model_copy(update={"logprob": float("nan")})
                                                     for s in scoring.scores]})  # fmt: skip


def test_a_nan_p_yes_ranks_last_and_leaves_the_other_candidates_ordered(store: CorpusStore):
    from strata.rerank.pointwise import PointwiseReranker

    reranker = PointwiseReranker(client_with(NaNBackend()), PaperTexts(store), RerankSettings(pointwise_depth=7))
    # A NaN key compares false with everything: the sort kept p000 (grade 0) and p001's NaN above p006 (grade 6).
    assert ids(reranker.rank("q", first_stage(8))) == ["p006", "p005", "p004", "p003", "p002", "p000", "p001", "p007"]
