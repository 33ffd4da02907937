"""What the reader produces: an answer whose every claim cites validated evidence from the corpus."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from strata.documents.model import ChunkHit, Ranking
from strata.llm.backend import YesNo
from strata.llm.templates import PromptRegistry
from strata.llm.trace import Trace

AnswerFormat = Literal["text", "mc", "table"]


class Evidence(BaseModel):
    """One citable passage: a locator into a corpus paper and the exact text it resolves to."""

    number: int = Field(ge=1, description="Citation number as printed in the answer, [1], [2], ...")
    paper_id: str
    title: str = ""
    locator: str = Field(description="PAPER_ID#START-END; resolves to `text` in the stored paper")
    section_path: tuple[str, ...] = Field(default=(), description="ToC path of the section holding the passage")
    page: int | None = None
    text: str = Field(description="The passage the locator resolves to")
    quote: str = Field(default="", description="The part of `text` the claim rests on (validated to be inside it)")


class Claim(BaseModel):
    """One statement of the answer and the evidence numbers that support it."""

    text: str
    citations: list[int] = Field(default_factory=list, description="Evidence numbers")
    value: str | None = Field(default=None, description="Extracted value, when the claim is a fact with a value")
    unit: str | None = None
    expression: str | None = Field(
        default=None, description="Calculated claims: the arithmetic over the facts' values that Strata computed"
    )


class OptionScore(BaseModel):
    """How a multiple-choice option fared: the shares the choice weighed (`read.grounding_weight`)."""

    option: str
    grounding: float = Field(description="Its share of the lexical grounding scores (0 when stated nowhere)")
    model: float | None = Field(default=None, description="The model's share for it; None when no LLM chose")


class Answer(BaseModel):
    """The answer to one question. `supported` is False when validation removed what the answer rested on."""

    question: str
    format: AnswerFormat = "text"
    text: str = Field(description="The answer as prose; 'Cannot answer from this corpus.' is a valid answer")
    choice: str | None = Field(default=None, description="Multiple choice: the selected option, verbatim")
    table: list[list[str]] | None = Field(default=None, description="Table answers: rows, the first one the header")
    option_scores: list[OptionScore] = Field(
        default_factory=list, description="Multiple choice: each option's grounding and model shares, in option order"
    )
    claims: list[Claim] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    supported: bool = Field(default=True, description="Every kept claim has validated evidence")
    answerable: bool = Field(default=True, description="False when the corpus does not answer the question")
    dropped_claims: int = Field(default=0, ge=0, description="Claims removed because their evidence failed validation")
    rejections: list[str] = Field(
        default_factory=list, description="Why validation removed evidence, claims or the choice, one line each"
    )


StageName = Literal["retrieve", "relate", "rerank", "read", "synthesize", "validate"]
StageStatus = Literal["started", "done", "failed"]


class StageEvent(BaseModel):
    """Progress of one pipeline stage, streamed to the web page and printed by `strata ask --trace`."""

    stage: StageName
    status: StageStatus
    detail: str = Field(default="", description="Short human-readable progress, e.g. 'round 2: 4 subqueries'")
    elapsed_s: float = Field(default=0.0, ge=0, description="Seconds since the question arrived")


class AskCancelled(Exception):
    """Raised by a StageEvent sink whose caller went away: the pipeline stops at that event, keeping nothing."""


class PaperReading(BaseModel):
    """Local reading of one candidate paper: Decision A (relevant), Decision B (sufficient), supporting passages."""

    paper_id: str
    title: str = ""
    rank: int = Field(ge=1, description="The paper's rank among the candidates")
    relevant: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Decision A: P(yes) that the paper owns or supplies the answer; None when the paper was accepted "
        "on its first-stage rank (read.accept_top) without the decisions",
    )
    sufficient: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Decision B: P(yes) that the passages give usable answer content; None when A rejected the paper "
        "or neither decision was asked",
    )
    accepted: bool = Field(
        description="Both decisions reached read.accept_threshold, or the paper ranked within read.accept_top; only "
        "these go to synthesis"
    )
    passages: list[ChunkHit] = Field(
        default_factory=list, description="Accepted papers: the supporting passages, best first, with locators"
    )
    shown: list[ChunkHit] = Field(
        default_factory=list,
        description="Accepted papers: every passage the local reader was shown, where multiple-choice options are "
        "looked for (strata.read.grounding)",
    )


class AskResult(BaseModel):
    """Everything `strata ask` (and POST /ask) returns: the answer, the candidates read and the per-question trace."""

    answer: Answer
    candidates: Ranking = Field(description="The papers the reader was given (Retrieve + Relate, reranked)")
    events: list[StageEvent] = Field(default_factory=list)
    trace: Trace = Field(default_factory=Trace, description="Every LLM call made for this question")
    wall_s: float = Field(default=0.0, ge=0)
    readings: list[PaperReading] = Field(default_factory=list, description="Local reading of each paper read")
    partial: bool = Field(
        default=False, description="Reading or synthesis failed: the answer is a placeholder, the candidates are real"
    )
    error: str | None = Field(default=None, description="What failed, when `partial`")


# What the reader's prompts ask the model for. Scored prompts (yes/no, a passage or option) declare the answer they
# enumerate; generated answers cite evidence by number only, restricted at decoding time to the numbers given.


class PassageChoice(BaseModel):
    passage: int = Field(ge=1, description="Number of the passage")


class OptionChoice(BaseModel):
    option: str = Field(description="One of the given options, verbatim")


class LetterChoice(BaseModel):
    letter: str = Field(pattern="^[A-Z]$", description="Letter of the chosen option")


class FactDraft(BaseModel):
    value: str = Field(description="The value as written in the evidence")
    unit: str = ""
    evidence: int = Field(description="Number of the evidence passage stating it")


class CalculationDraft(BaseModel):
    expression: str = Field(description="Arithmetic over the facts' values only, e.g. '9.8 - 4.2'")
    unit: str = ""


class TextDraft(BaseModel):
    answerable: bool = Field(description="False when the evidence does not answer the question")
    answer: str
    evidence: list[int] = Field(default_factory=list, description="Numbers of the passages the answer rests on")
    facts: list[FactDraft] = Field(default_factory=list)
    calculations: list[CalculationDraft] = Field(
        default_factory=list, description="Arithmetic the answer needs; Strata computes it from the facts"
    )


class RowDraft(BaseModel):
    cells: list[str]
    evidence: list[int] = Field(default_factory=list)


class TableDraft(BaseModel):
    answerable: bool
    header: list[str]
    rows: list[RowDraft] = Field(default_factory=list)


def citing_only(numbers: list[int]) -> tuple[type[TextDraft], type[TableDraft]]:
    """Answer models whose evidence numbers must be among `numbers`, so constrained decoding cannot cite others."""
    # Types built at run time: the checker sees `number` as Any and rejects models held in variables as types.
    number: Any = Literal[tuple(numbers)]
    fact = create_model("Fact", __base__=FactDraft, evidence=(number, ...))
    text = create_model(
        "TextAnswer",
        __base__=TextDraft,
        evidence=(list[number], Field(default_factory=list)),
        facts=(list[fact], Field(default_factory=list, max_length=3)),  # type: ignore[valid-type]
        calculations=(list[CalculationDraft], Field(default_factory=list, max_length=2)),
    )
    cited: tuple[Any, Any] = (list[number], Field(default_factory=list))
    row = create_model("Row", __base__=RowDraft, evidence=cited)
    rows: tuple[Any, Any] = (list[row], Field(default_factory=list))  # type: ignore[valid-type]
    table = create_model("TableAnswer", __base__=TableDraft, rows=rows)
    return text, table


@functools.cache
def read_prompts() -> PromptRegistry:
    """The reader's prompts (`strata/read/prompts/`), loaded and validated once."""
    models: list[type[BaseModel]] = [YesNo, PassageChoice, OptionChoice, LetterChoice, TextDraft, TableDraft]
    return PromptRegistry.from_directory(Path(__file__).with_name("prompts"), models)
