"""Where sections start and how deep they sit. The outline is used when it has real subsections; a flat outline is
completed below its level by headings recognised by their look, and without an outline those are all there is.
Recognised headings are runs of lines in a larger, bold or all-capitals style followed by running text, or bold
words opening a paragraph; their styles are ranked by prominence into levels, and a printed number ('2.1') overrides
the font. A reference list the other rules miss gets a heading too, even when the paper prints none."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from strata.documents.parsers.pdf.layout import (
    MAX_HEADING_LINES,
    Body,
    Heading,
    Line,
    Style,
    half_points,
    paragraph_break_between,
)
from strata.documents.parsers.pdf.outline import outline_headings, outline_is_deep
from strata.documents.parsers.pdf.text import CAPTION, REFERENCES_TITLE, is_canonical, split_number
from strata.documents.references import entry_number, join_lines

_SENTENCE_INSIDE = re.compile(r"[a-z]{2}[.!?]\s+[A-Z]")
_NUCLEOTIDES = re.compile(r"\b[ACGTUN]{8,}\b")  # a printed DNA/RNA sequence, not a heading
_FIRST_REFERENCE = re.compile(r"^(?:\[1\]|1\.)\s+[A-Z]")
_MAX_HEADING_WORDS = 20
_MAX_INFERRED_LEVELS = 4
_MAX_STYLE_HEADINGS = 80  # a 'heading style' used more often than this is body text in disguise (bold table cells)
_WRAPPED_SHARE = 0.6  # a heading line this wide (share of a text line) may wrap onto the next line


def find_headings(toc: list[list[Any]], lines: list[Line], body: Body, title_lines: set[int]) -> dict[int, Heading]:
    """Headings by the index of their first line."""
    outline = outline_headings(toc, lines, title_lines)
    if len(outline) >= 2 and outline_is_deep(outline):
        found = outline
    elif len(outline) >= 2:
        taken = title_lines | {index for heading in outline for index in range(heading.start, heading.end)}
        outline_style = Counter(lines[heading.start].style for heading in outline).most_common(1)[0][0]
        found = outline + _inferred_headings(lines, body, taken, below=outline_style)
    else:
        found = _inferred_headings(lines, body, title_lines, below=None)
    if not any(REFERENCES_TITLE.match(heading.title) for heading in found):
        found += _references_heading(lines, title_lines, {heading.start for heading in found})
    return {heading.start: heading for heading in sorted(found, key=lambda heading: heading.start)}


# --- recognised by their look -------------------------------------------------------------------------------------


def _inferred_headings(lines: list[Line], body: Body, taken: set[int], below: Style | None) -> list[Heading]:
    """Headings recognised by their look; with `below` (the style of a flat outline's headings) only lower levels."""
    groups = _heading_groups(lines, body, taken)
    in_groups = {index for group in groups for index in range(group.start, group.end)}
    groups += _run_in_headings(lines, body, taken | in_groups)  # ranked like printed-apart ones of their look
    if below is not None:
        groups = [group for group in groups if _look(group) < below]
    levels = _style_levels(groups, body, below_outline=below is not None)
    offset = 0 if below is None else 1
    headings = [group for group in groups if group.style in levels]
    for heading in headings:
        canonical_level, other_level = levels[_look(heading)]
        heading.level = offset + (canonical_level if is_canonical(heading.title) else other_level)
        if heading.number_depth and below is None:  # a printed number says the level better than the font
            heading.level = heading.number_depth
    return headings if below is not None else _without_front_matter(headings, lines)


def _look(group: Heading) -> Style:
    """The style of a heading recognised by its look: only outline and reference-list headings carry none."""
    assert group.style is not None
    return group.style


def _without_front_matter(headings: list[Heading], lines: list[Line]) -> list[Heading]:
    """Without 'headings' above the first standard section name of the first pages: bold author lists and
    affiliations look like headings."""
    first = next((heading for heading in sorted(headings, key=lambda h: h.start) if is_canonical(heading.title)), None)
    if first is None or lines[first.start].page > 2:
        return headings
    return [heading for heading in headings if heading.start >= first.start or is_canonical(heading.title)]


def _heading_groups(lines: list[Line], body: Body, taken: set[int]) -> list[Heading]:
    """Runs of 1-3 heading-looking lines of one style that are followed by running text."""
    is_candidate = [index not in taken and _looks_like_heading(line, body) for index, line in enumerate(lines)]
    groups: list[Heading] = []
    index = 0
    while index < len(lines):
        if not is_candidate[index]:
            index += 1
            continue
        end = index + 1
        while (
            end < len(lines)
            and end - index < MAX_HEADING_LINES
            and end not in taken
            and _continues_heading(lines[end - 1], lines[end], body)
            and not is_canonical(" ".join(line.text for line in lines[index:end]))
        ):
            end += 1
        texts = [line.text for line in lines[index:end]]
        run_in = (
            end < len(lines)
            and end not in taken
            and not is_canonical(" ".join(texts))
            and _ends_in_run_in(lines[end - 1], lines[end], body)
        )
        if run_in:  # the heading's last words open the next line, whose rest is running text
            texts.append(lines[end].bold_prefix)
        text = join_lines(texts)
        if _is_heading_text(text) and (run_in or _followed_by_text(lines, end, body, is_candidate)):
            number, depth, title = split_number(text)
            heading = Heading(index, end + run_in, 0, title.rstrip(".:"), number, run_in, lines[index].style, depth)
            groups.append(heading)
        index = end
    return groups


def _looks_like_heading(line: Line, body: Body) -> bool:
    text = line.text
    if not 2 <= len(text) <= 160 or text[0].islower() or text[-1] in ",;-" or len(text.split()) > _MAX_HEADING_WORDS:
        return False
    if not any(char.isalpha() for char in text) or CAPTION.match(text) or _NUCLEOTIDES.search(text):
        return False
    if line.size < body.size - 0.6:
        return False
    _, bold, caps = line.style
    caps = caps and not any(char.isdigit() for char in split_number(text)[2])
    return line.size >= body.size + 0.4 or (bold and not body.bold) or (caps and line.size >= body.size - 0.3)


def _right_below(previous: Line, line: Line, body: Body) -> bool:
    """`line` is printed on the same page as `previous`, no further below than a paragraph's line spacing allows."""
    gap = line.y0 - previous.y1
    return line.page == previous.page and -0.5 * line.size <= gap < body.line_gap + 0.8 * line.size


def _continues_heading(previous: Line, line: Line, body: Body) -> bool:
    """A wrapped heading's next line: same look, same page, right below."""
    return (
        line.style == previous.style
        and _right_below(previous, line, body)
        and len(line.text) <= 160
        and not CAPTION.match(line.text)
    )


def _ends_in_run_in(previous: Line, line: Line, body: Body) -> bool:
    """Whether a wrapped heading ends in the bold opening of `line`, printed right below in the same size."""
    wrapped = previous.text.endswith("-") or previous.x1 - previous.x0 >= _WRAPPED_SHARE * body.line_width
    return (
        bool(line.bold_prefix)
        and wrapped
        and abs(line.size - previous.size) < 0.3
        and _right_below(previous, line, body)
    )


def _is_heading_text(text: str) -> bool:
    return len(text.split()) <= _MAX_HEADING_WORDS + 5 and not _SENTENCE_INSIDE.search(text)


def _followed_by_text(lines: list[Line], end: int, body: Body, is_candidate: list[bool]) -> bool:
    """A heading introduces running text, possibly after a subheading (figure labels do not)."""
    heading_like = False
    for index in range(end, min(end + 2 * MAX_HEADING_LINES, len(lines))):
        line = lines[index]
        heading_like = is_candidate[index] or (heading_like and _continues_heading(lines[index - 1], line, body))
        if not heading_like:
            return abs(line.size - body.size) < 0.7 and (not line.bold or body.bold or bool(line.bold_prefix))
    return False


def _run_in_headings(lines: list[Line], body: Body, taken: set[int]) -> list[Heading]:
    """Bold words opening a paragraph, ending in '.' or ':' or of two words or more ('Cell culture. HeLa cells
    were...', 'Ethics statement  Our research...'), when a paper uses them more than once."""
    found: list[Heading] = []
    for index, line in enumerate(lines):
        prefix = line.bold_prefix.strip()
        if index in taken or not prefix or abs(line.size - body.size) > 0.7:
            continue
        title = prefix.rstrip(".: ")
        words = len(title.split())
        if not (3 <= len(title) <= 120 and title[0].isupper() and words <= 12) or CAPTION.match(title):
            continue
        if prefix[-1] not in ".:" and words < 2:
            continue
        if index > 0 and not paragraph_break_between(lines[index - 1], line):
            continue
        style = (half_points(line.size), True, False)
        found.append(Heading(index, index + 1, 0, title, None, run_in=True, style=style))
    return found if len(found) >= 2 else []


# --- levels -------------------------------------------------------------------------------------------------------


def _style_levels(groups: list[Heading], body: Body, below_outline: bool) -> dict[Style, tuple[int, int]]:
    """(level of 'Introduction'-like titles, level of other titles) per heading style, by prominence.

    Styles above the one the canonical section names use are dropped (the title, a journal banner) and so are
    styles used too often to be headings. When the canonical names are in body-size bold and that style also serves
    other titles, those are their subsections (preprints often print 'Methods' and 'Cell culture' alike)."""
    counts = Counter(_look(group) for group in groups)
    styles = sorted((style for style, count in counts.items() if count <= _MAX_STYLE_HEADINGS), reverse=True)
    canonical = [_look(group) for group in groups if is_canonical(group.title)]
    if canonical and not below_outline:
        styles = [style for style in styles if style <= max(canonical)]
    top_named = bool(canonical) and not below_outline and max(canonical)[0] <= body.size + 0.4
    levels: dict[Style, tuple[int, int]] = {}
    level = 1
    for style in styles[:_MAX_INFERRED_LEVELS]:
        named = canonical.count(style)
        split = top_named and style == max(canonical) and named >= 2 and counts[style] - named >= 2
        levels[style] = (level, level + 1 if split else level)
        level += 2 if split else 1
    return levels


# --- the reference list -------------------------------------------------------------------------------------------


def _references_heading(lines: list[Line], skip: set[int], headings: set[int]) -> list[Heading]:
    """A 'References' line the other rules missed (same font as the text, or outside a partial outline), else an
    unnamed section before the last list numbered from 1 in the second half of the paper (PNAS prints no heading)."""
    for index in range(len(lines) - 1, -1, -1):
        if index not in skip and index not in headings and REFERENCES_TITLE.match(lines[index].text):
            return [Heading(index, index + 1, 1, lines[index].text.rstrip(":"))]
    for index in range(len(lines) - 1, len(lines) // 2, -1):
        if _FIRST_REFERENCE.match(lines[index].text) and _numbered_list_follows(lines, index):
            return [Heading(index, index, 1, "References")]
    return []


def _numbered_list_follows(lines: list[Line], start: int) -> bool:
    """Entries 2 and 3 of a list numbered from the line at `start` follow within a few dozen lines."""
    return {2, 3} <= {entry_number(line.text) for line in lines[start + 1 : start + 60]}
