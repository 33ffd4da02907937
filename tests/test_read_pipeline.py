"""Control flow of Read on a scripted fake LLM: Decisions A and B filter papers, answers stay within the options
and the evidence given, and a reader failure still returns the candidates."""

import json
from collections.abc import Sequence

import pytest
from corpus_support import bm25_corpus

from strata.documents.builder import PaperBuilder
from strata.documents.model import Candidate, ChunkHit, Ranking
from strata.llm import ContinuationScore, Generation, LLMClient, LLMError, Scoring, Trace
from strata.pipeline import ask as pipeline_module
from strata.read.model import AskCancelled, Evidence
from strata.pipeline.ask import Pipeline
from strata.read.synthesize import Synthesizer
from strata.rerank import FirstStage
from strata.store.sqlite import CorpusStore

PAPERS = {
    "good": ("Diet and weight in mice", "Mice on the diet gained 12 g in four weeks. Controls gained 5 g."),
    "topic": ("A review of diet studies", "Diet studies in mice are common and vary widely in design."),
    "other": ("A galaxy survey", "We observed forty galaxies with the new telescope."),
}
QUESTION = "How much weight did control mice gain in the diet study?"
OPTIONS = ["7 g", "5 g", "12 g"]


class RuleBackend:
    """Answers like a model that follows the prompts: Decision A holds when passages and question mention diet, B
    when they state a gain; options and evidence numbers are preferred when the evidence contains them."""

    name = "rules"
    model = "rules-1"
    load_seconds = None

    def __init__(self, answers: Sequence[str] = (), fail_after: int | None = None) -> None:
        self.answers = list(answers)
        self.fail_after = fail_after
        self.scored: list[list[str]] = []

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        if self.fail_after is not None and len(self.scored) >= self.fail_after:
            raise LLMError("the model crashed")
        self.scored.append(list(continuations))
        context, asked = (part.lower() for part in user.split("Question:"))
        if "Is this paper a source" in user:
            preferred = {"yes", "Yes"} if "diet" in context and "diet" in asked else {"no", "No"}
        elif "Do these passages themselves" in user:
            preferred = {"yes", "Yes"} if "gained" in context else {"no", "No"}
        elif "Reply with the correct option" in user:
            preferred = {option for option in continuations if f"controls gained {option.lower()}" in context}
        elif "Reply with the letter" in user:
            lettered = dict(line.split(". ", 1) for line in asked.upper().splitlines() if line[1:3] == ". ")
            preferred = {letter for letter in continuations if f"controls gained {lettered[letter].lower()}" in context}
        else:
            preferred = {"1"}
        scores = [ContinuationScore(continuation=c, logprob=0.0 if c in preferred else -6.0, n_tokens=1)
                  for c in continuations]
        return Scoring(scores=scores, tokens_in=len(user.split()))

    def generate(self, system, user, schema, options) -> Generation:
        return Generation(text=self.answers.pop(0), tokens_in=len(user.split()), tokens_out=20)

    def close(self) -> None:
        pass


@pytest.fixture()
def corpus(tmp_path):
    """The three papers, with every paper judged by Decisions A and B (read.accept_top 0), which these tests check."""
    with bm25_corpus(tmp_path, PAPERS) as (settings, opened):
        yield with_read(settings, accept_top=0), opened


def with_read(settings, **read):
    return settings.model_copy(update={"read": settings.read.model_copy(update=read)})


def candidate_ranking(store: CorpusStore) -> Ranking:
    candidates = []
    for rank, paper_id in enumerate(PAPERS, start=1):
        stored = store.chunks_after(0)
        hits = [ChunkHit(rowid=s.rowid, text=s.chunk.text, locator=s.chunk.locator, score=1.0)
                for s in stored if s.chunk.paper_id == paper_id]
        candidates.append(Candidate(paper_id=paper_id, title=PAPERS[paper_id][0], score=1.0 / rank, rank=rank,
                                    chunks=hits))
    return Ranking(query=QUESTION, method="fake", candidates=candidates)


@pytest.fixture()
def make_pipeline(corpus, monkeypatch):
    settings, opened = corpus
    store = opened.store

    class FoundCandidates:
        rounds: list = []
        stop_reason = "no_llm"
        ranking_a = candidate_ranking(store)
        ranking_b = Ranking(query=QUESTION, method="off")
        candidates = ranking_a

    monkeypatch.setattr(pipeline_module, "find_candidates", lambda question, **_: FoundCandidates)

    def build(backend: RuleBackend, given=settings) -> Pipeline:
        return Pipeline(given, opened, LLMClient(backend, given.llm), FirstStage())

    return build


def test_decisions_a_and_b_pass_only_the_paper_that_states_the_answer(make_pipeline):
    events = []
    result = make_pipeline(RuleBackend()).ask(QUESTION, options=OPTIONS, on_event=events.append)
    readings = {reading.paper_id: reading for reading in result.readings}
    assert readings["good"].accepted and readings["good"].relevant > 0.9 and readings["good"].sufficient > 0.9
    assert not readings["topic"].accepted and readings["topic"].sufficient < 0.1  # relevant, but no answer content
    assert not readings["other"].accepted and readings["other"].sufficient is None  # Decision A already said no
    answer = result.answer
    assert answer.format == "mc" and answer.choice == "5 g" and answer.supported and not result.partial
    assert {item.paper_id for item in answer.evidence} == {"good"}
    assert all("Controls gained 5 g." in item.quote for item in answer.evidence)
    assert [(e.stage, e.status) for e in events if e.status != "started"] == [
        ("retrieve", "done"), ("relate", "done"), ("read", "done"), ("synthesize", "done"), ("validate", "done")
    ]
    assert events == result.events and result.trace.summary().calls == len(result.trace.calls) > 5


def test_a_multiple_choice_answer_is_scored_among_the_options_only(make_pipeline):
    backend = RuleBackend()
    result = make_pipeline(backend).ask(QUESTION, options=OPTIONS)
    letters = ["A", "B", "C"]
    assert backend.scored.count(letters) == 1 and result.answer.choice in OPTIONS  # one order (read.letter_orders)
    with pytest.raises(ValueError, match="at least two options"):
        make_pipeline(RuleBackend()).ask(QUESTION, answer_format="mc", options=["5 g"])


@pytest.mark.parametrize(
    ("options", "answer_format", "why"),
    [(["", "5 g"], "mc", "blank"), (["5 g", " ", "12 g"], "mc", "blank"), (["5 g", "12 g", "5  g"], "mc", "twice"),
     (OPTIONS, "table", "format 'table' takes no options")],
)
def test_options_that_cannot_be_told_apart_or_answered_are_refused_before_anything_runs(
    make_pipeline, options, answer_format, why
):
    # A repeated option split the grounding share with its copy (12 g outscored 5 g), a blank one was a free choice,
    # and a table answer ignored its options.
    backend = RuleBackend()
    with pytest.raises(ValueError, match=why):
        make_pipeline(backend).ask(QUESTION, options=options, answer_format=answer_format)
    assert backend.scored == []


def test_a_papers_passages_are_searched_with_the_question_and_its_options(make_pipeline):
    pipeline = make_pipeline(RuleBackend())
    searched: list[str] = []
    find = pipeline.passages
    pipeline.passages = lambda query, paper_ids: searched.append(query) or find(query, paper_ids)
    pipeline.ask(QUESTION, options=OPTIONS)
    pipeline.ask(QUESTION)
    assert searched == [" ".join([QUESTION, *OPTIONS]), QUESTION]


def test_a_papers_passages_leave_out_entries_under_a_reference_heading_of_any_content_type(make_pipeline):
    pipeline = make_pipeline(RuleBackend())
    builder = PaperBuilder("cited", "test")
    builder.open_section("Results", level=1, page=1)
    builder.add_block("Controls in the diet study gained 5 g.", page=1)
    builder.open_section("References", level=1, page=2)  # a list the parser read as prose
    builder.add_block("Smith J. Diet study of control mice weight gain. J Diet 2020.", page=2)
    pipeline.corpus.store.put_paper(builder.build(title="Diet study"), "sha-cited")
    pipeline.corpus.index.sync()
    (hits,) = pipeline.passages("diet study control mice weight gain", ["cited"]).values()
    assert [hit.locator.section_path for hit in hits] == [("Results",)]


def test_no_accepted_paper_means_cannot_answer_with_nothing_cited(make_pipeline):
    result = make_pipeline(RuleBackend()).ask("Which telescope found forty galaxies?", options=["A", "B"])
    assert not any(reading.accepted for reading in result.readings)
    assert result.answer.text == "Cannot answer from this corpus." and not result.answer.answerable
    assert result.answer.choice is None and result.answer.evidence == [] and not result.partial


def test_a_text_answer_cites_evidence_numbers_and_its_facts(make_pipeline):
    draft = {"answerable": True, "answer": "Controls gained 5 g.", "evidence": [1],
             "facts": [{"value": "5", "unit": "g", "evidence": 1}]}
    result = make_pipeline(RuleBackend([json.dumps(draft)])).ask(QUESTION)
    answer = result.answer
    assert answer.supported and answer.text == "Controls gained 5 g."
    facts = [(claim.value, claim.unit, claim.citations) for claim in answer.claims]
    assert facts == [(None, None, [1]), ("5", "g", [1])]
    assert answer.evidence[0].paper_id == "good" and answer.evidence[0].locator.startswith("good#")


def test_a_calculation_is_computed_from_the_cited_facts_and_a_foreign_number_is_dropped(make_pipeline):
    draft = {"answerable": True, "answer": "Diet mice gained 7 g more than controls.", "evidence": [1],
             "facts": [{"value": "12", "unit": "g", "evidence": 1}, {"value": "5", "unit": "g", "evidence": 1}],
             "calculations": [{"expression": "12 - 5", "unit": "g"}, {"expression": "12 - 4", "unit": "g"}]}
    answer = make_pipeline(RuleBackend([json.dumps(draft)])).ask(QUESTION).answer
    assert answer.supported
    computed = [claim for claim in answer.claims if "=" in claim.text]
    assert [(c.text, c.value, c.citations) for c in computed] == [("12 - 5 = 7 g", "7", [1])]
    assert any("4 in '12 - 4' is not the value of any fact" in why for why in answer.rejections)


def test_a_table_keeps_only_the_rows_validation_kept_without_citation_marks(make_pipeline):
    draft = {"answerable": True, "header": ["Group", "Gain"],
             "rows": [{"cells": ["Controls", "5 g [1]"], "evidence": [1]}, {"cells": ["Rats", "9 g"], "evidence": []}]}
    answer = make_pipeline(RuleBackend([json.dumps(draft)])).ask(QUESTION, answer_format="table").answer
    assert answer.table == [["Group", "Gain"], ["Controls", "5 g"]] and answer.text == "Controls | 5 g"
    assert [claim.text for claim in answer.claims] == ["Controls | 5 g"] and answer.dropped_claims == 1


def test_an_answer_citing_evidence_it_was_not_given_is_refused_and_the_candidates_kept(make_pipeline):
    invented = json.dumps({"answerable": True, "answer": "Controls gained 5 g.", "evidence": [4]})
    result = make_pipeline(RuleBackend([invented, invented])).ask(QUESTION)
    assert result.partial and result.error.startswith("synthesize failed")
    assert result.answer.text.startswith("Writing the answer failed")  # not 'Reading failed': reading went well
    assert result.answer.evidence == [] and not result.answer.supported
    assert [reading.paper_id for reading in result.readings if reading.accepted] == ["good"]


def test_a_reader_failure_returns_the_candidates_and_papers_read_as_a_partial_result(make_pipeline):
    # Decisions A and B on the first paper succeed; the model fails on the second paper.
    result = make_pipeline(RuleBackend(fail_after=2)).ask(QUESTION, options=OPTIONS)
    assert result.partial and "the model crashed" in result.error and result.error.startswith("read failed")
    assert result.candidates.paper_ids == list(PAPERS)
    assert [(reading.paper_id, reading.accepted) for reading in result.readings] == [("good", True)]
    assert not result.answer.answerable and result.answer.choice is None
    assert result.answer.text.startswith("Reading failed")
    assert (result.events[-1].stage, result.events[-1].status) == ("read", "failed")


@pytest.mark.parametrize("failing", ["retrieve", "rerank"])
def test_a_failing_candidate_stage_reports_itself_failed_before_the_error_is_raised(corpus, monkeypatch, failing):
    settings, opened = corpus
    found = pipeline_module.find_candidates

    class Failing:
        name = "failing"

        def rank(self, query, candidates):
            raise LLMError("the reranker crashed")

    def find_candidates(question, **kwargs):
        if failing == "retrieve":
            raise LLMError("the model server is down")
        return found(question, **kwargs)

    monkeypatch.setattr(pipeline_module, "find_candidates", find_candidates)
    pipeline = Pipeline(with_read(settings, llm_retrieval=False), opened, LLMClient(RuleBackend(), settings.llm),
                        Failing())
    events = []
    with pytest.raises(LLMError):
        pipeline.ask(QUESTION, on_event=events.append)
    assert (events[-1].stage, events[-1].status) == (failing, "failed") and "LLMError" in events[-1].detail
    assert [(event.stage, event.status) for event in events].count((failing, "started")) == 1


def test_a_sink_that_cancels_stops_the_pipeline_instead_of_returning_a_partial_answer(make_pipeline):
    seen = []

    def leave_once_reading_starts(event) -> None:
        seen.append((event.stage, event.status))
        if event.stage == "read":
            raise AskCancelled("the client went away")

    with pytest.raises(AskCancelled):
        make_pipeline(RuleBackend()).ask(QUESTION, options=OPTIONS, on_event=leave_once_reading_starts)
    assert seen[-1] == ("read", "started")  # no 'failed' event, no synthesis after it


def test_the_printed_answer_numbers_its_citations_with_title_section_and_evidence(make_pipeline):
    from strata.read.format import format_ask_result

    printed = format_ask_result(make_pipeline(RuleBackend()).ask(QUESTION, options=OPTIONS), trace=True)
    assert "5 g [1]" in printed
    assert "[1] Diet and weight in mice — Results" in printed and 'Controls gained 5 g."' in printed
    assert "A=" in printed and "LLM calls:" in printed


class PriorBiasedBackend(RuleBackend):
    """Without evidence the model favours '12 g'; the evidence raises '5 g' more. As letters it prefers the letter
    of '5 g', but also always likes 'A' (a position bias that must average out)."""

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        if "Reply with the letter" in user:
            right = next(line[0] for line in user.splitlines() if line.endswith(". 5 g"))
            table = {"A": -0.5, right: -0.1} if right != "A" else {"A": -0.1}
        elif "Evidence:" in user:
            table = {"12 g": -1.0, "5 g": -2.0}
        else:
            table = {"12 g": -0.5, "5 g": -4.0}
        scores = [ContinuationScore(continuation=c, logprob=table.get(c, -8.0), n_tokens=2) for c in continuations]
        return Scoring(scores=scores, tokens_in=len(user.split()))


@pytest.mark.parametrize(("method", "expected"), [("likelihood", "12 g"), ("calibrated", "5 g"), ("letter", "5 g")])
def test_each_option_choice_method_picks_by_its_own_rule(corpus, method, expected):
    """The model alone (grounding weight 0); an option the evidence does not state is cited by nothing."""
    settings, *_ = corpus
    read = settings.read.model_copy(update={"choice": method, "grounding_weight": 0.0})
    evidence = [Evidence(number=1, paper_id="good", title="Diet", locator="good#c0", text="Controls gained 5 g.")]
    synthesizer = Synthesizer(LLMClient(PriorBiasedBackend(), settings.llm), read)
    answer = synthesizer._choose(QUESTION, OPTIONS, evidence, Trace())
    assert answer.choice == expected and answer.claims[0].citations == ([1] if expected == "5 g" else [])


@pytest.mark.parametrize("stage", ["candidates", "subqueries"])
def test_the_reranker_runs_once_at_the_stage_the_settings_name(corpus, monkeypatch, stage):
    settings, opened = corpus
    settings = settings.model_copy(update={"rerank": settings.rerank.model_copy(update={"stage": stage})})
    given: list = []

    class Found:
        rounds: list = []
        stop_reason = "no_llm"
        ranking_a = candidate_ranking(opened.store)
        ranking_b = Ranking(query=QUESTION, method="off")
        candidates = ranking_a

    def find_candidates(question, **kwargs):
        given.append(kwargs["reranker"])
        return Found

    class Counting:
        name = "counting"
        calls = 0

        def rank(self, query, candidates):
            Counting.calls += 1
            return candidates

    monkeypatch.setattr(pipeline_module, "find_candidates", find_candidates)
    pipeline = Pipeline(settings, opened, LLMClient(RuleBackend(), settings.llm), Counting())
    events: list = []
    pipeline._candidates(QUESTION, Trace(), lambda stage, status, detail="": events.append(stage))
    inside_retrieve = isinstance(given[0], Counting)
    assert inside_retrieve == (stage == "subqueries")  # Retrieve gets the reranker only for 'subqueries'
    assert Counting.calls == (stage == "candidates")  # and the pipeline reranks the candidates only otherwise
    assert ("rerank" in events) == (stage == "candidates")


def test_reading_stops_once_enough_papers_are_accepted(corpus, make_pipeline):
    settings, opened = corpus
    every = make_pipeline(RuleBackend()).ask(QUESTION, options=OPTIONS)
    assert [reading.paper_id for reading in every.readings] == list(PAPERS)  # one accepted: all three judged
    enough = with_read(settings, enough_papers=1)
    backend = RuleBackend()
    early = Pipeline(enough, opened, LLMClient(backend, enough.llm), FirstStage()).ask(QUESTION, options=OPTIONS)
    assert [reading.paper_id for reading in early.readings] == ["good"]  # the first paper was accepted
    assert early.answer.choice == "5 g" and early.answer.supported
    assert len(early.trace.calls) == len(every.trace.calls) - 3  # 'topic' (A and B) and 'other' (A) not judged


def test_the_top_ranked_paper_is_accepted_without_asking_the_decisions(corpus, make_pipeline):
    settings, _ = corpus
    asked = "Which galaxy did the survey observe?"  # the model rejects 'good', which ranks first
    trusting = make_pipeline(RuleBackend(), with_read(settings, accept_top=1, enough_papers=1)).ask(asked,
                                                                                                   options=OPTIONS)
    first = trusting.readings[0]
    assert first.paper_id == "good" and first.accepted and first.relevant is None and first.sufficient is None
    assert [reading.paper_id for reading in trusting.readings] == ["good"]  # enough accepted: nothing else is read
    assert not {"read_relevance", "read_sufficiency"} & {call.prompt for call in trusting.trace.calls}
    judged = make_pipeline(RuleBackend()).ask(asked, options=OPTIONS)
    assert not judged.readings[0].accepted and judged.readings[0].relevant < 0.5


def test_the_deciding_model_makes_the_option_choice_and_the_default_one_the_filters(corpus, make_pipeline):
    settings, opened = corpus
    filters, decider = RuleBackend(), RuleBackend()
    decider.model = "rules-large"
    pipeline = Pipeline(settings, opened, LLMClient(filters, settings.llm), FirstStage(),
                        LLMClient(decider, settings.llm))
    result = pipeline.ask(QUESTION, options=OPTIONS)
    assert result.answer.choice == "5 g"
    assert decider.scored == [["A", "B", "C"]]  # only the letter choice, in one order (read.letter_orders)
    assert filters.scored and ["A", "B", "C"] not in filters.scored
    models = {call.prompt: call.model for call in result.trace.calls}
    assert models["read_choose_letter"] == "rules-large" and models["read_relevance"] == "rules-1"


def test_a_corpus_opens_the_deciding_model_only_when_it_differs(tmp_path, monkeypatch):
    from strata.config import Settings
    from strata.corpus import Corpus

    opened: list[str] = []

    class Client:
        def __init__(self, llm):
            self.model = llm.model
            opened.append(llm.model)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr("strata.llm.make_client", lambda settings, **_: Client(getattr(settings, "llm", settings)))
    home = {"store.home": str(tmp_path / "home"), "index.dense": False}
    same = Settings.load(overrides={**home, "llm.decide_model": "packaged:qwen2.5-coder-0.5b"})
    with Corpus.open(same) as corpus:
        assert corpus.decider is corpus.llm
    other = Settings.load(overrides={**home, "llm.decide_model": "packaged:qwen2.5-coder-1.5b"})
    with Corpus.open(other) as corpus:
        assert corpus.decider.model == "packaged:qwen2.5-coder-1.5b" and corpus.llm.model == other.llm.model
    given = LLMClient(RuleBackend(), other.llm)
    with Corpus.open(other, given) as corpus:
        assert corpus.decider is given  # a caller's client answers every call
    assert opened == ["packaged:qwen2.5-coder-0.5b", "packaged:qwen2.5-coder-1.5b", "packaged:qwen2.5-coder-0.5b"]
