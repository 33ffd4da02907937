"""Lit3R cross-paper synthesis: numbered evidence from the accepted papers, then an answer in the task's format.

The model never writes a locator. It sees evidence numbered [1]..[n]. A multiple-choice answer is the option the
evidence states (`strata.read.grounding`) and the model prefers, cited by the passages stating it; text and table
answers are generated under a schema whose numbers are restricted to those given. Evidence and locators come from the
store; `validate` checks everything again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from strata.config import ReadSettings
from strata.index.bm25 import english_analyzer
from strata.llm import LLMClient, Trace, calibrated_logprobs
from strata.llm.backend import probabilities
from strata.read.calculate import calculation_claims
from strata.documents.model import ChunkHit
from strata.documents.sentences import sentence_spans
from strata.read.grounding import OptionGrounding, ground, is_insufficient, states_content, without_inline_citations
from strata.read.local import flat, is_reference_entry
from strata.read.model import (
    Answer,
    AnswerFormat,
    Claim,
    Evidence,
    OptionScore,
    PaperReading,
    citing_only,
    read_prompts,
)

CANNOT_ANSWER = "Cannot answer from this corpus."


def cannot_answer(question: str, answer_format: AnswerFormat) -> Answer:
    return Answer(question=question, format=answer_format, text=CANNOT_ANSWER, answerable=False)


def gather_evidence(readings: Sequence[PaperReading], limit: int) -> list[Evidence]:
    """Supporting passages of the accepted papers, numbered from 1: each paper's best passage first (papers in
    rank order), then each paper's second, and so on, so a multi-paper answer sees every paper before `limit`."""
    return numbered_evidence(supporting_order(readings)[:limit])


def supporting_order(readings: Sequence[PaperReading]) -> list[tuple[PaperReading, ChunkHit]]:
    """The accepted papers' supporting passages, level by level (every paper's best, then every second ...);
    reference-list entries are never evidence."""
    accepted = [reading for reading in readings if reading.accepted]
    depth = max((len(reading.passages) for reading in accepted), default=0)
    return [
        (reading, reading.passages[level])
        for level in range(depth)
        for reading in accepted
        if level < len(reading.passages) and not is_reference_entry(reading.passages[level])
    ]


def grounded_evidence(
    question: str, options: Sequence[str], readings: Sequence[PaperReading], limit: int
) -> list[Evidence]:
    """Multiple choice: the passage that best states each option found in the accepted papers (options by their
    grounding score), then the supporting passages in `gather_evidence` order, without repeats, numbered from 1. The
    model thus sees where each option is stated, not only the passages the local reader picked."""
    pool = [
        (reading, hit)
        for reading in readings
        if reading.accepted
        for hit in (reading.shown or reading.passages)
        if not is_reference_entry(hit)
    ]
    bare = [without_inline_citations(option) for option in options]
    grounding = ground(question, bare, [hit.text for _, hit in pool])
    found = sorted((option for option in grounding.options if option.grounded), key=lambda option: -option.score)
    picked, seen = [], set()
    for reading, hit in [pool[option.passages[0]] for option in found] + supporting_order(readings):
        if str(hit.locator) not in seen:
            seen.add(str(hit.locator))
            picked.append((reading, hit))
    return numbered_evidence(picked[:limit])


def numbered_evidence(picked: Sequence[tuple[PaperReading, ChunkHit]]) -> list[Evidence]:
    return [
        Evidence(
            number=number,
            paper_id=reading.paper_id,
            title=reading.title,
            locator=str(hit.locator),
            section_path=hit.locator.section_path,
            page=hit.locator.page,
            text=hit.text,
        )
        for number, (reading, hit) in enumerate(picked, start=1)
    ]


def shown_to_model(evidence: Sequence[Evidence], about: str, settings: ReadSettings) -> list[Evidence]:
    """The evidence as the deciding model sees it: each passage cut to its `shown_sentences` sentences sharing most
    terms with `about` (the question and options), or whole when that is 0."""
    if not settings.shown_sentences:
        return list(evidence)
    return [item.model_copy(update={"text": best_window(item.text, about, settings.shown_sentences)})
            for item in evidence]  # fmt: skip


def grounding_decides(lexical: Sequence[float], weight: float) -> bool:
    """Whether the model's share cannot change the choice: the grounding margin of the best option over the next,
    at `weight`, is at least the most the model could swing (1 - weight, one option at share 1 and the best at 0).
    In practice: one option stated in the evidence and none other, at a grounding weight of at least 0.5."""
    if not any(lexical) or len(lexical) < 2:
        return False
    best, second = sorted(lexical, reverse=True)[:2]
    return weight * (best - second) >= 1 - weight


def show_evidence(evidence: Sequence[Evidence]) -> str:
    return "\n".join(f"[{item.number}] ({flat(item.title) or item.paper_id}) {flat(item.text)}" for item in evidence)


class Synthesizer:
    def __init__(self, client: LLMClient, settings: ReadSettings) -> None:
        self.client = client
        self.settings = settings

    def answer(
        self,
        question: str,
        readings: Sequence[PaperReading],
        answer_format: AnswerFormat,
        options: Sequence[str] | None,
        trace: Trace,
    ) -> Answer:
        """The answer with only the evidence its claims cite, each cited passage quoted; 'cannot answer' when no
        paper was accepted or the model says the evidence does not answer."""
        if answer_format == "mc" and not options:
            raise ValueError("a multiple-choice question needs its options")
        if answer_format == "mc" and options:
            evidence = grounded_evidence(question, options, readings, self.settings.max_evidence)
        else:
            evidence = gather_evidence(readings, self.settings.max_evidence)
        if not evidence:
            return cannot_answer(question, answer_format)
        if answer_format == "mc" and options:
            answer = self._choose(question, list(options), evidence, trace)
        elif answer_format == "table":
            answer = self._table(question, evidence, trace)
        else:
            answer = self._text(question, evidence, trace)
        return quoted(answer, self.settings.quote_sentences)

    def _choose(self, question: str, options: list[str], evidence: list[Evidence], trace: Trace) -> Answer:
        """The option that the evidence states (lexical grounding) and the model prefers (`read.choice`), weighted
        by `read.grounding_weight` (the model is not asked when its share could not change the choice, see
        `grounding_decides`); cited by the passages that state it, so an option stated nowhere cites nothing
        (validation then marks the answer unsupported). An option that only restates the question's alternatives
        (a verdict) cannot be stated in words: it cites the first paper's passages the model read."""
        bare = [without_inline_citations(option) for option in options]  # '[2]' in an option is no number it states
        grounding = ground(question, bare, [item.text for item in evidence])
        lexical = grounding.shares()
        model = None
        if self.settings.choice != "grounding" and not grounding_decides(lexical, self.settings.grounding_weight):
            shown = show_evidence(shown_to_model(evidence, " ".join([question, *options]), self.settings))
            model = self._model_shares(shown, flat(question), options, trace)
        scores = [OptionScore(option=option, grounding=share, model=None if model is None else model[index])
                  for index, (option, share) in enumerate(zip(options, lexical, strict=True))]  # fmt: skip
        best = decide(bare, lexical, model, self.settings)
        if best is None:
            return cannot_answer(question, "mc").model_copy(update={"option_scores": scores})
        choice = options[best]
        if is_insufficient(bare[best]):  # the evidence does not answer: nothing to cite
            return Answer(question=question, format="mc", text=choice, choice=choice, answerable=False,
                          option_scores=scores)  # fmt: skip
        if states_content(bare[best], bare, question):
            citations = sorted(evidence[index].number for index in citing(grounding.options[best]))
        else:  # a verdict ('supported') no passage states in words: it rests on the best paper's passages the model read
            citations = [item.number for item in evidence if item.paper_id == evidence[0].paper_id]
        return Answer(
            question=question,
            format="mc",
            text=choice,
            choice=choice,
            option_scores=scores,
            claims=[Claim(text=choice, citations=citations)],
            evidence=evidence,
        )

    def _model_shares(self, shown: str, asked: str, options: list[str], trace: Trace) -> list[float]:
        """The model's preference as shares summing to 1 (log-probabilities through a softmax)."""
        preference = self._option_preference(shown, asked, options, trace)
        if self.settings.choice == "letter":
            return preference
        peak = max(preference)
        weights = [math.exp(value - peak) for value in preference]
        return [weight / sum(weights) for weight in weights]

    def _option_preference(self, shown: str, asked: str, options: list[str], trace: Trace) -> list[float]:
        """One number per option, higher = preferred, by the method `read.choice` names."""
        texts = [flat(option) for option in options]
        if self.settings.choice == "letter":
            return self._letter_preference(shown, asked, texts, trace)
        listed = "\n".join(f"- {text}" for text in texts)
        prompt = read_prompts().render("read_choose", evidence=shown, question=asked, options=listed)
        informed = self.client.score(prompt, texts, trace=trace)
        if self.settings.choice == "likelihood":
            return [score.mean_logprob for score in informed]
        # Calibrated against the same question without evidence: what the evidence adds to each option.
        prior_prompt = read_prompts().render("read_choose_prior", question=asked, options=listed)
        return calibrated_logprobs(informed, self.client.score(prior_prompt, texts, trace=trace))

    def _letter_preference(self, shown: str, asked: str, texts: list[str], trace: Trace) -> list[float]:
        """Mean share of each option's letter over every cyclic order of the options. Small models favour a
        position (here 'A': 12 of 19 LitQA2 answers before this); showing each option once at each position cancels
        that. The prompts share the evidence, so each order costs only its question and options."""
        letters = [chr(ord("A") + index) for index in range(len(texts))]
        preference = [0.0] * len(texts)
        shifts = min(len(texts), self.settings.letter_orders or len(texts))
        for shift in range(shifts):
            order = [(index + shift) % len(texts) for index in range(len(texts))]
            listed = "\n".join(f"{letter}. {texts[index]}" for letter, index in zip(letters, order, strict=True))
            prompt = read_prompts().render("read_choose_letter", evidence=shown, question=asked, options=listed)
            shares = probabilities(self.client.score(prompt, letters, trace=trace))
            for position, index in enumerate(order):
                preference[index] += shares[position] / shifts
        return preference

    def _text(self, question: str, evidence: list[Evidence], trace: Trace) -> Answer:
        schema, _ = citing_only([item.number for item in evidence])
        prompt = read_prompts().render("read_answer", evidence=show_evidence(evidence), question=flat(question))
        draft = self.client.complete(prompt, schema, trace=trace, max_tokens=self.settings.max_answer_tokens)
        if not draft.answerable:
            return cannot_answer(question, "text")
        facts = [
            Claim(
                text=f"{fact.value} {fact.unit}".strip(),
                citations=[fact.evidence],
                value=fact.value,
                unit=fact.unit or None,
            )
            for fact in draft.facts
        ]
        calculations, rejected = calculation_claims(draft.calculations, facts)
        # An answer citing nothing itself rests on the passages of its facts.
        citations = sorted(set(draft.evidence) or {number for fact in facts for number in fact.citations})
        claims = [Claim(text=draft.answer, citations=citations), *facts, *calculations]
        return Answer(
            question=question, format="text", text=draft.answer, claims=claims, evidence=evidence, rejections=rejected
        )

    def _table(self, question: str, evidence: list[Evidence], trace: Trace) -> Answer:
        _, schema = citing_only([item.number for item in evidence])
        prompt = read_prompts().render("read_table", evidence=show_evidence(evidence), question=flat(question))
        draft = self.client.complete(prompt, schema, trace=trace, max_tokens=self.settings.max_answer_tokens)
        if not draft.answerable or not draft.rows:
            return cannot_answer(question, "table")
        claims = [Claim(text=" | ".join(row.cells), citations=sorted(set(row.evidence))) for row in draft.rows]
        return Answer(
            question=question,
            format="table",
            text="\n".join(claim.text for claim in claims),
            table=[draft.header, *[row.cells for row in draft.rows]],
            claims=claims,
            evidence=evidence,
        )


CITED_SHARE = 0.5  # besides the best passage stating the chosen option, others scoring at least this share of it


def citing(option: OptionGrounding) -> list[int]:
    """Indices of the passages stating the option that its citation rests on: the best and those close to it."""
    paired = zip(option.passages, option.scores, strict=True)
    # Against its best passage, not its score: answered by elimination, an option's score is not a passage's.
    return [index for index, score in paired if score >= CITED_SHARE * max(option.scores, default=0.0)]


def decide(
    options: Sequence[str], lexical: Sequence[float], model: Sequence[float] | None, settings: ReadSettings
) -> int | None:
    """The index of the chosen option: its grounding share (`lexical`, all 0 when no option is stated anywhere) and
    model share weighted by `grounding_weight` (grounding alone when `model` is None). When no option is stated, an
    'insufficient information' option wins unless the model is confident; with no such option and no model there is
    nothing to choose with (None)."""
    unanswerable = [index for index, option in enumerate(options) if is_insufficient(option)]
    if not any(lexical):
        answers = [share for index, share in enumerate(model or []) if index not in unanswerable]
        if unanswerable and max(answers, default=0.0) < settings.insufficient_below:
            return unanswerable[0]
        if model is None:
            return None
    shares = list(lexical)
    if model is not None:
        weight = settings.grounding_weight
        shares = [weight * lexical + (1 - weight) * llm for lexical, llm in zip(shares, model, strict=True)]
    return max(range(len(options)), key=lambda index: (shares[index], -index))


def quoted(answer: Answer, sentences: int) -> Answer:
    """Keep the evidence some claim cites, each with the run of `sentences` sentences sharing most terms with the
    question and the claims citing it as its quote."""
    cited = {number for claim in answer.claims for number in claim.citations}
    kept = []
    for item in answer.evidence:
        if item.number not in cited:
            continue
        about = " ".join([answer.question, *(claim.text for claim in answer.claims if item.number in claim.citations)])
        kept.append(item.model_copy(update={"quote": best_window(item.text, about, sentences)}))
    return answer.model_copy(update={"evidence": kept})


def best_window(text: str, about: str, size: int) -> str:
    """The run of `size` consecutive sentences of `text` holding the most distinct analysed terms of `about`
    (ties: the earliest), exactly as it appears in `text`."""
    spans = sentence_spans(text)
    if not spans:
        return text.strip()
    wanted = set(english_analyzer().analyze(about))
    size = min(size, len(spans))
    windows = [(spans[start][0], spans[start + size - 1][1]) for start in range(len(spans) - size + 1)]
    overlap = [len(wanted & set(english_analyzer().analyze(text[a:b]))) for a, b in windows]
    best = max(range(len(windows)), key=lambda index: (overlap[index], -index))
    start, end = windows[best]
    return text[start:end]
