"""S2ORC JSON, in all three layouts found in the wild.

- 2019 release: `metadata` + `grobid_parse` / `latex_parse`, each with `abstract`, `body_text`, `bib_entries`,
  `ref_entries`.
- 2020 release: flat `paper_id`, `abstract`, `body_text`, `bib_entries`, `ref_entries` (optionally `metadata`,
  `back_matter`).
- s2orc-doc2json output for PDFs: `title`, `authors`, `year`, `abstract` + `pdf_parse` with the 2020 layout, plus
  `sec_num` on each paragraph.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from strata.config import ParsingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import normalize_arxiv_id, normalize_doi, safe_paper_id
from strata.documents.model import ContentType, Paper, Reference
from strata.documents.parsers import ParseError
from strata.documents.parsers._structured import (
    HeadingLevels,
    add_abstract,
    clean,
    load_json,
    make_reference,
    open_heading,
    parse_year,
    person_name,
    sniff,
    strip_abstract_label,
    table_text,
)

_PARSE_KEYS = ("pdf_parse", "latex_parse", "grobid_parse")  # best source first: LaTeX beats GROBID's PDF reading
_CONTENT_MARKERS = ('"body_text"', *(f'"{key}"' for key in _PARSE_KEYS))


class S2orcParser:
    name = "s2orc"

    def accepts(self, path: Path) -> bool:
        """A .json file holding an S2ORC paper (checked by its keys, so other JSON files are left alone)."""
        if not (path.suffix.lower() == ".json" and path.is_file()):
            return False
        head = sniff(path).lstrip()
        return head.startswith("{") and any(marker in head for marker in _CONTENT_MARKERS)

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]:
        record = load_json(path)
        if not isinstance(record, dict) or not isinstance(_content(record).get("body_text"), list):
            raise ParseError(path, "not an S2ORC paper: no body_text list found")
        yield paper_from_record(record, path, settings)


def paper_from_record(record: dict[str, Any], path: Path, settings: ParsingSettings) -> Paper:
    content = _content(record)
    metadata = {**record, **(record.get("metadata") or {})}
    builder = PaperBuilder(_paper_id(record, path), S2orcParser.name, settings.chunking)
    abstract = _abstract(content.get("abstract") or metadata.get("abstract"))
    add_abstract(builder, abstract)
    figures = _FigureQueue(content.get("ref_entries") or {})
    _add_paragraphs(builder, content.get("body_text") or [], figures)
    _add_paragraphs(builder, content.get("back_matter") or [], figures)
    builder.close_sections()
    figures.add_remaining(builder)
    builder.references.extend(_reference(entry) for entry in (content.get("bib_entries") or {}).values())
    return builder.build(
        title=clean(metadata.get("title")),
        authors=[name for name in map(_author_name, metadata.get("authors") or []) if name],
        year=parse_year(metadata.get("year")),
        venue=clean(metadata.get("venue") or metadata.get("journal")) or None,
        doi=normalize_doi(metadata.get("doi")),
        arxiv_id=normalize_arxiv_id(metadata.get("arxiv_id")),
        abstract="\n\n".join(abstract),
        source_path=str(path),
    )


def _add_paragraphs(builder: PaperBuilder, paragraphs: list[dict[str, Any]], figures: _FigureQueue) -> None:
    """S2ORC paragraphs in order, a new heading wherever (section, sec_num) changes; figures after first mention."""
    levels = HeadingLevels()
    current: tuple[str, str | None] | None = None
    for paragraph in paragraphs:
        heading = (clean(paragraph.get("section")), paragraph.get("sec_num") or None)
        if heading != current:
            current = heading
            open_heading(builder, levels, *heading)
        builder.add_block(clean(paragraph.get("text")))
        figures.add_mentioned(builder, paragraph.get("ref_spans") or [])


class _FigureQueue:
    """Figure and table captions (ref_entries), each placed once: after the paragraph that first mentions it."""

    def __init__(self, ref_entries: dict[str, dict[str, Any]]) -> None:
        self._pending = {ref_id: entry for ref_id, entry in ref_entries.items() if isinstance(entry, dict)}

    def add_mentioned(self, builder: PaperBuilder, ref_spans: list[dict[str, Any]]) -> None:
        for span in ref_spans:
            entry = self._pending.pop(str(span.get("ref_id")), None)
            if entry is not None:
                _add_figure(builder, entry)

    def add_remaining(self, builder: PaperBuilder) -> None:
        for ref_id in list(self._pending):
            _add_figure(builder, self._pending.pop(ref_id))


def _add_figure(builder: PaperBuilder, entry: dict[str, Any]) -> None:
    kind = entry.get("type") or entry.get("type_str")
    if kind == "table":
        caption_and_cells = filter(None, [entry.get("text"), _html_table(entry.get("content"))])
        builder.add_block("\n".join(caption_and_cells), ContentType.TABLE)
    elif kind == "figure":
        builder.add_block(entry.get("text") or "", ContentType.FIGURE_CAPTION)


def _html_table(content: object) -> str:
    if not isinstance(content, str) or not content.strip():
        return ""
    try:
        return table_text(ElementTree.fromstring(content))
    except ElementTree.ParseError:
        return ""


def _content(record: dict[str, Any]) -> dict[str, Any]:
    """The part of the record that holds the paper's text."""
    parses = [parse for key in _PARSE_KEYS if isinstance(parse := record.get(key), dict)]
    with_body = [parse for parse in parses if parse.get("body_text")]
    return (with_body or parses or [record])[0]


def _paper_id(record: dict[str, Any], path: Path) -> str:
    stem = path.name.removesuffix(".json")
    raw = str(record.get("paper_id") or stem)
    # doc2json names a PDF's paper after its file name cut at the first dot ('2020.acl-main.207' -> '2020').
    if "pdf_parse" in record and stem.startswith(raw + "."):
        raw = stem
    return safe_paper_id(raw)


def _abstract(abstract: object) -> list[str]:
    if isinstance(abstract, list):
        paragraphs = [item.get("text", "") for item in abstract if isinstance(item, dict)]
    else:
        paragraphs = [str(abstract or "")]
    return [text for text in (strip_abstract_label(paragraph) for paragraph in paragraphs) if text]


def _author_name(author: object) -> str:
    if isinstance(author, dict):
        return person_name(author.get("first"), author.get("middle"), author.get("last"), author.get("suffix"))
    return clean(str(author))


def _first(values: object) -> str | None:
    if isinstance(values, list):
        return str(values[0]) if values else None
    return str(values) if values else None


def _reference(entry: dict[str, Any]) -> Reference:
    ids = {key.lower(): value for key, value in (entry.get("other_ids") or {}).items()}
    authors = ", ".join(filter(None, map(_author_name, entry.get("authors") or [])))
    composed = ". ".join(filter(None, [authors, str(entry.get("year") or ""), entry.get("title"), entry.get("venue")]))
    return make_reference(
        entry.get("raw_text") or composed,
        title=entry.get("title"),
        year=entry.get("year"),
        doi=_first(ids.get("doi")),
        arxiv_id=_first(ids.get("arxiv")),
    )


PARSER = S2orcParser()
