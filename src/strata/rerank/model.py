"""What the reranking prompts ask the model for (listwise rankings, CoRank's document features), and their registry."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, create_model
from pydantic.json_schema import JsonDict

from strata.llm.backend import YesNo
from strata.llm.templates import PromptRegistry
from strata.llm.trace import Trace

TITLE_CHARS = 24
GIST_CHARS = 48
# A paper's first top-level sections that get a gist: main matter comes first, and each gist costs decoding time.
MAX_SECTIONS = 8

Category = Annotated[
    list[Annotated[str, Field(max_length=24)]],
    Field(min_length=1, max_length=3, description="Research field, broad to narrow"),
]
Keywords = Annotated[
    list[Annotated[str, Field(max_length=24)]], Field(min_length=1, max_length=8, description="Specific key terms")
]
Gist = Annotated[str, Field(max_length=GIST_CHARS, description="One short line on what the section says")]


class RankedIds(BaseModel):
    """A listwise answer: candidate numbers, best first."""

    ranking: list[int] = Field(description="Candidate numbers, most relevant first")


class SectionGist(BaseModel):
    title: str = Field(max_length=TITLE_CHARS, description="Section title")
    gist: Gist


class DocumentFeatures(BaseModel):
    """What the extractor writes; lengths are bounded so the grammar bounds the decoding cost."""

    category: Category
    sections: list[SectionGist] = Field(min_length=1, max_length=3, description="Main parts with a gist each")
    keywords: Keywords


class PaperFeatures(DocumentFeatures):
    """A paper's stored features: as extracted from its first words, or with its own section titles (up to
    MAX_SECTIONS of them) and a gist of each."""

    sections: list[SectionGist] = Field(min_length=1, max_length=MAX_SECTIONS)


class SectionGists(BaseModel):
    """What the extractor writes for a paper with sections: a gist per listed section, in the listed order. It
    writes no titles (the paper's own are kept), which saves their decoding and leaves none to get wrong."""

    category: Category
    gists: list[Gist] = Field(description="One gist per listed section, in order")
    keywords: Keywords


@functools.cache
def section_gists_schema(count: int) -> type[SectionGists]:
    """SectionGists whose JSON schema (hence the embedded model's grammar) admits exactly `count` gists, while
    validation takes any number: answers from an unconstrained backend are mapped back to the sections by position."""
    strict: JsonDict = {"minItems": count, "maxItems": count}
    return create_model(
        f"SectionGists{count}",
        __base__=SectionGists,
        gists=(list[Gist], Field(description=SectionGists.model_fields["gists"].description, json_schema_extra=strict)),
    )


@functools.cache
def rerank_prompts() -> PromptRegistry:
    """The reranking prompts (`strata/rerank/prompts/`), loaded and validated once."""
    return PromptRegistry.from_directory(
        Path(__file__).with_name("prompts"), [RankedIds, DocumentFeatures, SectionGists, YesNo]
    )


RANKING_PROMPTS = frozenset({"rerank_listwise", "rerank_pointwise"})  # the rest extract features, once per paper


def ranking_calls(trace: Trace) -> Trace:
    """The calls of `trace` that ranked (a reranker's per-query cost), not those that extracted features."""
    return Trace(calls=[call for call in trace.calls if call.prompt in RANKING_PROMPTS])
