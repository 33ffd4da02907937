"""The `ask` flow, one question at a time, read top to bottom in `Pipeline.ask`:

    retrieve   Lit3R Retrieve: LLM subqueries, hybrid search, verifier rounds -> Ranking A   (strata.retrieve)
    relate     paper-to-paper expansion from A's seeds -> Ranking B, fused with A           (strata.relate)
    rerank     the configured reranker, applied once: at `rerank.stage` ('candidates': the fused candidates,
               'subqueries': each subquery's search inside Retrieve)                        (strata.rerank)
    read       per-paper reading, Decisions A and B                                           (strata.read.local)
    synthesize the cross-paper answer with cited passages                                     (strata.read.synthesize)
    validate   locators, quotes and sections checked against the store                       (strata.read.validate)

Every LLM call of a question lands in one Trace. Progress is reported as StageEvents. When reading or synthesis fails
after retrieval succeeded, the result still carries the candidates and whatever was read, marked `partial`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from strata.config import Settings
from strata.corpus import Corpus, CorpusView
from strata.documents.model import ChunkHit, Ranking
from strata.llm import LLMClient, Trace, tracing
from strata.read.local import LocalReader, is_reference_entry
from strata.read.model import (
    Answer,
    AnswerFormat,
    AskCancelled,
    AskResult,
    PaperReading,
    StageEvent,
    StageName,
    StageStatus,
)
from strata.read.sections import with_toc_sections
from strata.read.synthesize import Synthesizer
from strata.read.validate import validate_answer
from strata.relate import CandidateSet, expand_and_fuse
from strata.rerank import FirstStage, Reranker
from strata.retrieve.iterative import QuestionRetriever

EventSink = Callable[[StageEvent], None]


def find_candidates(
    question: str,
    *,
    corpus: CorpusView,
    client: LLMClient | None,
    reranker: Reranker,
    settings: Settings,
    trace: Trace | None = None,
) -> CandidateSet:
    """Retrieve then Relate: Lit3R's iterative question-anchored retrieval (Ranking A), paper-to-paper expansion
    from A's top seeds (Ranking B), and their fusion into `settings.relate.candidates` papers.

    `reranker` reorders each subquery's search (the caller passes FirstStage unless rerank.stage is 'subqueries').
    With `client=None` there is no decomposition or verification: the question is the one subquery of one round.
    """
    retriever = QuestionRetriever(corpus.searcher, corpus.store, reranker, settings.retrieve, client,
                                  settings.search.rrf_k)
    return expand_and_fuse(retriever.run(question, trace), corpus=corpus, settings=settings)


class Pipeline:
    """The stages of `ask` over one open corpus, LLM client and reranker, reused across questions."""

    def __init__(
        self,
        settings: Settings,
        corpus: CorpusView,
        client: LLMClient,
        reranker: Reranker,
        decider: LLMClient | None = None,
    ) -> None:
        """`decider` (default: `client`) makes the calls that decide the answer; `client` makes the filters'."""
        self.settings = settings
        self.corpus = corpus
        self.store = corpus.store
        self.client = client
        self.reranker = reranker
        self.decider = decider or client
        self.local = LocalReader(client, settings.read)
        self.synthesizer = Synthesizer(self.decider, settings.read)

    def ask(
        self,
        question: str,
        *,
        options: Sequence[str] | None = None,
        answer_format: AnswerFormat = "text",
        on_event: EventSink | None = None,
    ) -> AskResult:
        options = list(options or [])
        answer_format = checked_format(options, answer_format)
        started = time.perf_counter()
        events: list[StageEvent] = []

        def emit(stage: StageName, status: StageStatus, detail: str = "") -> None:
            event = StageEvent(stage=stage, status=status, detail=detail, elapsed_s=time.perf_counter() - started)
            events.append(event)
            if on_event is not None:
                on_event(event)

        trace = Trace()
        with tracing(trace):
            try:
                candidates = self._candidates(question, trace, emit)
            except AskCancelled:
                raise
            except Exception as error:  # nothing to answer from: the caller gets the error, the stage its end
                emit(events[-1].stage, "failed", f"{type(error).__name__}: {error}")
                raise
            readings: list[PaperReading] = []
            stage: StageName = "read"
            try:
                read = self.settings.read
                emit("read", "started", f"reading up to {read.max_papers} candidates, until {read.enough_papers} "
                     "are accepted")
                self._read(question, options, candidates, trace, emit, readings)
                accepted = sum(reading.accepted for reading in readings)
                emit("read", "done", f"{accepted} of {len(readings)} papers accepted")
                stage = "synthesize"
                emit("synthesize", "started")
                draft = self.synthesizer.answer(question, readings, answer_format, options, trace)
                emit("synthesize", "done", f"{len(draft.claims)} claims, {len(draft.evidence)} passages cited")
                stage = "validate"
                emit("validate", "started")
                answer = with_toc_sections(validate_answer(draft, self.store, options), self.store, self.settings)
                emit("validate", "done", _validation_detail(answer))
            except AskCancelled:  # nobody is waiting for the partial answer below
                raise
            # A failure here must not throw away what retrieval found: the caller gets the candidates and readings.
            except Exception as error:  # noqa: BLE001
                emit(stage, "failed", f"{type(error).__name__}: {error}")
                return AskResult(
                    answer=_failed_answer(question, answer_format, stage, error),
                    candidates=candidates,
                    events=events,
                    trace=trace,
                    wall_s=time.perf_counter() - started,
                    readings=readings,
                    partial=True,
                    error=f"{stage} failed: {type(error).__name__}: {error}",
                )
        return AskResult(
            answer=answer,
            candidates=candidates,
            events=events,
            trace=trace,
            wall_s=time.perf_counter() - started,
            readings=readings,
        )

    def _candidates(self, question: str, trace: Trace, emit: Callable[..., None]) -> Ranking:
        emit("retrieve", "started")
        at_subqueries = self.settings.rerank.stage == "subqueries"
        found = find_candidates(
            question,
            corpus=self.corpus,
            client=self.client if self.settings.read.llm_retrieval else None,
            reranker=self.reranker if at_subqueries else FirstStage(),
            settings=self.settings,
            trace=trace,
        )
        rounds, papers_a = len(found.rounds), len(found.ranking_a.candidates)
        emit("retrieve", "done", f"{rounds} rounds ({found.stop_reason}), {papers_a} papers")
        papers_b, papers = len(found.ranking_b.candidates), len(found.candidates.candidates)
        emit("relate", "done", f"{papers_b} related papers; {papers} candidates")
        if at_subqueries or isinstance(self.reranker, FirstStage):
            return found.candidates
        emit("rerank", "started", self.reranker.name)
        reranked = self.reranker.rank(question, found.candidates)
        emit("rerank", "done", f"{len(reranked.candidates)} papers")
        return reranked

    def _read(
        self,
        question: str,
        options: list[str],
        candidates: Ranking,
        trace: Trace,
        emit: Callable[..., None],
        readings: list[PaperReading],
    ) -> None:
        """Local reading of the top candidates in rank order, appended to `readings` as each finishes (kept if a
        later one fails), until `read.enough_papers` are accepted; the first `read.accept_top` are accepted unasked.

        A paper's passages are found with the question and its options: the options name the content an answer
        needs (a value, a residue range, a phenotype), which the question alone often does not."""
        top = candidates.top(self.settings.read.max_papers).candidates
        passages = self.passages(" ".join([question, *options]), [candidate.paper_id for candidate in top])
        for position, candidate in enumerate(top, start=1):
            shown = passages.get(candidate.paper_id) or candidate.chunks
            trusted = position <= self.settings.read.accept_top
            reading = self.local.read(question, candidate, shown, trace, choose=not options, trusted=trusted)
            readings.append(reading)
            verdict = "accepted" if reading.accepted else "rejected"
            emit("read", "started", f"{position}/{len(top)} {verdict}: {candidate.title or candidate.paper_id}")
            enough = self.settings.read.enough_papers
            if sum(read.accepted for read in readings) >= enough:
                emit("read", "started", f"{enough} papers accepted: reading stops")
                break

    def passages(self, query: str, paper_ids: list[str]) -> dict[str, list[ChunkHit]]:
        """Each paper's best chunks for `query`, searched again within the paper (a related paper's retrieval chunks
        may be about the seed paper instead); reference-list entries state no findings and are left out."""
        wanted = self.settings.read.passages_per_paper
        searcher = self.corpus.searcher
        search = searcher.settings.model_copy(update={"chunks_per_paper": wanted + REFERENCE_SLACK})
        ranking = searcher.with_settings(search).search(query, k=len(paper_ids), prf=False, paper_ids=paper_ids)
        return {
            candidate.paper_id: [hit for hit in candidate.chunks if not is_reference_entry(hit)][:wanted]
            for candidate in ranking.candidates
        }


REFERENCE_SLACK = 3  # extra chunks fetched per paper so that dropping reference entries still leaves enough
MAX_OPTIONS = 26  # multiple-choice options are lettered A-Z


def requested_format(options: Sequence[str] | None, answer_format: AnswerFormat | None) -> AnswerFormat:
    """The format a client asked for, or its default: 'mc' with options, else 'text'. An explicit 'text' with options
    is refused: the pipeline would answer them as multiple choice, not as asked."""
    if options and answer_format == "text":
        raise ValueError("options make a multiple-choice question: leave the format out, or ask for 'mc'")
    return answer_format or ("mc" if options else "text")


def checked_format(options: Sequence[str], answer_format: AnswerFormat) -> AnswerFormat:
    """The format a question with these options is answered in: options make it multiple choice ('text', the APIs'
    default, becomes 'mc'). Refused: a table with options (they would be ignored), fewer than two or more than 26
    options (A-Z), a blank option, or one given twice (its copy would split its grounding share)."""
    if options and answer_format == "table":
        raise ValueError("format 'table' takes no options: options make a multiple-choice question (format 'mc')")
    if options:
        answer_format = "mc"
    if answer_format == "mc" and len(options) < 2:
        raise ValueError("a multiple-choice question needs at least two options (--options A B ...)")
    if len(options) > MAX_OPTIONS:
        raise ValueError(f"a multiple-choice question takes at most {MAX_OPTIONS} options (A-Z), got {len(options)}")
    written = [" ".join(option.split()) for option in options]
    if "" in written:
        raise ValueError("an option is blank")
    if repeated := [option for index, option in enumerate(written) if option in written[:index]]:
        raise ValueError(f"option {repeated[0]!r} is given twice")
    return answer_format


def _validation_detail(answer: Answer) -> str:
    state = "supported" if answer.supported else "unsupported"
    return f"{state}; {len(answer.evidence)} citations kept, {answer.dropped_claims} claims dropped"


def _failed_answer(question: str, answer_format: AnswerFormat, stage: StageName, error: Exception) -> Answer:
    doing = {"read": "Reading", "synthesize": "Writing the answer", "validate": "Checking the answer's citations"}
    return Answer(
        question=question,
        format=answer_format,
        text=f"{doing.get(stage, stage)} failed ({type(error).__name__}); the candidate papers found are listed.",
        supported=False,
        answerable=False,
    )


@contextmanager
def open_pipeline(settings: Settings, client: LLMClient | None = None) -> Iterator[Pipeline]:
    """A pipeline over the corpus under `settings.store.home`, with the configured LLM unless `client` is given."""
    with Corpus.open(settings, client) as corpus:
        yield Pipeline(settings, corpus, corpus.llm, corpus.reranker, corpus.decider)


def ask(
    question: str,
    settings: Settings,
    *,
    options: list[str] | None = None,
    answer_format: AnswerFormat = "text",
    on_event: EventSink | None = None,
) -> AskResult:
    """Answer one question from the corpus, every claim citing validated evidence (see `Pipeline.ask`)."""
    checked_format(options or [], answer_format)  # bad options are refused before the models load
    with open_pipeline(settings) as pipeline:
        return pipeline.ask(question, options=options, answer_format=answer_format, on_event=on_event)
