"""Figure and table captions, and tables. A caption is a label ('Figure 2.', 'Fig. 3 |', 'Table 1:') that opens a
paragraph; it becomes its own chunk. Tables come from PyMuPDF's table finder, run only on pages that print a table
caption because it costs about a second a page; a found table replaces the lines it covers with one row per line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pymupdf

from strata.documents.parsers.pdf.layout import Body, Line, paragraph_break_between
from strata.documents.parsers.pdf.text import CAPTION, visible

_CAPTION_PUNCTUATION = set(".:|—–-")


@dataclass(slots=True)
class Table:
    text: str
    lines: set[int]  # indices of the lines it covers; the table is emitted where the first one was


def find_captions(lines: list[Line], body: Body) -> dict[int, bool]:
    """Lines that open a figure or table caption ('Figure 2.', 'Fig. 3 |', 'Table 1:', or a bold or small-print
    label) at the start of a paragraph, each with whether it captions a table printed in the paper."""
    found: dict[int, bool] = {}
    for index, line in enumerate(lines):
        match = CAPTION.match(line.text)
        if not match:
            continue
        if index and not paragraph_break_between(lines[index - 1], line):
            continue  # '... as listed in' + 'Table 1.' is a mention, not a caption
        punctuated = match.group("after") in _CAPTION_PUNCTUATION or not match.group("after")
        if punctuated or bool(line.bold_prefix) or line.bold or line.size < body.size - 0.3:
            supplementary = bool(match.group("supplement")) or match.group("number").upper().startswith("S")
            found[index] = match.group("kind").lower() == "table" and not supplementary
    return found


def find_tables(document: pymupdf.Document, lines: list[Line], captions: dict[int, bool]) -> list[Table]:
    """Tables found by PyMuPDF on the pages that print a table caption (the finder takes about a second a page)."""
    pages = sorted({lines[index].page for index, is_table in captions.items() if is_table})
    tables: list[Table] = []
    for page in pages:
        try:
            found = document[page - 1].find_tables().tables
        except Exception:  # noqa: BLE001 - a table is an extra; a finder failure must not lose the paper's text
            continue
        for table in found:
            parsed = _table(table, lines, page, captions)
            if parsed:
                tables.append(parsed)
    return tables


def _table(table: Any, lines: list[Line], page: int, captions: dict[int, bool]) -> Table | None:
    """The table's rows as text lines of '|'-separated cells, with the printed lines it covers (captions excepted)."""
    rows = [[visible(str(cell or "")) for cell in row] for row in table.extract()]
    rows = [row for row in rows if any(row)]
    if len(rows) < 2 or max(len(row) for row in rows) < 2:
        return None
    x0, y0, x1, y1 = table.bbox
    covered = {
        index
        for index, line in enumerate(lines)
        if line.page == page
        and x0 <= (line.x0 + line.x1) / 2 <= x1
        and y0 <= (line.y0 + line.y1) / 2 <= y1
        and index not in captions
    }
    if not covered:
        return None
    return Table("\n".join(" | ".join(row) for row in rows), covered)
