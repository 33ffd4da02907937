"""Assemble a `Paper` from a stream of headings and blocks, the one place where text spans and chunks are made.

Every parser walks its format and calls `open_section` / `add_block`; the builder keeps the full text, the section
tree and the character span of every block, then cuts chunks so that ``paper.text[chunk.char_start:chunk.char_end]``
is exactly ``chunk.text``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from strata.config import ChunkingSettings
from strata.documents.model import Chunk, ContentType, Paper, Reference, Section

BLOCK_SEPARATOR = "\n\n"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


@dataclass
class _Block:
    text: str
    content_type: ContentType
    section_path: tuple[str, ...]
    page: int | None
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


class PaperBuilder:
    def __init__(self, paper_id: str, source_format: str, chunking: ChunkingSettings | None = None) -> None:
        self.paper_id = paper_id
        self.source_format = source_format
        self.chunking = chunking or ChunkingSettings()
        self._parts: list[str] = []
        self._length = 0
        self._blocks: list[_Block] = []
        self._roots: list[Section] = []
        self._open: list[Section] = []
        # The level each open section was asked for: its tree depth can be less (a level-3 heading right under a
        # level-1 one sits at depth 2), and a later heading compares with what was asked, or two level-3 siblings
        # would nest.
        self._asked: list[int] = []
        self.references: list[Reference] = []

    @property
    def current_path(self) -> tuple[str, ...]:
        return self._open[-1].path if self._open else ()

    def open_section(self, title: str, level: int, number: str | None = None, page: int | None = None) -> Section:
        """Start a section at `level` (1 = top); deeper open sections are closed first."""
        title = " ".join(title.split())
        while self._open and self._asked[-1] >= level:
            self._open.pop()
            self._asked.pop()
        parent = self._open[-1] if self._open else None
        self._asked.append(level)
        level = parent.level + 1 if parent else 1
        path = (parent.path if parent else ()) + (title,)
        section = Section(title=title, number=number, level=level, path=path, page_start=page, page_end=page)
        (parent.children if parent else self._roots).append(section)
        self._open.append(section)
        return section

    def end_section(self, section: Section) -> None:
        """Close `section` and any section still open inside it: blocks added next belong to its parent (a structured
        format's text after a subsection)."""
        at = next((index for index, opened in enumerate(self._open) if opened is section), None)
        if at is not None:
            del self._open[at:], self._asked[at:]

    def close_sections(self) -> None:
        """Blocks added after this belong to no section (e.g. back matter)."""
        self._open.clear()
        self._asked.clear()

    def add_block(self, text: str, content_type: ContentType = ContentType.TEXT, page: int | None = None) -> None:
        text = text.strip()
        if not text:
            return
        if self._parts:
            self._append(BLOCK_SEPARATOR)
        self._blocks.append(_Block(text, content_type, self.current_path, page, self._length))
        self._append(text)
        if page is not None:
            for section in self._open:
                section.page_end = max(section.page_end or page, page)
                section.page_start = section.page_start or page

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self._length += len(text)

    def build(self, **metadata: Any) -> Paper:
        """The paper, with the fields a parser read from the document (title, authors, ...), validated by `Paper`."""
        text = "".join(self._parts)
        chunks = [
            Chunk(
                paper_id=self.paper_id,
                ordinal=ordinal,
                text=text[start:end],
                content_type=first.content_type,
                section_path=first.section_path,
                page=first.page,
                char_start=start,
                char_end=end,
            )
            for ordinal, (first, start, end) in enumerate(self._chunk_spans())
        ]
        return Paper(
            id=self.paper_id,
            source_format=self.source_format,
            text=text,
            sections=self._roots,
            chunks=chunks,
            references=self.references,
            **metadata,
        )

    def _chunk_spans(self) -> list[tuple[_Block, int, int]]:
        """(first block, start, end) per chunk: short text blocks of one section merged, long blocks split."""
        spans: list[tuple[_Block, int, int]] = []
        group: list[_Block] = []
        words = 0
        for block in self._blocks:
            block_words = len(block.text.split())
            if group and not self._can_merge(group[-1], block, words + block_words):
                spans.append((group[0], group[0].start, group[-1].end))
                group, words = [], 0
            if block_words > self.chunking.max_words:
                spans.extend((block, start, end) for start, end in self._split_long(block))
                continue
            group.append(block)
            words += block_words
        if group:
            spans.append((group[0], group[0].start, group[-1].end))
        return spans

    def _can_merge(self, previous: _Block, block: _Block, total_words: int) -> bool:
        return (
            self.chunking.merge_short_blocks
            and previous.content_type == block.content_type == ContentType.TEXT
            and previous.section_path == block.section_path
            and total_words <= self.chunking.max_words
        )

    def _split_long(self, block: _Block) -> list[tuple[int, int]]:
        """Cut a long block at sentence ends into pieces of at most max_words (a single long sentence stays whole)."""
        cuts = [0] + [match.end() for match in SENTENCE_END.finditer(block.text)] + [len(block.text)]
        pieces: list[tuple[int, int]] = []
        piece_start = 0
        for previous_cut, cut in zip(cuts, cuts[1:]):
            too_long = len(block.text[piece_start:cut].split()) > self.chunking.max_words
            if too_long and previous_cut > piece_start:
                pieces.append((piece_start, previous_cut))
                piece_start = previous_cut
        pieces.append((piece_start, len(block.text)))
        return [
            (block.start + start + _leading_space(block.text[start:end]), block.start + len(block.text[:end].rstrip()))
            for start, end in pieces
            if block.text[start:end].strip()
        ]


def _leading_space(text: str) -> int:
    return len(text) - len(text.lstrip())
