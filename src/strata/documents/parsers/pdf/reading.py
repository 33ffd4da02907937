"""One reading of a PDF: its printed lines without noise, the style of its running text, its title and its headings.
A first reading skips MuPDF's style collection, which costs four times as much; a paper that comes out flat is read
again with it, because manuscripts may mark subheadings only by underlining or by stroking a regular font."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pymupdf

from strata.documents.parsers import ParseError
from strata.documents.parsers.pdf.headings import find_headings
from strata.documents.parsers.pdf.layout import Body, Heading, Line, body_style
from strata.documents.parsers.pdf.lines import Layout, read_layout
from strata.documents.parsers.pdf.metadata import clean_metadata_title, printed_title
from strata.documents.parsers.pdf.noise import drop_noise
from strata.documents.parsers.pdf.text import REFERENCES_TITLE

_LONG_SECTION_PAGES = 4  # a top-level section this long without subsections hints at headings the reading missed


@dataclass(slots=True)
class Reading:
    """A document's lines with their running-text style, title and headings."""

    layout: Layout
    lines: list[Line]
    body: Body
    title: str
    title_lines: set[int]
    headings: dict[int, Heading]

    @property
    def depth(self) -> int:
        return max((heading.level for heading in self.headings.values()), default=0)

    def looks_flat(self) -> bool:
        """No subsections at all, or (without an outline) a long top-level section without any: a sign that
        subheadings are marked in a way the plain reading misses."""
        if self.depth <= 1:
            return True
        if any(heading.from_outline for heading in self.headings.values()):
            return False
        ordered = sorted(self.headings.values(), key=lambda heading: heading.start)
        tops = [index for index, heading in enumerate(ordered) if heading.level == 1]
        for here, after in pairwise([*tops, len(ordered)]):
            last_page = self.lines[ordered[after].start].page if after < len(ordered) else self.lines[-1].page
            childless = after == here + 1
            long = last_page - self.lines[ordered[here].start].page >= _LONG_SECTION_PAGES
            if childless and long and not REFERENCES_TITLE.match(ordered[here].title):
                return True
        return False


def read_document(document: pymupdf.Document, path: Path) -> Reading:
    """The plain reading, or the reading with styles collected when the plain one looks flat and that one finds
    deeper or more headings."""
    reading = _read(document, path, styles=False)
    if reading.looks_flat():
        styled = _read(document, path, styles=True)
        if (styled.depth, len(styled.headings)) > (reading.depth, len(reading.headings)):
            return styled
    return reading


def _read(document: pymupdf.Document, path: Path, styles: bool) -> Reading:
    layout = read_layout(document, styles)
    lines = drop_noise(layout.lines, layout.page_sizes)
    if not lines:
        raise ParseError(path, "PDF has no extractable text (a scanned image without a text layer?)")
    body = body_style(lines)
    title, title_lines = printed_title(lines, body.size, clean_metadata_title((document.metadata or {}).get("title")))
    headings = find_headings(document.get_toc(), lines, body, title_lines)
    return Reading(layout, lines, body, title, title_lines, headings)
