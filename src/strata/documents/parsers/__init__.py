"""One dispatch over every supported format: `iter_papers(path)` yields the papers a file (or book folder) holds.

Each format lives in its own module exposing a `PARSER` object with a `name`, `accepts(path)` and
`parse(path, settings) -> Iterator[Paper]`. Most formats hold one paper per file; BEIR and unarXive JSONL hold many.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from pydantic_core import PydanticSerializationError
from strata.config import ParsingSettings
from strata.documents.model import Paper


SUPPORTED_FORMATS = "PDF, S2ORC JSON, GROBID TEI, JATS, unarXive JSONL, BEIR corpus JSONL, OpenStax book folder"


class ParseError(Exception):
    """A file could not be parsed; the message says what was wrong and where."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


class Parser(Protocol):
    name: str

    def accepts(self, path: Path) -> bool: ...

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]: ...


def _registry() -> list[Parser]:
    # Imported here so that a format's optional heavy dependency is only loaded when dispatching.
    from strata.documents.parsers import beir, book, jats, pdf, s2orc, tei, unarxive

    # Order matters: the first parser that accepts a path wins (e.g. '.tei.xml' before generic XML).
    return [book.PARSER, pdf.PARSER, tei.PARSER, jats.PARSER, unarxive.PARSER, beir.PARSER, s2orc.PARSER]


def parser_for(path: Path) -> Parser | None:
    return next((parser for parser in _registry() if parser.accepts(path)), None)


def iter_papers(path: Path | str, settings: ParsingSettings | None = None) -> Iterator[Paper]:
    """Papers held by `path`; raises `ParseError` naming the file when it cannot be read."""
    path = Path(path)
    parser = parser_for(path)
    if parser is None:
        raise ParseError(path, f"no parser accepts this file (supported: {SUPPORTED_FORMATS})")
    try:
        for paper in parser.parse(path, settings or ParsingSettings()):
            yield _storable(paper)
    except ParseError:
        raise
    except Exception as error:  # any library failure on hostile input becomes a per-file error
        raise ParseError(path, f"{parser.name} parser failed: {type(error).__name__}: {error}") from error


def _storable(paper: Paper) -> Paper:
    """`paper` with lone UTF-16 surrogates replaced by '?' and NUL characters by U+FFFD, one character for one so
    every span keeps its offsets.

    JSON escapes such as '\\ud800' decode to surrogates, which neither SQLite nor any JSON writer accepts; NUL comes
    from '\\u0000' escapes and from PDF glyphs without a Unicode mapping, and PostgreSQL text cannot hold it. Left in,
    one bad record would abort the whole ingest at the store.
    """
    try:
        storable = "\\u0000" not in paper.model_dump_json()  # JSON's NUL (a printed '\\u0000' costs a no-op pass)
    except PydanticSerializationError:
        storable = False
    return paper if storable else Paper.model_validate(_replace_unstorable(paper.model_dump()))


def _replace_unstorable(value: object) -> object:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if isinstance(value, (list, tuple)):
        return type(value)(_replace_unstorable(item) for item in value)
    if isinstance(value, dict):
        return {key: _replace_unstorable(item) for key, item in value.items()}
    return value


def parse(path: Path | str, settings: ParsingSettings | None = None) -> Paper:
    """The single paper of a one-paper file (PDF, S2ORC, TEI, JATS, book folder)."""
    papers = list(iter_papers(path, settings))
    if len(papers) != 1:
        raise ParseError(path, f"holds {len(papers)} papers; use iter_papers() for multi-paper files")
    return papers[0]


def discover(paths: Iterable[Path | str]) -> list[Path]:
    """Every parseable file or book folder under `paths`, sorted for a deterministic ingest order."""
    found: set[Path] = set()
    for root in map(Path, paths):
        if not root.exists():
            raise FileNotFoundError(f"no such file or folder: {root}")
        if parser_for(root) is not None or root.is_file():
            found.add(root)
            continue
        for candidate in root.rglob("*"):
            if candidate.is_dir() and parser_for(candidate) is not None:
                found.add(candidate)
            elif candidate.is_file() and not _inside_book(candidate) and parser_for(candidate) is not None:
                found.add(candidate)
    return sorted(found)


def _inside_book(path: Path) -> bool:
    from strata.documents.parsers import book

    return book.PARSER.accepts(path.parent)
