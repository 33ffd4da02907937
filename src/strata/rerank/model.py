"""What the reranking prompts ask the model for (listwise rankings, CoRank's document features), and their registry."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field

from strata.llm.templates import PromptRegistry


class RankedIds(BaseModel):
    """A listwise answer: candidate numbers, best first."""

    ranking: list[int] = Field(description="Candidate numbers, most relevant first")


class SectionGist(BaseModel):
    title: str = Field(max_length=24, description="Section title")
    gist: str = Field(max_length=48, description="One short line on what the section says")


class DocumentFeatures(BaseModel):
    """What the extractor writes; lengths are bounded so the grammar bounds the decoding cost."""

    category: list[Annotated[str, Field(max_length=24)]] = Field(
        min_length=1, max_length=3, description="Research field, broad to narrow"
    )
    sections: list[SectionGist] = Field(min_length=1, max_length=3, description="Main parts with a gist each")
    keywords: list[Annotated[str, Field(max_length=24)]] = Field(
        min_length=1, max_length=8, description="Specific key terms"
    )


@functools.cache
def rerank_prompts() -> PromptRegistry:
    """The reranking prompts (`strata/rerank/prompts/`), loaded and validated once."""
    return PromptRegistry.from_directory(Path(__file__).with_name("prompts"), [RankedIds, DocumentFeatures])
