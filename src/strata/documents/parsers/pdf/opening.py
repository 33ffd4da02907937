"""Opening a PDF, or saying why it cannot be read: empty, not a PDF, damaged, encrypted, truncated or without pages.
PyMuPDF repairs what it can silently, so a truncated download would otherwise parse as a shorter paper."""

from __future__ import annotations

from pathlib import Path

import pymupdf

from strata.documents.parsers import ParseError

_TAIL_BYTES = 4096  # where a complete PDF has its '%%EOF' marker


def open_document(path: Path) -> pymupdf.Document:
    """The opened document, or a `ParseError` saying why it cannot be read."""
    try:
        with path.open("rb") as handle:
            head = handle.read(1024)
            handle.seek(max(0, path.stat().st_size - _TAIL_BYTES))
            tail = handle.read()
    except OSError as error:
        raise ParseError(path, f"cannot read file: {error}") from error
    if not head:
        raise ParseError(path, "empty file (0 bytes)")
    if b"%PDF-" not in head:
        raise ParseError(path, f"not a PDF: no '%PDF-' header (file starts with {head[:16]!r})")
    try:
        document = pymupdf.open(path, filetype="pdf")
    except (pymupdf.FileDataError, pymupdf.EmptyFileError, RuntimeError) as error:
        raise ParseError(path, f"damaged PDF that PyMuPDF cannot open: {error}") from error
    problem = _document_problem(document, tail)
    if problem:
        document.close()
        raise ParseError(path, problem)
    return document


def _document_problem(document: pymupdf.Document, tail: bytes) -> str | None:
    if document.needs_pass:
        return "encrypted PDF: a password is needed to read it"
    if document.is_repaired and b"%%EOF" not in tail:
        return "truncated PDF: the file ends before its '%%EOF' marker (incomplete download or copy?)"
    if document.page_count == 0:
        return "PDF has no pages"
    return None
