"""What the prompts show of a paper: for listwise prompts its title and the first words of its abstract (or text); for
feature extraction also its top-level sections."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pydantic import BaseModel, Field

from strata.documents.model import ContentType, Paper
from strata.rerank.model import MAX_SECTIONS
from strata.store.protocol import PaperStore

# A single section (often just the abstract) says less than the rhetorical parts the extractor finds in the text.
MIN_SECTIONS = 2


class InputSection(BaseModel):
    title: str
    text: str


class FeatureInput(BaseModel):
    """What the feature extractor reads of a paper: its title and either its top-level sections (title and first
    words each) or, for a paper without a section tree, the first words of its body."""

    title: str
    body: str = ""
    sections: list[InputSection] = Field(default_factory=list)


@dataclass(frozen=True)
class _PaperText:
    title: str
    body: list[str]
    # (title, prose) of the top-level sections the feature extractor reads; prose as one string, as it is far smaller
    # than its list of words when a whole corpus is read at once (`strata features`, Ray ingest)
    sections: list[tuple[str, str]]


class PaperTexts:
    """Title, body and section words of stored papers, read once per paper."""

    def __init__(self, store: PaperStore) -> None:
        self.store = store
        self._papers: dict[str, _PaperText] = {}

    def _read(self, paper_id: str) -> _PaperText:
        if paper_id not in self._papers:
            paper = self.store.get_paper(paper_id)
            body = (paper.abstract or paper.text).split()
            self._papers[paper_id] = _PaperText(paper.title.strip(), body, _section_prose(paper))
        return self._papers[paper_id]

    def title(self, paper_id: str) -> str:
        return self._read(paper_id).title

    def body(self, paper_id: str) -> list[str]:
        """The abstract's words (the text's when there is no abstract)."""
        return self._read(paper_id).body

    def sections(self, paper_id: str) -> list[tuple[str, str]]:
        """(title, prose) of the paper's first top-level sections with prose; empty for a paper without them."""
        return self._read(paper_id).sections

    def passage(self, paper_id: str, words: int) -> str:
        """'Title. first `words` words of the body': the full-text representation, and (shorter) the truncated
        control."""
        paper = self._read(paper_id)
        return titled(paper.title, paper.body[:words])

    def windows(self, paper_id: str, words: int, limit: int) -> list[str]:
        """'Title. window' for up to `limit` windows of `words` words covering the body (`window_starts`); one
        window, the first words, is `passage`."""
        paper = self._read(paper_id)
        return [titled(paper.title, paper.body[start : start + words])
                for start in window_starts(len(paper.body), words, limit)]  # fmt: skip

    def document(self, paper_id: str, words: int) -> str:
        """The feature extractor's input as FeatureInput JSON: the first `words` words of the body, or of the text
        of the sections, which share them. A string, so that Ray rows carry it to workers that cannot read the
        store."""
        paper = self._read(paper_id)
        if not paper.sections:
            return FeatureInput(title=paper.title, body=" ".join(paper.body[:words])).model_dump_json()
        each = max(1, words // len(paper.sections))
        sections = [
            InputSection(title=title, text=" ".join(prose.split(maxsplit=each)[:each]))
            for title, prose in paper.sections
        ]
        return FeatureInput(title=paper.title, sections=sections).model_dump_json()

    def content_hash(self, paper_id: str) -> str:
        """Hash of what feature extraction reads. A paper with sections hashes its section titles and words behind a
        tag, so its features cached from its first words (before sections were read) are extracted again; an
        abstract-only paper keeps its hash, so its cached features stay current."""
        paper = self._read(paper_id)
        parts = [paper.title, " ".join(paper.body)]
        if paper.sections:
            parts = ["sections", paper.title, *(f"{title}\n{prose}" for title, prose in paper.sections)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def titled(title: str, words: list[str]) -> str:
    text = " ".join(words)
    return f"{title}. {text}" if title and text else title or text


def window_starts(length: int, words: int, limit: int) -> list[int]:
    """Where each of the first `limit` windows of `words` words starts, to cover a text of `length` words: back to
    back, the last one ending at the text's end so it is full (200 words in 80s: 0, 80, 120)."""
    if length <= words:
        return [0]
    return sorted({*range(0, length - words, words), length - words})[:limit]


def _section_prose(paper: Paper) -> list[tuple[str, str]]:
    """Title and prose (its subsections' included, spaces collapsed) of each of the first MAX_SECTIONS top-level
    sections that have prose: a References section, whose chunks are reference entries, has none. Empty for fewer
    than MIN_SECTIONS."""
    sections = []
    for section in paper.sections:
        prose = " ".join(
            word
            for chunk in paper.chunks
            if chunk.content_type == ContentType.TEXT and chunk.section_path[:1] == section.path
            for word in chunk.text.split()
        )
        if prose:
            sections.append((section.title, prose))
    return sections[:MAX_SECTIONS] if len(sections) >= MIN_SECTIONS else []
