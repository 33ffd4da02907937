"""Headings from the PDF outline (its bookmarks), located on the printed lines so that each section starts where its
heading is printed. Outline entries name sections exactly but point only to a page (sometimes the wrong one), so each
title is searched for as whole lines, a wrapped heading, or the bold opening of a paragraph (a run-in heading)."""

from __future__ import annotations

from typing import Any

from strata.documents.parsers.pdf.layout import MAX_HEADING_LINES, Heading, Line
from strata.documents.parsers.pdf.text import ABSTRACT_TITLE, CAPTION, match_key, split_number, unescaped


def outline_headings(toc: list[list[Any]], lines: list[Line], title_lines: set[int]) -> list[Heading]:
    """Outline entries located on the printed lines; entries that cannot be found (bookmarks to figures, anchors,
    a wrapper entry holding the whole paper) are left out."""
    entries = [(level, unescaped(str(title)), page) for level, title, page, *_ in toc]
    entries = [entry for entry in entries if entry[1] and not CAPTION.match(entry[1])]
    if len(entries) > 1 and sum(1 for level, _, _ in entries if level == entries[0][0]) == 1:
        entries = entries[1:]  # one root holding everything is the paper's title, not a section
    if not entries:
        return []
    top = min(level for level, _, _ in entries)
    keys = _LineKeys(lines)
    found: list[Heading] = []
    cursor = 0
    for level, title, page in entries:
        match = keys.locate(title, page, cursor, title_lines)
        if match is None:
            continue
        start, end, run_in = match
        number, _, text = split_number(title)
        found.append(Heading(start, end, level - top + 1, text, number, run_in=run_in, from_outline=True))
        cursor = end - 1 if run_in else end
    return found


def outline_is_deep(outline: list[Heading]) -> bool:
    """Whether the outline has real subsections, not just the parts of a structured abstract."""
    deep = 0
    parent_is_abstract = False
    for heading in outline:
        if heading.level == 1:
            parent_is_abstract = bool(ABSTRACT_TITLE.match(heading.title))
        elif not parent_is_abstract:
            deep += 1
    return deep >= 2


class _LineKeys:
    """Printed lines reduced to match keys, for finding outline titles on the page."""

    def __init__(self, lines: list[Line]) -> None:
        self.lines = lines
        self.keys = [match_key(line.text) for line in lines]
        self.unnumbered = [match_key(split_number(line.text)[2]) for line in lines]
        self.bold_prefixes = [match_key(line.bold_prefix) for line in lines]

    def locate(self, title: str, page: int, cursor: int, skip: set[int]) -> tuple[int, int, bool] | None:
        """(first line, end, run-in) of the printed heading `title`, searched near its outline page after `cursor`;
        long titles are also searched further on (outline page numbers are sometimes off)."""
        wanted = {match_key(title), match_key(split_number(title)[2])} - {""}
        if not wanted:
            return None
        found = self._search(wanted, page, cursor, skip)
        if found is None and page > 0 and len(title.split()) >= 3:
            found = self._search(wanted, 0, cursor, skip)
        return found

    def _search(self, wanted: set[str], page: int, cursor: int, skip: set[int]) -> tuple[int, int, bool] | None:
        for index in range(cursor, len(self.lines)):
            line_page = self.lines[index].page
            if page > 0 and line_page > page + 1:
                return None
            if index not in skip and (page <= 0 or line_page >= page - 1):
                found = self._match_at(wanted, index)
                if found:
                    return found
        return None

    def _match_at(self, wanted: set[str], start: int) -> tuple[int, int, bool] | None:
        """A heading printed from line `start` as whole lines (possibly wrapped), or ending in the bold opening of a
        line whose rest is running text (a run-in heading)."""
        joined = ""
        for end in range(start, min(start + MAX_HEADING_LINES, len(self.lines))):
            whole = {self.keys[end], self.unnumbered[end]} if end == start else {self.keys[end]}
            if any(joined + key in wanted for key in whole):
                return start, end + 1, False
            if self.bold_prefixes[end] and joined + self.bold_prefixes[end] in wanted:
                return start, end + 1, True
            joined += self.unnumbered[end] if end == start else self.keys[end]
            if len(joined) < 3 or not any(key.startswith(joined) for key in wanted):
                return None
        return None
