"""BEIR corpus JSONL (`{"_id", "title", "text"}` per line): one abstract-only paper per line.

Paper ids are the corpus `_id`s verbatim, because qrels refer to documents by them; an `_id` that would have to be
changed to be a safe paper id is an error, never silently rewritten.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from strata.config import ParsingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import safe_paper_id
from strata.documents.model import Paper
from strata.documents.parsers import ParseError
from strata.documents.parsers._structured import clean, first_json_line, iter_json_lines

# BEIR queries files also hold `_id` and `text`; only a corpus has `title`.
_CORPUS_KEYS = ("_id", "title", "text")


class BeirParser:
    name = "beir"

    def accepts(self, path: Path) -> bool:
        if not (path.suffix.lower() == ".jsonl" and path.is_file()):
            return False
        record = first_json_line(path)
        return record is not None and all(key in record for key in _CORPUS_KEYS)

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]:
        for line_number, record in iter_json_lines(path):
            yield paper_from_record(record, path, line_number, settings)


def paper_from_record(record: dict[str, Any], path: Path, line_number: int, settings: ParsingSettings) -> Paper:
    doc_id = str(record.get("_id") or "")
    if not doc_id or _safe_or_none(doc_id) != doc_id:
        raise ParseError(path, f"line {line_number}: _id {doc_id!r} is not usable verbatim as a paper id "
                               "(allowed: letters, digits, '.', '_', '-'); qrels would no longer match it")
    text = str(record.get("text") or "")
    builder = PaperBuilder(doc_id, BeirParser.name, settings.chunking)
    builder.add_block(text)
    return builder.build(title=clean(str(record.get("title") or "")), abstract=text.strip(), source_path=str(path))


def _safe_or_none(doc_id: str) -> str | None:
    try:
        return safe_paper_id(doc_id)
    except ValueError:
        return None


PARSER = BeirParser()
