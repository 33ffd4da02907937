"""The records the stages of the PDF parser hand on: a fragment of a line as PyMuPDF reports it, a printed line with
its font and position, the style of the running text, and a heading found on the lines."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from strata.documents.parsers.pdf.text import SENTENCE_END

_FAKE_SPACE_SHARE = 0.35  # a space glyph overlapped by the next glyph by more than this share of its width is kerning
MAX_HEADING_LINES = 4  # a heading wraps onto at most this many lines

Style = tuple[float, bool, bool]  # (size to half a point, bold, all capitals)


def half_points(size: float) -> float:
    """A font size rounded to half a point: sizes that differ less are one size in print."""
    return round(size * 2) / 2


@dataclass(slots=True)
class Fragment:
    """One line of a PDF text block as PyMuPDF reports it; a printed line may be several (justified words)."""

    block: int
    bbox: tuple[float, float, float, float]
    spans: list[dict[str, Any]]

    def kept_spans(self) -> list[dict[str, Any]]:
        """The spans without fake spaces: a space glyph the next glyph overlaps is kerning, not a word break (some
        publishers set 'kno' ' ' 'wn' with a zero-width space font)."""
        return [
            span
            for span, following in zip(self.spans, [*self.spans[1:], None], strict=True)
            if following is None
            or span["text"].strip()
            or following["bbox"][0] >= span["bbox"][0] + _FAKE_SPACE_SHARE * (span["bbox"][2] - span["bbox"][0])
        ]

    @property
    def text(self) -> str:
        return "".join(span["text"] for span in self.kept_spans()).strip()


@dataclass(slots=True)
class Line:
    """One printed line (fragments on one baseline of a text block, joined)."""

    text: str
    page: int  # 1-based
    x0: float
    y0: float
    x1: float
    y1: float
    size: float  # the font size most of its characters have
    bold: bool  # every visible character bold
    bold_prefix: str  # leading bold words of an otherwise regular line: a possible run-in heading
    block: int  # document-wide id of the PDF text block holding it

    @property
    def style(self) -> Style:
        """What makes headings of one level look alike."""
        letters = [char for char in self.text if char.isalpha()]
        caps = len(letters) > 3 and " " in self.text and all(char.isupper() for char in letters)  # not 'GSDMA'
        return half_points(self.size), self.bold, caps


def paragraph_break_between(previous: Line, line: Line) -> bool:
    """Whether `line` may open a paragraph after `previous`: a sentence ended, or a new text block or page began."""
    return bool(SENTENCE_END.search(previous.text)) or previous.block != line.block or previous.page != line.page


@dataclass(frozen=True, slots=True)
class Body:
    """The style of running text."""

    size: float
    bold: bool
    line_gap: float  # usual blank space between two lines of a paragraph
    line_width: float  # usual width of a full line of running text (a column's width)


def body_style(lines: list[Line]) -> Body:
    """The size most characters are printed in, whether that size is bold, and its usual line gap and width."""
    chars_by_size: Counter[float] = Counter()
    bold_chars: Counter[float] = Counter()
    for line in lines:
        size = half_points(line.size)
        chars_by_size[size] += len(line.text)
        bold_chars[size] += len(line.text) if line.bold else 0
    size = chars_by_size.most_common(1)[0][0]
    gaps = [
        line.y0 - previous.y1
        for previous, line in pairwise(lines)
        if line.page == previous.page
        and abs(line.size - size) < 0.6
        and abs(previous.size - size) < 0.6
        and -0.5 * size < line.y0 - previous.y1 < 2.5 * size
        and abs(line.x0 - previous.x0) < 2 * size
    ]
    line_gap = statistics.median(gaps) if gaps else 0.2 * size
    widths = [line.x1 - line.x0 for line in lines if abs(line.size - size) < 0.6]
    return Body(
        size=size,
        bold=bold_chars[size] > 0.5 * chars_by_size[size],
        line_gap=max(0.0, line_gap),
        line_width=statistics.median(widths) if widths else 0.0,
    )


@dataclass(slots=True)
class Heading:
    """A heading found on the printed lines; one with end == start prints nothing but opens a section the paper
    leaves unnamed (an unheaded reference list)."""

    start: int  # index of its first line
    end: int  # index after its last line
    level: int
    title: str
    number: str | None = None
    run_in: bool = False  # its last line goes on with body text after the heading's bold words
    style: Style | None = None
    number_depth: int | None = None  # level a printed number implies ('2.1' -> 2)
    from_outline: bool = False
