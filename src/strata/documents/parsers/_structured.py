"""Helpers shared by the parsers of structured formats (S2ORC, unarXive, GROBID TEI, JATS, BEIR, book folders).

Heading levels come from heading numbers ('2.1' is level 2); an unnumbered heading in a numbered paper is taken as a
child of the last numbered one (GROBID's paragraph headings, e.g. 'Document Representation' inside '2.2').
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import find_arxiv_id, find_dois, normalize_arxiv_id, normalize_doi
from strata.documents.model import Reference
from strata.documents.parsers import ParseError

_YEAR = re.compile(r"\b(1[6-9]\d\d|20\d\d)\b")
_DOTTED_NUMBER = re.compile(r"^\d+(?:\.\d+)*\.?$")
# A number printed at the start of a heading: '2.1 Foo', '2. Foo', 'II. FOO', 'A. Foo', '1) Foo' (IEEE style).
_TITLE_NUMBER = re.compile(
    r"^(?:(?P<dotted>\d{1,2}(?:\.\d{1,2})+\.?|\d{1,2}\.)|(?P<roman>[IVX]{1,5})\.|(?P<letter>[A-H])\.|(?P<paren>\d{1,2})\))"
    r"\s+(?P<rest>\S.*)$"
)
_ABSTRACT_LABEL = re.compile(r"^abstract\b[\s:.\-]*", re.IGNORECASE)
_SNIFF_BYTES = 64 * 1024


def clean(text: str | None) -> str:
    """Whitespace collapsed to single spaces."""
    return " ".join((text or "").split())


def parse_year(value: object) -> int | None:
    """The first plausible year in `value` ('2011-11', 2014, 'Thu, 22 Dec 2022'), or None."""
    if isinstance(value, int):
        return value if 1600 <= value <= 2099 else None
    found = _YEAR.search(str(value or ""))
    return int(found.group(1)) if found else None


def strip_abstract_label(text: str) -> str:
    """'Abstract: We study ...' -> 'We study ...' (GROBID keeps the label in the abstract text)."""
    return _ABSTRACT_LABEL.sub("", text.strip(), count=1)


def person_name(*parts: str | list[str] | None) -> str:
    """'First Middle Last' from name parts, any of which may be missing or a list (S2ORC 'middle')."""
    words: list[str] = []
    for part in parts:
        words.extend(part if isinstance(part, list) else [part or ""])
    return clean(" ".join(words))


def make_reference(
    raw: str, *, title: str | None = None, year: object = None, doi: str | None = None, arxiv_id: str | None = None
) -> Reference:
    """A reference with normalised ids; DOI and arXiv id are also looked for in the printed string."""
    raw = clean(raw) or clean(" ".join(str(part) for part in (title, year) if part))
    dois = find_dois(raw)
    return Reference(
        raw=raw,
        title=clean(title) or None,
        year=parse_year(year),
        doi=normalize_doi(doi) or (dois[0] if dois else None),
        arxiv_id=normalize_arxiv_id(arxiv_id) or find_arxiv_id(raw),
    )


def number_depth(number: str | None) -> int | None:
    """Depth of a dotted heading number: '2' -> 1, '2.1' -> 2, '5.' -> 1, '2.1.0.1' -> 3 (zeros are skipped levels)."""
    if not number or not _DOTTED_NUMBER.match(number.strip()):
        return None
    parts = number.strip().rstrip(".").split(".")
    return max(1, sum(1 for part in parts if int(part) != 0))


def split_title_number(title: str) -> tuple[str | None, int | None, str]:
    """(number, depth, title without number) for a heading that starts with its number, else (None, None, title)."""
    found = _TITLE_NUMBER.match(title.strip())
    if not found or _is_initial(found):
        return None, None, title
    if found.group("dotted"):
        number = found.group("dotted")
        return number.rstrip("."), number_depth(number), found.group("rest")
    if found.group("roman"):
        return found.group("roman"), 1, found.group("rest")
    if found.group("letter"):
        return found.group("letter"), 2, found.group("rest")
    return found.group("paren"), 3, found.group("rest")


def _is_initial(found: re.Match[str]) -> bool:
    """A letter or roman 'number' before a lower-case word of letters is a genus initial: 'E. coli strains' (not
    'C. mRNA levels' or 'A. 3D reconstruction')."""
    word = found.group("rest").split()[0]
    return bool(found.group("roman") or found.group("letter")) and word.isalpha() and word.islower()


def split_merged_heading(title: str, number: str | None) -> list[tuple[str, str | None]]:
    """GROBID sometimes glues a section and its first subsection: ('Model 2.1 Overview', '2') -> two headings."""
    if number and number_depth(number):
        merged = re.match(rf"^(.+?)\s+({re.escape(number.rstrip('.'))}\.\d+)\.?\s+(\S.*)$", title.strip())
        if merged:
            return [(merged.group(1), number), (merged.group(3), merged.group(2))]
    return [(title, number)]


class HeadingLevels:
    """Levels of one paper's headings, in reading order."""

    def __init__(self) -> None:
        self._last_numbered_depth = 0

    def level(self, number: str | None, depth: int | None = None) -> int:
        """Level from the heading's number (or a known depth); an unnumbered one sits below the last numbered one."""
        depth = depth or number_depth(number)
        if depth:
            self._last_numbered_depth = depth
            return depth
        return self._last_numbered_depth + 1 if self._last_numbered_depth else 1


def add_abstract(builder: PaperBuilder, paragraphs: list[str]) -> None:
    """The abstract as the paper's first section, so that its sentences are chunks and can be cited.

    The section is closed again: body text that comes before the first heading belongs to no section.
    """
    if paragraphs:
        builder.open_section("Abstract", level=1)
        for paragraph in paragraphs:
            builder.add_block(paragraph)
        builder.close_sections()


def open_heading(builder: PaperBuilder, levels: HeadingLevels, title: str, number: str | None = None) -> None:
    """Open the section(s) a printed heading names; an empty heading means the blocks that follow have no section."""
    title = clean(title)
    if not title:
        builder.close_sections()
        return
    if number:
        for part_title, part_number in split_merged_heading(title, number.strip().rstrip(".") or None):
            builder.open_section(part_title, levels.level(part_number), number=part_number)
        return
    number, depth, title = split_title_number(title)
    builder.open_section(title, levels.level(number, depth), number=number)


def table_text(table: ElementTree.Element) -> str:
    """A table as text: one line per row, cells separated by ' | ' (works for HTML, JATS and TEI tables)."""
    rows = [element for element in table.iter() if local_name(element) in ("tr", "row")]
    lines = [
        " | ".join(element_text(cell) for cell in row if local_name(cell) in ("td", "th", "cell")) for row in rows
    ]
    return "\n".join(line for line in lines if line.strip(" |"))


def load_json(path: Path) -> Any:
    """The parsed JSON of `path`; a clear `ParseError` when it is not valid JSON."""
    try:
        with path.open("rb") as handle:
            return json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ParseError(path, f"invalid JSON: {error}") from error


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, record) for each non-empty line of a JSONL file; bad lines raise `ParseError`."""
    with path.open("rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise ParseError(path, f"line {line_number}: invalid JSON: {error}") from error
            if not isinstance(record, dict):
                raise ParseError(path, f"line {line_number}: expected a JSON object, got {type(record).__name__}")
            yield line_number, record


def first_json_line(path: Path) -> dict[str, Any] | None:
    """The first record of a JSONL file, or None when the file does not start with a JSON object line."""
    try:
        with path.open("rb") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None
    return None


def sniff(path: Path) -> str:
    """The first bytes of a file as text (for format detection without reading it all); '' when unreadable."""
    try:
        with path.open("rb") as handle:
            return handle.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def load_xml(path: Path) -> ElementTree.Element:
    """The root element of an XML file; a clear `ParseError` when it is not well-formed.

    The stdlib parser neither fetches external DTDs nor expands external entities, and the bundled expat limits
    entity amplification, so hostile XML cannot reach the network or blow up memory.
    """
    try:
        return ElementTree.parse(path).getroot()
    except ElementTree.ParseError as error:
        raise ParseError(path, f"invalid XML: {error}") from error


def find_or_empty(
    parent: ElementTree.Element, path: str, namespaces: dict[str, str] | None = None
) -> ElementTree.Element:
    """The element at `path`, or an empty one, so that lookups on a missing part simply find nothing."""
    found = parent.find(path, namespaces)
    return found if found is not None else ElementTree.Element("missing")


def local_name(element: ElementTree.Element) -> str:
    """Tag without its namespace: '{http://www.tei-c.org/ns/1.0}div' -> 'div'."""
    tag = element.tag
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def element_text(
    element: ElementTree.Element | None, replace: Callable[[ElementTree.Element], str | None] | None = None
) -> str:
    """All text inside `element`, whitespace collapsed; `replace(child)` may give a child's text ('' drops it)."""
    if element is None:
        return ""
    return clean("".join(_text_parts(element, replace)))


def _text_parts(
    element: ElementTree.Element, replace: Callable[[ElementTree.Element], str | None] | None
) -> Iterator[str]:
    yield element.text or ""
    for child in element:
        replacement = replace(child) if replace else None
        if replacement is None:
            yield from _text_parts(child, replace)
        else:
            yield replacement
        yield child.tail or ""
