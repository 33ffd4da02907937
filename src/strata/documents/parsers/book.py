"""A book folder (OpenStax export): `toc.json` (the nested table of contents) + `sections.jsonl` (one module each).

The whole book is one paper whose ToC follows `toc.json`: chapter (level 1) > module (level 2) > subsection (level 3).
A module's text marks its subsections with '## Title' lines; it is split there when those lines match the
subsection titles of the ToC, otherwise the module stays a leaf. Other files in the folder (e.g. `queries.jsonl`)
are not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from strata.config import ParsingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import safe_paper_id
from strata.documents.model import Paper
from strata.documents.parsers import ParseError
from strata.documents.parsers._structured import clean, iter_json_lines, load_json

TOC_FILE = "toc.json"
SECTIONS_FILE = "sections.jsonl"
_SUBSECTION_HEADING = re.compile(r"^## (.*)$", re.MULTILINE)
_SUBSECTION = "subsection"


class BookParser:
    name = "book"

    def accepts(self, path: Path) -> bool:
        return path.is_dir() and (path / TOC_FILE).is_file() and (path / SECTIONS_FILE).is_file()

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]:
        toc = load_json(path / TOC_FILE)
        if not isinstance(toc, dict) or not isinstance(toc.get("children"), list):
            raise ParseError(path / TOC_FILE, "not a book table of contents: expected an object with 'children'")
        modules = {str(record.get("module_id")): record for _, record in iter_json_lines(path / SECTIONS_FILE)}
        book_name = next((str(record["book"]) for record in modules.values() if record.get("book")), _folder_name(path))
        builder = PaperBuilder(safe_paper_id(book_name), self.name, settings.chunking)
        for node in toc["children"]:
            _add_node(builder, node, level=1, modules=modules)
        yield builder.build(title=clean(toc.get("title")) or book_name, source_path=str(path))


def _folder_name(path: Path) -> str:
    return path.parent.name if path.name == "derived" else path.name


def _add_node(builder: PaperBuilder, node: dict[str, Any], level: int, modules: dict[str, dict[str, Any]]) -> None:
    builder.open_section(str(node.get("title") or ""), level)
    children = node.get("children") or []
    module = modules.get(str(node.get("module_id")))
    if module is not None:
        subsection_titles = [child.get("title") or "" for child in children if child.get("type") == _SUBSECTION]
        _add_module_text(builder, str(module.get("text") or ""), subsection_titles, level)
    for child in children:
        if child.get("type") != _SUBSECTION:
            _add_node(builder, child, level + 1, modules)


def _add_module_text(builder: PaperBuilder, text: str, subsection_titles: list[str], level: int) -> None:
    headings = list(_SUBSECTION_HEADING.finditer(text))
    # Untitled subsections in the ToC have no heading line; their text simply stays with what precedes it.
    expected = [clean(title) for title in subsection_titles if clean(title)]
    if not headings or [clean(heading.group(1)) for heading in headings] != expected:
        _add_lines(builder, _SUBSECTION_HEADING.sub(r"\1", text))
        return
    _add_lines(builder, text[: headings[0].start()])
    ends = [heading.start() for heading in headings[1:]] + [len(text)]
    for heading, end in zip(headings, ends):
        title = clean(heading.group(1))
        builder.open_section(title, level + 1)
        body = text[heading.end() : end].lstrip()
        # The export repeats each subsection title at the start of its first paragraph.
        _add_lines(builder, body.removeprefix(title))


def _add_lines(builder: PaperBuilder, text: str) -> None:
    """Each line of a module's text is one paragraph."""
    for line in text.splitlines():
        builder.add_block(line)


PARSER = BookParser()
