"""The reference list as the assembler meets it, line by line: the lines gathered so far, whether a numbered list is
over (figure legends and back matter often follow in the same print), and the typed lines handed to
`strata.documents.references` for splitting into entries, with each line's indent within its column, whether it
opens a text block, and the DOIs of hyperlinks laid over it."""

from __future__ import annotations

import re
from collections import defaultdict
from urllib.parse import parse_qsl, urlsplit

import pymupdf

from strata.documents.identifiers import normalize_doi
from strata.documents.parsers.pdf.layout import Line
from strata.documents.references import (
    PrintedReference,
    ReferenceLine,
    entry_number,
    next_entry_number,
    split_entries,
)

_REFERENCE_SIZE_SAMPLE = 30  # first lines of a reference list that set its print size
_YEAR_IN_ENTRY = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")

_Rect = tuple[float, float, float, float]


class LinkDois:
    """DOIs of the hyperlinks on a page ('Article', 'CrossRef' and 'Google Scholar' links of reference lists), read
    only for pages that print references; links to the paper itself are left out."""

    def __init__(self, document: pymupdf.Document, own_doi: str | None) -> None:
        self.document = document
        self.own_doi = own_doi
        self._by_page: dict[int, list[tuple[_Rect, str]]] = {}

    def over(self, line: Line) -> tuple[str, ...]:
        if line.page not in self._by_page:
            self._by_page[line.page] = self._read(line.page)
        return tuple(
            doi
            for (x0, y0, x1, y1), doi in self._by_page[line.page]
            if y0 < line.y1 - 1 and y1 > line.y0 + 1 and x0 < line.x1 and x1 > line.x0
        )

    def _read(self, page: int) -> list[tuple[_Rect, str]]:
        found = []
        for link in self.document[page - 1].get_links():
            doi = _link_doi(link.get("uri") or "")
            if doi and doi != self.own_doi:
                rect = link["from"]
                found.append(((rect.x0, rect.y0, rect.x1, rect.y1), doi))
        return found


def _link_doi(uri: str) -> str | None:
    """The DOI a link points to: in its path (doi.org/10...) or in a query value (scholar_lookup?doi=10...)."""
    if "10." not in uri:
        return None
    parts = urlsplit(uri)
    for candidate in (parts.path, *(value for _, value in parse_qsl(parts.query))):
        doi = normalize_doi(candidate)
        if doi:
            return doi
    return None


class ReferenceList:
    """The reference list being read: its section level, its lines so far and the running entry number."""

    def __init__(self, lines: list[Line], page_sizes: list[tuple[float, float]], links: LinkDois) -> None:
        self.page_sizes = page_sizes
        self.links = links
        self.level: int | None = None  # level of the open reference section; None outside one
        self.lines: list[Line] = []
        self.last_entry_number: int | None = None
        self.last_line_numbered: defaultdict[int, int] = defaultdict(lambda: -1)  # number -> last line opening with it
        for index, line in enumerate(lines):
            number = entry_number(line.text)
            if number is not None:
                self.last_line_numbered[number] = index

    @property
    def is_open(self) -> bool:
        return self.level is not None

    def open(self, level: int | None) -> None:
        """A section opened: a reference list at `level`, or (None) any other section."""
        self.level = level
        self.last_entry_number = None

    def close(self) -> None:
        """A numbered list is over; what follows is not in a reference section."""
        self.level = None

    def add(self, line: Line) -> None:
        self.lines.append(line)
        self.last_entry_number = next_entry_number(self.last_entry_number, line.text)

    def off_size(self, line: Line) -> bool:
        """Printed in another size than the list (figure labels and boxes set among the references)."""
        sizes = sorted(reference.size for reference in self.lines[:_REFERENCE_SIZE_SAMPLE])
        return bool(sizes) and abs(line.size - sizes[len(sizes) // 2]) > 0.6

    def numbered_list_ended(self, index: int, line: Line) -> bool:
        """After the last entry of a numbered list, a new block that opens without a number (figure legends or
        back matter in the same print) is not a reference, once that entry has its year."""
        if self.last_entry_number is None or not self.lines:
            return False
        if line.block == self.lines[-1].block or line.text[:1].islower() or entry_number(line.text):
            return False
        expected = self.last_entry_number + 1
        if max(self.last_line_numbered[expected], self.last_line_numbered[expected + 1]) > index:
            return False
        entry_lines = []
        for reference in reversed(self.lines):
            entry_lines.append(reference.text)
            if entry_number(reference.text) is not None:
                break
        return bool(_YEAR_IN_ENTRY.search(" ".join(entry_lines)))

    def take_entries(self) -> list[PrintedReference]:
        """The entries of the lines gathered so far, which are then let go."""
        if not self.lines:
            return []
        entries = split_entries(_typed_lines(self.lines, self.page_sizes, self.links))
        self.lines = []
        return entries


def _typed_lines(lines: list[Line], page_sizes: list[tuple[float, float]], links: LinkDois) -> list[ReferenceLine]:
    """Reference-list lines with their indent from their column's left edge and whether they open a text block."""
    column_starts = _column_starts(lines, page_sizes)
    typed: list[ReferenceLine] = []
    for position, line in enumerate(lines):
        column_left = max(start for start in column_starts[line.page] if start <= line.x0)
        opens_block = position == 0 or lines[position - 1].block != line.block
        typed.append(ReferenceLine(line.text, line.x0 - column_left, opens_block, line.page, links.over(line)))
    return typed


def _column_starts(lines: list[Line], page_sizes: list[tuple[float, float]]) -> dict[int, list[float]]:
    """Per page, the left edges of its columns: line starts more than a fifth of the page width apart."""
    lefts_by_page: dict[int, list[float]] = defaultdict(list)
    for line in lines:
        lefts_by_page[line.page].append(line.x0)
    column_starts: dict[int, list[float]] = {}
    for page, lefts in lefts_by_page.items():
        width = page_sizes[page - 1][0]
        starts: list[float] = []
        for left in sorted(lefts):
            if not starts or left - starts[-1] > 0.2 * width:
                starts.append(left)
        column_starts[page] = starts
    return column_starts
