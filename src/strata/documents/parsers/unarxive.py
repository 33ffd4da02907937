"""unarXive JSONL: one arXiv paper per line, S2ORC-like body with `sec_number` / `sec_type` and resolved bib ids.

unarXive replaces every formula, citation, figure and table in the text by a marker such as
`{{formula:61dfc976-...}}` or `{{cite:b9a0ebd2...}}` whose content sits in `ref_entries` / `bib_entries`. The parser
turns them back into readable text: a formula into its LaTeX, a citation into `[n]` (the n-th entry of
`Paper.references`), a figure or table into a block of its own holding the caption.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from strata.config import ParsingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import normalize_arxiv_id, normalize_doi, safe_paper_id
from strata.documents.model import ContentType, Paper, Reference
from strata.documents.parsers import ParseError
from strata.documents.parsers._structured import (
    add_abstract,
    clean,
    first_json_line,
    iter_json_lines,
    make_reference,
    number_depth,
    parse_year,
    person_name,
)
from strata.documents.references import parse_reference

_MARKER = re.compile(r"\{\{(formula|cite|figure|table):([^{}]*)\}\}")
_FLOAT_MARKER = re.compile(r"\{\{(figure|table):([^{}]*)\}\}")
_FLOAT_TYPES = {"figure": ContentType.FIGURE_CAPTION, "table": ContentType.TABLE}
_SEC_TYPE_DEPTH = {"section": 1, "subsection": 2, "subsubsection": 3}
_PARAGRAPH_DEPTH = 4  # \paragraph and other heading types: below any sectioning level
_NO_CAPTION = "NO_CAPTION"
# Longer LaTeX is a display block (or a mis-split formula); as text it would only add noise to chunks.
_MAX_FORMULA_CHARS = 200
_REQUIRED_KEYS = ("paper_id", "body_text", "bib_entries")


class UnarxiveParser:
    name = "unarxive"

    def accepts(self, path: Path) -> bool:
        if not (path.suffix.lower() == ".jsonl" and path.is_file()):
            return False
        record = first_json_line(path)
        return record is not None and all(key in record for key in _REQUIRED_KEYS)

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]:
        for line_number, record in iter_json_lines(path):
            try:
                paper = paper_from_record(record, path, settings)
            except (KeyError, TypeError, AttributeError, ValueError) as error:
                raise ParseError(path, f"line {line_number}: not a valid unarXive record: {error!r}") from error
            yield paper


def paper_from_record(record: dict[str, Any], path: Path, settings: ParsingSettings) -> Paper:
    metadata = record.get("metadata") or {}
    bib_entries: dict[str, dict[str, Any]] = record.get("bib_entries") or {}
    markers = _Markers(record.get("ref_entries") or {}, list(bib_entries))
    builder = PaperBuilder(safe_paper_id(str(record["paper_id"])), UnarxiveParser.name, settings.chunking)
    abstract = clean((record.get("abstract") or {}).get("text") or metadata.get("abstract"))
    add_abstract(builder, [abstract] if abstract else [])
    current: tuple[str, str, str] | None = None
    for paragraph in record["body_text"]:
        heading = (paragraph.get("section") or "", str(paragraph.get("sec_number") or ""), paragraph.get("sec_type"))
        if heading != current:
            current = heading
            _open_heading(builder, markers.inline(heading[0]), *heading[1:])
        for text, content_type in markers.blocks(paragraph.get("text") or ""):
            builder.add_block(text, content_type)
    builder.references.extend(_reference(entry) for entry in bib_entries.values())
    return builder.build(
        title=clean(metadata.get("title")),
        authors=_authors(metadata),
        year=parse_year((metadata.get("versions") or [{}])[0].get("created") or metadata.get("update_date")),
        venue=clean(metadata.get("journal-ref")) or None,
        doi=normalize_doi(metadata.get("doi")),
        arxiv_id=normalize_arxiv_id(str(metadata.get("id") or record["paper_id"])),
        abstract=abstract,
        source_path=str(path),
    )


def _open_heading(builder: PaperBuilder, title: str, number: str, sec_type: str | None) -> None:
    if not title:
        builder.close_sections()
        return
    depth = _SEC_TYPE_DEPTH.get(sec_type or "")
    # unarXive's sec_number counts within the parent ('1', '2'), no dotted number: the level comes from sec_type, and
    # a heading of another type (\paragraph) sits below any section, whatever its counter says.
    number_or_none = number if depth and number_depth(number) else None  # '-1' marks an unnumbered heading
    builder.open_section(title, depth or _PARAGRAPH_DEPTH, number=number_or_none)


class _Markers:
    """Turns unarXive's markers back into text."""

    def __init__(self, ref_entries: dict[str, dict[str, Any]], bib_ids: list[str]) -> None:
        self._ref_entries = ref_entries
        self._citation_numbers = {bib_id: number for number, bib_id in enumerate(bib_ids, start=1)}

    def inline(self, text: str) -> str:
        """Formulas as `$LaTeX$`, citations as `[n]`, figure and table markers dropped; whitespace collapsed."""
        return clean(_MARKER.sub(self._replace, text))

    def blocks(self, text: str) -> Iterator[tuple[str, ContentType]]:
        """A paragraph cut where a figure or table stood, each followed by a block holding its caption."""
        start = 0
        for found in _FLOAT_MARKER.finditer(text):
            yield self.inline(text[start : found.start()]), ContentType.TEXT
            caption = (self._ref_entries.get(found.group(2)) or {}).get("caption") or ""
            if caption != _NO_CAPTION:
                yield self.inline(caption), _FLOAT_TYPES[found.group(1)]
            start = found.end()
        yield self.inline(text[start:]), ContentType.TEXT

    def _replace(self, found: re.Match[str]) -> str:
        kind, ref_id = found.groups()
        if kind == "cite":
            number = self._citation_numbers.get(ref_id)
            return f"[{number}]" if number else ""
        if kind == "formula":
            latex = clean((self._ref_entries.get(ref_id) or {}).get("latex"))
            return f"${latex}$" if latex and len(latex) <= _MAX_FORMULA_CHARS else "[formula]"
        return ""


def _authors(metadata: dict[str, Any]) -> list[str]:
    parsed = metadata.get("authors_parsed") or []
    if parsed:
        return [name for name in (person_name(*reversed(author[:2]), *author[2:]) for author in parsed) if name]
    return [name for name in map(clean, re.split(r",|\band\b", metadata.get("authors") or "")) if name]


def _reference(entry: dict[str, Any]) -> Reference:
    """unarXive gives only the printed string and resolved ids; title and year are read from the string."""
    raw = entry.get("bib_entry_raw") or ""
    ids = entry.get("ids") or {}
    contained = [found.get("id") for found in entry.get("contained_arXiv_ids") or [] if isinstance(found, dict)]
    guessed = parse_reference(raw)
    return make_reference(
        raw,
        title=guessed.title,
        year=guessed.year,
        doi=ids.get("doi") or guessed.doi,
        arxiv_id=ids.get("arxiv_id") or next(filter(None, contained), None) or guessed.arxiv_id,
    )


PARSER = UnarxiveParser()
