"""Lit3R Retrieve: the question-anchored loop's control flow on a scripted LLM and a fake searcher, and the
venue/year rules."""

from __future__ import annotations

import json
from collections.abc import Sequence

import jsonschema
import pytest

from strata.config import LLMSettings, RetrieveSettings
from strata.documents.model import Candidate, ChunkHit, Locator, Ranking
from strata.llm import Generation, LLMClient, Trace
from strata.retrieve.constraints import extract_constraints, merge_llm_constraints, satisfies
from strata.retrieve.iterative import QuestionRetriever, new_subqueries, pool
from strata.retrieve.rounds import Constraints, Subqueries
from strata.store.sqlite import PaperSummary


class ScriptedBackend:
    """Answers from a list, one per request, and remembers every (system, user) request."""

    name = "scripted"
    model = "scripted-1"
    load_seconds = None

    def __init__(self, answers: Sequence[object]) -> None:
        self.answers = [json.dumps(answer) for answer in answers]
        self.requests: list[tuple[str, str]] = []
        self.schemas: list[dict | None] = []

    def generate(self, system, user, schema, options) -> Generation:
        self.requests.append((system, user))
        self.schemas.append(schema)
        return Generation(text=self.answers.pop(0), tokens_in=len(user.split()), tokens_out=5)

    def score(self, system, user, continuations):
        raise AssertionError("the loop never scores")

    def close(self) -> None:
        pass


class FakeStore:
    def __init__(self, years: dict[str, int | None], venues: dict[str, str | None] | None = None) -> None:
        self.years = years
        self.venues = venues or {}

    def paper_summaries(self, paper_ids):
        return {
            pid: PaperSummary(id=pid, title=pid, year=self.years.get(pid), venue=self.venues.get(pid), doi=None,
                              arxiv_id=None)
            for pid in paper_ids
        }


class FakeSearcher:
    """Each query finds the papers listed for it (or none); remembers every call."""

    def __init__(self, results: dict[str, list[str]], store: FakeStore | None = None) -> None:
        self.results = results
        self.store = store or FakeStore({})
        self.calls: list[tuple[str, int | None, str, bool | None]] = []

    def search(self, query, k=None, method="hybrid", prf=None, paper_ids=None) -> Ranking:
        self.calls.append((query, k, method, prf))
        ids = self.results.get(query, [])[:k]
        return Ranking(query=query, method=method, candidates=[candidate(pid, rank) for rank, pid in enumerate(ids, 1)])


class ReversingReranker:
    name = "reverse"

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        self.seen.append((query, candidates.paper_ids))
        reordered = list(reversed(candidates.candidates))
        return candidates.model_copy(
            update={"candidates": [c.model_copy(update={"rank": r}) for r, c in enumerate(reordered, 1)]}
        )


class KeepOrder:
    name = "first-stage"

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        return candidates


def candidate(paper_id: str, rank: int) -> Candidate:
    chunk = ChunkHit(rowid=rank, text=f"text of {paper_id}", locator=Locator(paper_id=paper_id, char_start=0,
                     char_end=5), score=1.0 / rank)
    return Candidate(paper_id=paper_id, title=f"Title {paper_id}", score=1.0 / rank, rank=rank, chunks=[chunk])


QUESTION = "Which protein does drug X inhibit?"
SUBQUERIES = {"subqueries": ["drug X target", "drug X inhibitor protein", "X binding assay", "X mechanism"]}


def retriever(searcher, answers, reranker=None, **settings) -> tuple[QuestionRetriever, ScriptedBackend]:
    backend = ScriptedBackend(answers)
    client = LLMClient(backend, LLMSettings(), cache=None)
    options = RetrieveSettings(**{"rerank_depth": 0, **settings})
    return QuestionRetriever(searcher, searcher.store, reranker or KeepOrder(), options, client), backend


def test_stops_after_round_one_when_the_verifier_is_satisfied():
    searcher = FakeSearcher({QUESTION: ["p1", "p2"], "drug X target": ["p3", "p1"]})
    loop, backend = retriever(searcher, [SUBQUERIES, {"sufficient": True, "missing": []}])
    trace = Trace()
    run = loop.run(QUESTION, trace)
    assert run.stop_reason == "sufficient" and len(run.rounds) == 1
    assert run.rounds[0].queries == [QUESTION, *SUBQUERIES["subqueries"]]
    assert [call[0] for call in searcher.calls] == run.rounds[0].queries
    assert all(call[2:] == ("hybrid", False) for call in searcher.calls)  # hybrid, PRF off by default
    assert run.rounds[0].verdict is not None and run.rounds[0].verdict.sufficient
    assert run.ranking.paper_ids[0] == "p1"  # found by two subqueries, so it outranks p3 and p2
    assert [call.prompt for call in trace.calls] == ["retrieve_decompose", "retrieve_verify"]
    assert "[1] Title p1: text of p1" in backend.requests[1][1]


def test_a_sufficient_verdict_may_list_nothing_and_an_insufficient_one_must_list_what_is_missing():
    """The schema the verifier is constrained by ends a sufficient verdict after its first field: the missing facts
    it would list are never read and cost ~5 s of generation per question on 2 cores."""
    loop, backend = retriever(FakeSearcher({QUESTION: ["p1"]}), [SUBQUERIES, {"sufficient": True}])
    assert loop.run(QUESTION, Trace()).stop_reason == "sufficient"
    verdict = jsonschema.Draft202012Validator(backend.schemas[1])
    assert verdict.is_valid({"sufficient": True})
    assert verdict.is_valid({"sufficient": False, "missing": ["the IC50 value"]})
    assert not verdict.is_valid({"sufficient": True, "missing": ["the IC50 value"]})
    assert not verdict.is_valid({"sufficient": False})


def test_stops_when_the_follow_up_repeats_earlier_queries():
    searcher = FakeSearcher({QUESTION: ["p1"]})
    repeats = {"subqueries": ["Drug X  target", "drug x inhibitor protein!"]}
    loop, backend = retriever(searcher, [SUBQUERIES, {"sufficient": False, "missing": ["IC50 value"]}, repeats])
    run = loop.run(QUESTION)
    assert run.stop_reason == "no_new_subquery" and len(run.rounds) == 1
    assert len(backend.requests) == 3 and not backend.answers
    follow_up = backend.requests[2][1]
    assert "- drug X target" in follow_up and "- IC50 value" in follow_up


def test_runs_at_most_max_rounds_and_skips_the_useless_last_verdict():
    searcher = FakeSearcher({"round two": ["p9"], "round three": ["p8"]})
    answers = [
        SUBQUERIES,
        {"sufficient": False, "missing": ["a"]},
        {"subqueries": ["round two"]},
        {"sufficient": False, "missing": ["b"]},
        {"subqueries": ["round three", "round two"]},
    ]
    loop, backend = retriever(searcher, answers)
    run = loop.run(QUESTION)
    assert run.stop_reason == "max_rounds"
    assert [r.queries for r in run.rounds][1:] == [["round two"], ["round three"]]
    assert run.rounds[2].verdict is None and not backend.answers
    assert set(run.ranking.paper_ids) == {"p8", "p9"}


def test_later_rounds_take_at_most_later_subqueries():
    answers = [SUBQUERIES, {"sufficient": False, "missing": []}, {"subqueries": ["a", "b", "c", "d", "e"]}]
    loop, _ = retriever(FakeSearcher({}), answers, max_rounds=2, later_subqueries=3)
    run = loop.run(QUESTION)
    assert run.rounds[1].queries == ["a", "b", "c"] and run.stop_reason == "max_rounds"


def test_round_one_searches_the_question_when_the_decomposer_gives_no_subquery():
    # Without the question among round 1's queries (retrieve.include_question off), a decomposition with nothing
    # usable ended the loop before any search: no candidates, and 'cannot answer'.
    searcher = FakeSearcher({QUESTION: ["p1"]})
    loop, _ = retriever(searcher, [{"subqueries": [" ", "?"]}, {"sufficient": True}], include_question=False)
    run = loop.run(QUESTION)
    assert [r.queries for r in run.rounds] == [[QUESTION]] and run.ranking.paper_ids == ["p1"]
    assert run.stop_reason == "sufficient"


def test_without_a_client_the_question_is_the_only_query_of_one_round():
    searcher = FakeSearcher({QUESTION: ["p2", "p1"]})
    loop = QuestionRetriever(searcher, searcher.store, KeepOrder(), RetrieveSettings(), client=None)
    run = loop.run(QUESTION)
    assert run.stop_reason == "no_llm" and [r.queries for r in run.rounds] == [[QUESTION]]
    assert run.rounds[0].verdict is None and run.ranking.paper_ids == ["p2", "p1"]


def test_the_reranker_reorders_only_the_head_of_each_subquery_ranking():
    searcher = FakeSearcher({QUESTION: ["p1", "p2", "p3", "p4"]})
    reranker = ReversingReranker()
    loop = QuestionRetriever(searcher, searcher.store, reranker, RetrieveSettings(rerank_depth=2), client=None)
    run = loop.run(QUESTION)
    assert reranker.seen == [(QUESTION, ["p1", "p2"])]
    ranking = run.rounds[0].results[0].ranking
    assert ranking.paper_ids == ["p2", "p1", "p3", "p4"] and [c.rank for c in ranking.candidates] == [1, 2, 3, 4]


def test_year_and_venue_go_into_the_prompt_and_filter_known_metadata():
    question = "Which NeurIPS 2021 paper introduced drug X?"
    store = FakeStore({"old": 2019, "right": 2021, "unknown": None, "icml": 2021}, {"icml": "ICML", "right": "NeurIPS"})
    searcher = FakeSearcher({question: ["old", "right", "unknown", "icml"]}, store)
    loop, backend = retriever(searcher, [{"subqueries": [], "venue": "NeurIPS", "year": 2021},
                                         {"sufficient": True, "missing": []}])
    run = loop.run(question)
    assert run.constraints == Constraints(venues=["NeurIPS"], years=[2021])
    assert "Restriction: venue NeurIPS; year 2021." in backend.requests[0][1]
    assert run.ranking.paper_ids == ["right", "unknown"] and run.rounds[0].results[0].filtered_out == 2


def test_an_llm_year_the_question_does_not_name_is_ignored():
    question = "Which protein does drug X inhibit?"
    merged = merge_llm_constraints(Constraints(), question, Subqueries(subqueries=[], venue="ICML", year=2020))
    assert merged.empty
    merged = merge_llm_constraints(Constraints(), "drug X at ICML, 2020?", Subqueries(venue="icml", year=2020))
    assert merged == Constraints(venues=["ICML"], years=[2020])
    content_year = merge_llm_constraints(Constraints(), "1/2000 in UK are positive", Subqueries(year=2000))
    assert content_year.empty


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What did CVPR 2023 papers report?", Constraints(venues=["CVPR"], years=[2023])),
        ("Results published between 2019 and 2021?", Constraints(year_min=2019, year_max=2021)),
        ("Studies since 2020 on sepsis", Constraints(year_min=2020)),
        ("Studies after 2020 on sepsis", Constraints(year_min=2021)),
        ("Papers before 2015 on trials", Constraints(year_max=2014)),
        ("Which ICLR'24 method and which 2021 study?", Constraints(venues=["ICLR"], years=[2021, 2024])),
        ("Incidence of heart failure decreased by 10% in women since 1979.", Constraints()),
        ("1/2000 in UK have abnormal PrP positivity.", Constraints()),
        ("Work from 2018-2020 in Nature", Constraints(venues=["Nature"], year_min=2018, year_max=2020)),
        ("Does nature select for cell size?", Constraints()),
        ("Which protein does drug X inhibit?", Constraints()),
    ],
)
def test_constraints_found_by_rule(question, expected):
    assert extract_constraints(question) == expected


def test_unknown_metadata_never_fails_a_constraint():
    paper = PaperSummary(id="p", title="t", year=None, venue=None, doi=None, arxiv_id=None)
    assert satisfies(paper, Constraints(venues=["ICLR"], years=[2020]))
    dated = paper.model_copy(update={"year": 2019, "venue": "Proceedings of ICLR"})
    assert satisfies(dated, Constraints(venues=["ICLR"], year_max=2019))
    assert not satisfies(dated, Constraints(year_min=2020))


def test_subqueries_are_deduplicated_case_and_punctuation_insensitively():
    assert new_subqueries(["A b", "a  B.", "", "c"], asked=["C"], limit=4) == ["A b"]


def test_pooling_is_deterministic_and_breaks_ties_by_paper_id():
    first = Ranking(query="a", method="m", candidates=[candidate("b", 1), candidate("a", 2)])
    second = Ranking(query="b", method="m", candidates=[candidate("a", 1), candidate("b", 2)])
    pooled = pool([first, second], "q", k=10)
    assert pooled.paper_ids == ["a", "b"] and pool([second, first], "q", k=10) == pooled
    assert [c.rank for c in pooled.candidates] == [1, 2]


def test_unparseable_answers_degrade_to_the_question_and_stop_the_loop():
    searcher = FakeSearcher({QUESTION: ["p1"]})
    # repair_retries=1: each failed call is asked twice before giving up
    loop, backend = retriever(searcher, ["not json", "still not", {"oops": 1}, {"nope": 2}])
    trace = Trace()
    run = loop.run(QUESTION, trace)
    assert run.stop_reason == "verifier_failed" and run.rounds[0].queries == [QUESTION]
    assert run.ranking.paper_ids == ["p1"] and not backend.answers
    assert [call.ok for call in trace.calls] == [False, False, False, False]
