"""The typed document model every stage shares.

A `Paper` owns its full text; every `Chunk` and `Locator` points into that text by character span, so a locator can
always be turned back into the exact words it names (``paper.text[start:end]``).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

LOCATOR_SEPARATOR = "#"


class ContentType(StrEnum):
    TEXT = "text"
    TABLE = "table"
    FIGURE_CAPTION = "figure_caption"
    EQUATION = "equation"
    REFERENCE = "reference"


class Section(BaseModel):
    """One node of a document's table of contents; leaves are the units ToC retrieval returns."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(description="Heading text without its number")
    number: str | None = Field(default=None, description="Heading number as printed, e.g. '3.2'")
    level: int = Field(ge=1, description="Depth in the tree, 1 for top-level sections")
    path: tuple[str, ...] = Field(description="Titles from the root down to and including this section")
    page_start: int | None = Field(default=None, description="1-based first page, when known")
    page_end: int | None = Field(default=None, description="1-based last page, when known")
    children: list[Section] = Field(default_factory=list)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> Iterator[Section]:
        """This section and all its descendants, in reading order."""
        yield self
        for child in self.children:
            yield from child.walk()


class Reference(BaseModel):
    """One entry of a paper's reference list."""

    model_config = ConfigDict(extra="forbid")

    raw: str = Field(description="The reference string as printed")
    title: str | None = None
    year: int | None = None
    doi: str | None = Field(default=None, description="Lower-cased DOI without a resolver prefix")
    arxiv_id: str | None = Field(default=None, description="arXiv id without version, e.g. '2212.01234'")
    resolved_paper_id: str | None = Field(default=None, description="In-corpus paper this reference points to")


class Locator(BaseModel):
    """Where a piece of evidence lives: paper, section, page and the exact character span of the paper's text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paper_id: str
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)
    section_path: tuple[str, ...] = ()
    page: int | None = None

    def __str__(self) -> str:
        return f"{self.paper_id}{LOCATOR_SEPARATOR}{self.char_start}-{self.char_end}"

    @classmethod
    def parse(cls, text: str) -> Locator:
        """Inverse of ``str()``; section path and page are looked up by whoever holds the paper."""
        paper_id, sep, span = text.rpartition(LOCATOR_SEPARATOR)
        start, dash, end = span.partition("-")
        if not (sep and paper_id and dash and start.isdigit() and end.isdigit()):
            raise ValueError(f"not a locator: {text!r} (expected PAPER_ID#START-END)")
        return cls(paper_id=paper_id, char_start=int(start), char_end=int(end))

    def resolve(self, paper_text: str) -> str:
        if self.char_end > len(paper_text) or self.char_start > self.char_end:
            raise ValueError(f"locator {self} is outside its paper's text ({len(paper_text)} chars)")
        return paper_text[self.char_start : self.char_end]


class Chunk(BaseModel):
    """A retrieval unit: a span of the paper's text with its content type and place in the ToC."""

    model_config = ConfigDict(extra="forbid")

    paper_id: str
    ordinal: int = Field(ge=0, description="Position of the chunk within its paper")
    text: str
    content_type: ContentType = ContentType.TEXT
    section_path: tuple[str, ...] = ()
    page: int | None = None
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)

    @property
    def id(self) -> str:
        return f"{self.paper_id}:{self.ordinal}"

    @property
    def locator(self) -> Locator:
        return Locator(
            paper_id=self.paper_id,
            char_start=self.char_start,
            char_end=self.char_end,
            section_path=self.section_path,
            page=self.page,
        )


class Paper(BaseModel):
    """A parsed document: metadata, full text, ToC, chunks and references."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Corpus-unique id; safe in URLs and locators")
    title: str = ""
    authors: list[str] = Field(default_factory=list)
    year: int | None = None
    venue: str | None = None
    doi: str | None = None
    arxiv_id: str | None = None
    abstract: str = ""
    source_format: str = Field(description="Parser that produced it, e.g. 'pdf', 's2orc', 'beir'")
    source_path: str | None = None
    text: str = Field(default="", description="Full text; chunk and locator spans index into it")
    sections: list[Section] = Field(default_factory=list, description="Top-level ToC entries")
    chunks: list[Chunk] = Field(default_factory=list)
    references: list[Reference] = Field(default_factory=list)

    def walk_sections(self) -> Iterator[Section]:
        for section in self.sections:
            yield from section.walk()

    def leaf_sections(self) -> list[Section]:
        return [section for section in self.walk_sections() if section.is_leaf]

    def toc_depth(self) -> int:
        return max((section.level for section in self.walk_sections()), default=0)


class ChunkHit(BaseModel):
    """One retrieved chunk supporting a candidate, with the locator that reproduces its text."""

    model_config = ConfigDict(extra="forbid")

    rowid: int = Field(description="Store row id of the chunk (the key of every index)")
    text: str
    content_type: ContentType = ContentType.TEXT
    locator: Locator
    score: float = Field(description="The chunk's score under the ranking's method (fused score for hybrid)")


class Candidate(BaseModel):
    """A paper in a ranking: its score, 1-based rank and best supporting chunks, best first."""

    model_config = ConfigDict(extra="forbid")

    paper_id: str
    title: str = ""
    score: float = Field(description="Score of the paper's best chunk")
    rank: int = Field(ge=1, description="1-based position in the ranking")
    chunks: list[ChunkHit] = Field(default_factory=list)


class Ranking(BaseModel):
    """Papers ranked for one query, best first; shared by search, Relate, reranking and reading."""

    model_config = ConfigDict(extra="forbid")

    query: str
    method: str = Field(description="What produced the ranking, e.g. 'bm25', 'dense', 'hybrid', 'hybrid+prf'")
    candidates: list[Candidate] = Field(default_factory=list)

    def top(self, k: int) -> Ranking:
        """The first `k` candidates as a ranking of their own."""
        return self.model_copy(update={"candidates": self.candidates[:k]})

    @property
    def paper_ids(self) -> list[str]:
        return [candidate.paper_id for candidate in self.candidates]
