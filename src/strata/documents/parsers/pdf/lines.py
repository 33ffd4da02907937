"""Reading a PDF's printed lines with PyMuPDF. The fragments PyMuPDF reports on one baseline of a text block become
one line that knows its text, position, font size, boldness and leading bold words (a run-in heading); rotated text
(margin stamps, axis labels) is kept apart, and preprint line-number columns are dropped before lines are formed."""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pymupdf

from strata.documents.parsers.pdf.layout import Fragment, Line
from strata.documents.parsers.pdf.noise import without_line_numbers
from strata.documents.parsers.pdf.text import visible

_TEXT_FLAGS = pymupdf.TEXT_MEDIABOX_CLIP | pymupdf.TEXT_CID_FOR_UNKNOWN_UNICODE  # ligatures expanded: 'ﬁ' -> 'fi'
_EMPHASIS_CHAR_FLAGS = pymupdf.mupdf.FZ_STEXT_BOLD | pymupdf.mupdf.FZ_STEXT_UNDERLINE | pymupdf.mupdf.FZ_STEXT_STROKED
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi|(?:[.,\-]B|Bd|Bol)(?=$|[A-Z.\-])", re.IGNORECASE)


@dataclass(slots=True)
class Layout:
    lines: list[Line]
    page_sizes: list[tuple[float, float]]
    first_page_text: str  # everything page 1 prints, margins and stamps included (for DOI, arXiv id, year)


def read_layout(document: pymupdf.Document, styles: bool) -> Layout:
    """Every page's lines; with `styles`, underlined and stroked text is found and counts as bold."""
    flags = _TEXT_FLAGS | (pymupdf.TEXT_COLLECT_STYLES if styles else 0)
    lines: list[Line] = []
    page_sizes: list[tuple[float, float]] = []
    first_page_text = ""
    block_offset = 0
    for page in document.pages():
        content = page.get_text("dict", flags=flags)
        page_lines, stamps = _page_lines(content["blocks"], page.number + 1, block_offset)
        block_offset += len(content["blocks"])
        lines.extend(page_lines)
        page_sizes.append((page.rect.width, page.rect.height))
        if page.number == 0:
            # The rotated stamps first: arXiv's names the paper itself, while the text may cite other arXiv ids.
            first_page_text = "\n".join(stamps + [line.text for line in page_lines])
    return Layout(lines, page_sizes, first_page_text)


def _page_lines(blocks: list[dict[str, Any]], page: int, block_offset: int) -> tuple[list[Line], list[str]]:
    """Horizontal lines in content-stream order (which publishers write in reading order) and rotated text apart."""
    fragments: list[Fragment] = []
    rotated: list[str] = []
    for block_number, block in enumerate(blocks):
        for line in block.get("lines", ()):
            if not any(span["text"].strip() for span in line["spans"]):
                continue
            if abs(line["dir"][1]) > 0.2:  # vertical stamps ('Downloaded from...', arXiv id) and axis labels
                rotated.append("".join(span["text"] for span in line["spans"]))
                continue
            fragments.append(Fragment(block_offset + block_number, tuple(line["bbox"]), line["spans"]))
    return [_line_from(row, page) for row in _rows(without_line_numbers(fragments))], rotated


def _rows(fragments: list[Fragment]) -> list[list[Fragment]]:
    """Consecutive fragments of one block on one baseline (justified words, '1.' before a reference) as one row."""
    rows: list[list[Fragment]] = []
    for fragment in fragments:
        if rows and rows[-1][0].block == fragment.block and _same_baseline(rows[-1][-1], fragment):
            rows[-1].append(fragment)
        else:
            rows.append([fragment])
    return [sorted(row, key=lambda fragment: fragment.bbox[0]) for row in rows]


def _same_baseline(left: Fragment, right: Fragment) -> bool:
    height = min(left.bbox[3] - left.bbox[1], right.bbox[3] - right.bbox[1])
    middle_left = (left.bbox[1] + left.bbox[3]) / 2
    middle_right = (right.bbox[1] + right.bbox[3]) / 2
    return abs(middle_left - middle_right) < 0.4 * height


def _line_from(row: list[Fragment], page: int) -> Line:
    text = ""
    bold_end: int | None = None  # where the leading bold words end, once a regular word follows them
    all_bold = True
    chars_by_size: Counter[float] = Counter()
    previous_x1: float | None = None
    for fragment in row:
        if text and previous_x1 is not None and fragment.bbox[0] - previous_x1 > 1.0:
            text += " "
        previous_x1 = fragment.bbox[2]
        for span in fragment.kept_spans():
            visible_text = span["text"].strip()
            if visible_text:
                chars_by_size[span["size"]] += len(visible_text)
                bold = _is_bold(span)
                if not bold and all_bold and text.strip():
                    bold_end = len(text)
                all_bold = all_bold and bold
            text += span["text"]
    return Line(
        text=visible(text),
        page=page,
        x0=row[0].bbox[0],
        y0=min(fragment.bbox[1] for fragment in row),
        x1=max(fragment.bbox[2] for fragment in row),
        y1=max(fragment.bbox[3] for fragment in row),
        size=chars_by_size.most_common(1)[0][0],
        bold=all_bold,
        bold_prefix=visible(text[:bold_end]) if bold_end is not None else "",
        block=row[0].block,
    )


def _is_bold(span: dict[str, Any]) -> bool:
    """Bold by the font's flags or name, or drawn bold (MuPDF's synthetic-bold flag, a stroked outline), or
    underlined (stroke and underline are only reported when styles are collected)."""
    if span["flags"] & pymupdf.TEXT_FONT_BOLD or span.get("char_flags", 0) & _EMPHASIS_CHAR_FLAGS:
        return True
    return _bold_font_name(span["font"])


@functools.cache  # a paper uses a handful of fonts over thousands of spans
def _bold_font_name(font: str) -> bool:
    return bool(_BOLD_FONT.search(font.split("+")[-1]))
