"""Typed records of the question-anchored loop: the LLM's answers, venue/year constraints and each round."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from strata.documents.model import Ranking
from strata.llm.templates import PromptRegistry


class Subqueries(BaseModel):
    """The decomposer's answer: search queries, plus a venue or year the question restricts papers to."""

    subqueries: list[str] = Field(default_factory=list, max_length=8, description="Short search queries")
    venue: str | None = Field(default=None, description="Venue the question names, e.g. 'NeurIPS'; null if none")
    year: int | None = Field(default=None, description="Publication year the question names; null if none")


class Verdict(BaseModel):
    """The verifier's answer: does the evidence answer the question, and if not, what is still missing."""

    sufficient: bool
    missing: list[str] = Field(default_factory=list, max_length=8, description="Facts the evidence lacks")

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Two shapes: `{"sufficient": true}` and nothing more, or false with the missing facts. Under constrained
        decoding a sufficient verdict then ends after its first field instead of listing facts nothing reads (the
        0.5B wrote ~90 such tokens, ~5 s on 2 cores, in 21 of 27 LitQA2 verdicts)."""
        schema = super().model_json_schema(*args, **kwargs)
        properties = schema.pop("properties")
        enough = {"sufficient": {**properties["sufficient"], "const": True}}
        lacking = {**properties, "sufficient": {**properties["sufficient"], "const": False}}
        schema.pop("required")
        schema["anyOf"] = [
            {"type": "object", "properties": enough, "required": ["sufficient"], "additionalProperties": False},
            {"type": "object", "properties": lacking, "required": ["sufficient", "missing"], "additionalProperties": False},
        ]
        return schema


class Constraints(BaseModel):
    """Venue and year restrictions named by the question; empty when it names none."""

    model_config = ConfigDict(extra="forbid")

    venues: list[str] = Field(default_factory=list, description="Canonical venue names, e.g. 'NeurIPS'")
    years: list[int] = Field(default_factory=list, description="Exact publication years")
    year_min: int | None = Field(default=None, description="Earliest publication year (inclusive)")
    year_max: int | None = Field(default=None, description="Latest publication year (inclusive)")

    @property
    def empty(self) -> bool:
        return not (self.venues or self.years or self.year_min or self.year_max)

    def describe(self) -> str:
        """One line for the prompts, e.g. 'venue NeurIPS; year 2023'."""
        parts = []
        if self.venues:
            parts.append("venue " + " or ".join(self.venues))
        if self.years:
            parts.append("year " + " or ".join(str(year) for year in self.years))
        if self.year_min is not None:
            parts.append(f"published in or after {self.year_min}")
        if self.year_max is not None:
            parts.append(f"published in or before {self.year_max}")
        return "; ".join(parts)


StopReason = Literal["sufficient", "no_new_subquery", "max_rounds", "no_llm", "verifier_failed"]


class SubqueryResult(BaseModel):
    """One subquery's search after reranking, with the papers its constraints removed."""

    model_config = ConfigDict(extra="forbid")

    query: str
    ranking: Ranking
    filtered_out: int = Field(default=0, description="Papers dropped for contradicting the question's venue/year")


class RetrievalRound(BaseModel):
    """What one round asked, found and concluded."""

    model_config = ConfigDict(extra="forbid")

    number: int = Field(ge=1)
    queries: list[str] = Field(description="Subqueries searched in this round, in order")
    results: list[SubqueryResult] = Field(default_factory=list)
    pooled: list[str] = Field(default_factory=list, description="Paper ids of Ranking A after this round, best first")
    verdict: Verdict | None = Field(
        default=None,
        description="The verifier's answer; None without an LLM, in the last round (nothing left to decide) or when "
        "its answer did not parse",
    )


class RetrievalRun(BaseModel):
    """The whole question-anchored retrieval: constraints, every round, why it stopped, and Ranking A."""

    model_config = ConfigDict(extra="forbid")

    question: str
    constraints: Constraints
    rounds: list[RetrievalRound]
    stop_reason: StopReason
    ranking: Ranking = Field(description="Ranking A: the subquery rankings fused, best first")


@functools.cache
def retrieve_prompts() -> PromptRegistry:
    """The loop's prompts (`strata/retrieve/prompts/`), loaded and validated once."""
    return PromptRegistry.from_directory(Path(__file__).with_name("prompts"), [Subqueries, Verdict])
