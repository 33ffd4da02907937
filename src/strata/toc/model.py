"""Typed data of ToC retrieval: the numbered table of contents, leaf rankings and synthetic training questions."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from strata.documents.model import Chunk
from strata.llm.templates import PromptRegistry

Split = Literal["train", "dev"]


class TocEntry(BaseModel):
    """One node of a document's ToC, numbered by position ('2.3.1' = 1st child of the 3rd child of the 2nd root)."""

    model_config = ConfigDict(frozen=True)

    number: str = Field(description="Positional number, unique within the document; printed numbers may repeat")
    title: str
    path: tuple[str, ...] = Field(description="Titles from the root down to this entry, as in Section.path")
    is_leaf: bool

    @property
    def depth(self) -> int:
        return self.number.count(".") + 1

    @property
    def label(self) -> str:
        """What a ToC retriever answers for this entry: number and title, as in the STAIR paper."""
        return f"{self.number} {self.title}"

    @property
    def answer(self) -> str:
        """What a trained ToC adapter answers for this entry: the title, then the number that keeps it unique. The
        title comes first so the choice is made on the words the ToC and the question share; with the number first,
        the digits decide and the title is forced."""
        return f"{self.title} ({self.number})"

    def is_under(self, ancestor: TocEntry) -> bool:
        return self.number == ancestor.number or self.number.startswith(ancestor.number + ".")

    def scored(self, score: float) -> ScoredLeaf:
        return ScoredLeaf(number=self.number, label=self.label, path=self.path, score=score)


class DocumentToc(BaseModel):
    """A document's ToC in reading order, with the text each leaf owns."""

    model_config = ConfigDict(extra="forbid")

    paper_id: str
    title: str
    entries: list[TocEntry]
    leaf_chunks: dict[str, list[Chunk]] = Field(
        description="Leaf number -> the chunks it owns (its own and its lead-in), in reading order"
    )

    def leaf_text(self, number: str) -> str:
        return "\n\n".join(chunk.text for chunk in self.leaf_chunks.get(number, []))

    def leaf_at(self, offset: int) -> TocEntry | None:
        """The leaf owning the chunk whose span holds character `offset` of the paper's text, if any."""
        for number, chunks in self.leaf_chunks.items():
            if any(chunk.char_start <= offset < chunk.char_end for chunk in chunks):
                return self.entry(number)
        return None

    def leaves(self) -> list[TocEntry]:
        return [entry for entry in self.entries if entry.is_leaf]

    def entry(self, number: str) -> TocEntry:
        for entry in self.entries:
            if entry.number == number:
                return entry
        raise KeyError(f"{self.paper_id}: no ToC entry numbered {number!r}")

    def children(self, parent: TocEntry | None) -> list[TocEntry]:
        depth = parent.depth + 1 if parent else 1
        return [e for e in self.entries if e.depth == depth and (parent is None or e.is_under(parent))]

    def leaves_under(self, entry: TocEntry) -> Iterator[TocEntry]:
        return (leaf for leaf in self.leaves() if leaf.is_under(entry))


class ScoredLeaf(BaseModel):
    number: str
    label: str
    path: tuple[str, ...]
    score: float = Field(description="Method's score; for LLM methods the constrained log-probability of the label")


class LeafRanking(BaseModel):
    """Leaves ranked for one question, best first."""

    query: str
    method: str
    leaves: list[ScoredLeaf]
    raw_output: str | None = Field(default=None, description="Unconstrained generation, when the method generates")
    hallucinated: bool = Field(default=False, description="The unconstrained generation names no leaf")
    seconds: float = 0.0


class LeafChoice(BaseModel):
    """The answer a ToC prompt asks for."""

    section: str = Field(description="The chosen leaf's number and title, e.g. '2.3.1 Functionalism'")


class SyntheticQuestions(BaseModel):
    """Questions written from one leaf's text (the STAIR recipe for training data)."""

    questions: list[str] = Field(min_length=1, max_length=10, description="Questions the passage answers")


class TrainingQuestion(BaseModel):
    model_config = ConfigDict(frozen=True)

    leaf: str = Field(description="Number of the leaf whose text the question was written from")
    question: str
    split: Split


class SectionTitle(BaseModel):
    """An induced ToC entry's title."""

    title: str = Field(min_length=1, max_length=120)


@functools.cache
def toc_prompts() -> PromptRegistry:
    """The ToC prompts (`strata/toc/prompts/`), loaded and validated once."""
    models: list[type[BaseModel]] = [LeafChoice, SyntheticQuestions, SectionTitle]
    return PromptRegistry.from_directory(Path(__file__).with_name("prompts"), models)
