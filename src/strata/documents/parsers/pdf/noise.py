"""Printed text that is not the paper's: preprint line-number columns, page numbers, running headers and footers,
and licence or footnote blocks a publisher repeats on every page. Recognised by repetition and position rather than
by wording, so no list of publishers is needed; dropping them keeps them out of paragraphs, headings and the title."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from itertools import pairwise

from strata.documents.parsers.pdf.layout import Fragment, Line

_MARGIN = 0.09  # top and bottom share of a page where running headers, footers and page numbers live
_BOILERPLATE_CHARS = 40  # a line this long printed again on a later page is a repeated block, not text
_PAGE_NUMBER = re.compile(r"^(?:page\s*)?\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?$|^[ivxlc]{1,6}$", re.IGNORECASE)


def without_line_numbers(fragments: list[Fragment]) -> list[Fragment]:
    """Drop line-number columns (preprints): 5+ bare integers stacked at one x position, counting up evenly."""
    columns: dict[tuple[str, int], list[tuple[float, int, int]]] = defaultdict(list)
    for index, fragment in enumerate(fragments):
        text = fragment.text
        if text.isdigit() and len(text) <= 4:
            x0, y0, x1, _ = fragment.bbox
            columns["left", round(x0 / 2)].append((y0, int(text), index))
            columns["right", round(x1 / 2)].append((y0, int(text), index))
    dropped: set[int] = set()
    for column in columns.values():
        if len(column) >= 5 and _counts_up_evenly(column):
            dropped.update(index for _, _, index in column)
    return [fragment for index, fragment in enumerate(fragments) if index not in dropped]


def _counts_up_evenly(column: list[tuple[float, int, int]]) -> bool:
    """Whether the numbers of a column, read top to bottom, mostly go up by one same step."""
    steps = Counter(b[1] - a[1] for a, b in pairwise(sorted(column)))
    step, count = steps.most_common(1)[0]
    return step > 0 and count >= 0.8 * (len(column) - 1)


def drop_noise(lines: list[Line], page_sizes: list[tuple[float, float]]) -> list[Line]:
    """Without page numbers, running headers/footers (repeated in the page margins) and other repeated stamps."""
    pages = len(page_sizes)
    masked = [_repetition_key(line.text) for line in lines]
    zones = [_margin_zone(line, page_sizes[line.page - 1][1]) for line in lines]
    margin_keys = list(zip(zones, masked, strict=True))
    position_keys = [(round(line.x0 / 4), round(line.y0 / 4), key) for line, key in zip(lines, masked, strict=True)]
    margin_pages = _pages_per_key(lines, margin_keys)
    position_pages = _pages_per_key(lines, position_keys)
    margin_repeats = 2 if pages <= 3 else 3
    position_repeats = max(3, pages // 2)
    first_page_of = _first_page_of_long_lines(lines)
    repeated = _repeated_blocks(lines, first_page_of)

    def is_noise(line: Line, margin_key: tuple[str, str], position_key: tuple[int, int, str]) -> bool:
        zone = margin_key[0]
        if zone and (_PAGE_NUMBER.match(line.text) or len(margin_pages[margin_key]) >= margin_repeats):
            return True
        if line.block in repeated and first_page_of.get(line.text, line.page) < line.page:
            return True  # a long line of a block printed again on a later page: a repeated license or footnote block
        return len(position_pages[position_key]) >= position_repeats

    return [
        line
        for line, margin_key, position_key in zip(lines, margin_keys, position_keys, strict=True)
        if not is_noise(line, margin_key, position_key)
    ]


def _first_page_of_long_lines(lines: list[Line]) -> dict[str, int]:
    first_page_of: dict[str, int] = {}
    for line in lines:
        if len(line.text) >= _BOILERPLATE_CHARS:
            first_page_of.setdefault(line.text, line.page)
    return first_page_of


def _repeated_blocks(lines: list[Line], first_page_of: dict[str, int]) -> set[int]:
    """Text blocks whose every long line was printed on an earlier page: boilerplate repeats as a whole block, while
    a paper may restate a sentence of its own mid-paragraph (the paragraph must keep it)."""
    verdicts: dict[int, bool] = {}
    for line in lines:
        if len(line.text) >= _BOILERPLATE_CHARS:
            again = first_page_of[line.text] < line.page
            verdicts[line.block] = verdicts.get(line.block, True) and again
    return {block for block, all_again in verdicts.items() if all_again}


def _pages_per_key(lines: list[Line], keys: Sequence[Hashable]) -> dict[Hashable, set[int]]:
    pages: dict[Hashable, set[int]] = defaultdict(set)
    for line, key in zip(lines, keys, strict=True):
        pages[key].add(line.page)
    return pages


def _repetition_key(text: str) -> str:
    """Text with numbers masked, so 'Page 3' and 'Page 4' or '(2024) 15:515 3' and '... 4' count as one line."""
    return re.sub(r"\d+", "#", text.lower())


def _margin_zone(line: Line, page_height: float) -> str:
    if line.y1 <= _MARGIN * page_height:
        return "top"
    if line.y0 >= (1 - _MARGIN) * page_height:
        return "bottom"
    return ""
