"""Laying the paper out: the printed lines, in reading order, fed to the `PaperBuilder` as sections (at each
heading), paragraphs, figure/table captions, equations, tables and reference entries. Lines are joined into a
paragraph until a gap, an indent, a size change or a new column after a finished sentence; short label-like runs
(figure tick marks, table cells the finder missed) are left out. The abstract is gathered on the way."""

from __future__ import annotations

import dataclasses
import re
from enum import Enum, auto

from strata.documents.builder import PaperBuilder
from strata.documents.model import ContentType
from strata.documents.parsers.pdf.layout import Heading, Line
from strata.documents.parsers.pdf.reading import Reading
from strata.documents.parsers.pdf.reference_list import LinkDois, ReferenceList
from strata.documents.parsers.pdf.tables import Table
from strata.documents.parsers.pdf.text import ABSTRACT_TITLE, REFERENCES_TITLE, SENTENCE_END, is_canonical
from strata.documents.references import join_lines, looks_like_entry_start, parse_reference

_EQUATION_NUMBER = re.compile(r"\(\s*[A-Z]?\d{1,3}[a-z]?\s*\)$")
_MATH = re.compile(r"[=<>≤≥≈∝∑∏∫√±×]")
_ABSTRACT_LABEL = re.compile(r"^abstract\b[\s:.\-]*", re.IGNORECASE)
_NOT_ABSTRACT = re.compile(r"^(?:©|\(c\)|copyright|keywords?\b|open access\b)", re.IGNORECASE)
_PROSE_WORD = re.compile(r"^[(\[\"'“‘]?[a-z][a-z'’\-]{2,}[.,;:!?)\]\"'”’]*$")
_PROSE_SHARE = 0.3
_MAX_EQUATION_CHARS = 300


class _Role(Enum):
    """What a line inside a reference list is."""

    REFERENCE = auto()
    TEXT = auto()  # set among the references but not one: a figure legend, a box, a label
    END = auto()  # the first line after a numbered list is over


class Assembler:
    """Feeds headings, paragraphs, captions, equations, tables and references to the builder in reading order."""

    def __init__(self, builder: PaperBuilder, reading: Reading, captions: dict[int, bool], links: LinkDois):
        self.builder = builder
        self.reading = reading
        self.lines = reading.lines
        self.body = reading.body
        self.captions = captions
        self.blocks_are_paragraphs = len({line.block for line in self.lines}) * 2.5 <= len(self.lines)
        self.paragraph: list[Line] = []
        self.paragraph_is_caption = False
        self.legend_in_references = False
        self.references = ReferenceList(self.lines, reading.layout.page_sizes, links)
        self.abstract: list[str] = []
        self.front_matter: list[str] = []
        self.in_abstract = False

    def run(self, tables: list[Table]) -> str:
        """Feed everything; returns the abstract."""
        headings, skip = self.reading.headings, self.reading.title_lines
        table_at = {min(table.lines): table for table in tables}
        in_table = {index for table in tables for index in table.lines}
        index = 0
        while index < len(self.lines):
            heading = headings.get(index)
            if heading and not self._inside_references(heading):
                index = self._open(heading)
                if index > heading.start:
                    continue
            if index in table_at:
                self._flush()
                self.builder.add_block(table_at[index].text, ContentType.TABLE, page=self.lines[index].page)
            if index not in skip and index not in in_table:
                self._take(index)
            index += 1
        self._flush()
        self._flush_references()
        return self._abstract()

    def _inside_references(self, heading: Heading) -> bool:
        """Headings inferred below a reference list's level are bold author names or the like, not sections; an
        outline entry or a standard section name ends the list (some outlines nest 'Acknowledgements' under
        'References', and some journals print it as a run-in heading after the list)."""
        level = self.references.level
        inside = level is not None and heading.level > level
        return inside and not (heading.from_outline or is_canonical(heading.title))

    def _open(self, heading: Heading) -> int:
        """Open the heading's section; returns the index of the first line after the heading."""
        self._flush()
        self._flush_references()
        level = heading.level if self.references.level is None else min(heading.level, self.references.level)
        section = self.builder.open_section(heading.title, level, heading.number, page=self.lines[heading.start].page)
        self.references.open(section.level if REFERENCES_TITLE.match(heading.title) else None)
        self.in_abstract = any(ABSTRACT_TITLE.match(title) for title in section.path)
        self.legend_in_references = False  # a legend inside a reference list ends with that list's section
        if heading.run_in:
            last = self.lines[heading.end - 1]
            rest = last.text[len(last.bold_prefix) :].strip()
            if rest:
                self.paragraph = [dataclasses.replace(last, text=rest, bold=False, bold_prefix="")]
                self.paragraph_is_caption = False
        return heading.end

    def _take(self, index: int) -> None:
        line = self.lines[index]
        caption = index in self.captions
        role = self._reference_role(index, caption) if self.references.is_open else _Role.TEXT
        if role is _Role.REFERENCE:
            self._flush()
            self.references.add(line)
            return
        if role is _Role.END:
            self._flush_references()
            self.builder.close_sections()  # what follows (figure legends, notes) belongs to no section
            self.references.close()
        if self.paragraph and (caption or not self._continues_paragraph(line)):
            self._flush()
        if not self.paragraph:
            self.paragraph_is_caption = caption or self.legend_in_references
        self.paragraph.append(line)

    def _reference_role(self, index: int, caption: bool) -> _Role:
        """A line of a reference list: an entry's, one set among them (a figure caption and its legend, or figure
        labels and boxes in another print size), or the first after a numbered list."""
        line = self.lines[index]
        if caption or (self.legend_in_references and not _may_continue_references(line.text)):
            self.legend_in_references = True
            return _Role.TEXT
        self.legend_in_references = False
        if self._continues_paragraph(line) or self.references.off_size(line):
            return _Role.TEXT
        return _Role.END if self.references.numbered_list_ended(index, line) else _Role.REFERENCE

    def _continues_paragraph(self, line: Line) -> bool:
        return bool(self.paragraph) and not self._starts_paragraph(self.paragraph[-1], line)

    def _starts_paragraph(self, previous: Line, line: Line) -> bool:
        if abs(line.size - previous.size) > 0.6:
            return True
        below = line.page == previous.page and line.y0 > previous.y0
        if not (below and line.x0 < previous.x1 and line.x1 > previous.x0):
            # a new column or page: a paragraph carries on after an unfinished sentence
            return bool(SENTENCE_END.search(previous.text)) or not line.text[:1].islower()
        if line.y0 - previous.y1 > self.body.line_gap + 0.6 * line.size:
            return True
        if 0.7 * line.size < line.x0 - previous.x0 < 6 * line.size:  # first-line indent
            return True
        return self.blocks_are_paragraphs and line.block != previous.block and bool(SENTENCE_END.search(previous.text))

    def _flush(self) -> None:
        if not self.paragraph:
            return
        first = self.paragraph[0]
        text = join_lines([line.text for line in self.paragraph])
        self.paragraph = []
        content_type = self._content_type(text)
        if content_type is ContentType.TEXT and not self._is_running_text(text, first):
            return
        self.builder.add_block(text, content_type, page=first.page)
        if content_type is ContentType.TEXT and not _NOT_ABSTRACT.match(text):
            if self.in_abstract:
                self.abstract.append(_ABSTRACT_LABEL.sub("", text))
            elif not self.builder.current_path:
                self.front_matter.append(_ABSTRACT_LABEL.sub("", text))

    def _content_type(self, paragraph: str) -> ContentType:
        if self.paragraph_is_caption:
            return ContentType.FIGURE_CAPTION
        if len(paragraph) <= _MAX_EQUATION_CHARS and _EQUATION_NUMBER.search(paragraph) and _MATH.search(paragraph):
            return ContentType.EQUATION
        return ContentType.TEXT

    def _is_running_text(self, text: str, first: Line) -> bool:
        """False for the labels and tick marks of a figure (or a table the finder did not take): few lower-case
        words, or a short unfinished phrase in small print."""
        small_label = len(text.split()) < 8 and not SENTENCE_END.search(text) and first.size < self.body.size - 0.5
        return _reads_like_prose(text) and not small_label

    def _flush_references(self) -> None:
        for entry in self.references.take_entries():
            self.builder.add_block(entry.text, ContentType.REFERENCE, page=entry.page)
            self.builder.references.append(parse_reference(entry.text, entry.link_dois))

    def _abstract(self) -> str:
        """The paragraphs under an 'Abstract' heading, else the first long paragraph before any section."""
        if self.abstract:
            return "\n\n".join(self.abstract)
        long_paragraphs = (text for text in self.front_matter if len(text.split()) >= 60 and text.count(". ") >= 2)
        return next(long_paragraphs, "")


def _may_continue_references(text: str) -> bool:
    """A line that could open a reference or go on with one (lower-case start): the end of a figure legend."""
    return looks_like_entry_start(text) or text[:1].islower()


def _reads_like_prose(text: str) -> bool:
    """At least a few lower-case words among the tokens: true of sentences, false of figure labels ('+ - 30 IB:FLAG')
    and of author or affiliation lists."""
    tokens = text.split()
    return sum(1 for token in tokens if _PROSE_WORD.match(token)) >= _PROSE_SHARE * len(tokens)
