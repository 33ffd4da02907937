"""What the reader produces: an answer whose every claim cites validated evidence from the corpus."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from strata.documents.model import Ranking
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


class Answer(BaseModel):
    """The answer to one question. `supported` is False when validation removed what the answer rested on."""

    question: str
    format: AnswerFormat = "text"
    text: str = Field(description="The answer as prose; 'Cannot answer from this corpus.' is a valid answer")
    choice: str | None = Field(default=None, description="Multiple choice: the selected option, verbatim")
    table: list[list[str]] | None = Field(default=None, description="Table answers: rows, the first one the header")
    claims: list[Claim] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    supported: bool = Field(default=True, description="Every kept claim has validated evidence")
    answerable: bool = Field(default=True, description="False when the corpus does not answer the question")
    dropped_claims: int = Field(default=0, ge=0, description="Claims removed because their evidence failed validation")


class StageEvent(BaseModel):
    """Progress of one pipeline stage, streamed to the web page and printed by `strata ask --trace`."""

    stage: Literal["retrieve", "relate", "rerank", "read", "synthesize", "validate"]
    status: Literal["started", "done", "failed"]
    detail: str = Field(default="", description="Short human-readable progress, e.g. 'round 2: 4 subqueries'")
    elapsed_s: float = Field(default=0.0, ge=0, description="Seconds since the question arrived")


class AskResult(BaseModel):
    """Everything `strata ask` (and POST /ask) returns: the answer, the candidates it read and the per-question trace."""

    answer: Answer
    candidates: Ranking = Field(description="The papers the reader was given (Retrieve + Relate, reranked)")
    events: list[StageEvent] = Field(default_factory=list)
    trace: Trace = Field(default_factory=Trace, description="Every LLM call made for this question")
    wall_s: float = Field(default=0.0, ge=0)
