"""PDF papers, read with PyMuPDF: layout in, structure out.

The stages, one module each:
  opening.py         open the file, or say why it cannot be read
  lines.py           printed lines with their fonts and positions        (layout.py: the records passed on)
  noise.py           drop line numbers, page numbers, running headers and footers
  reading.py         one reading: lines, running-text style, title, headings; a second, styled one if it is flat
  outline.py         headings from the PDF outline, located on the page
  headings.py        headings recognised by their look, ranked into levels; the reference list's heading
  tables.py          figure/table captions and tables (PyMuPDF's table finder)
  assemble.py        paragraphs, captions, equations, tables and references fed to the PaperBuilder
  reference_list.py  the reference list's lines, handed to `strata.documents.references` to split into entries
  metadata.py        title, authors, year, venue, DOI
  text.py            wording rules every stage shares (caption labels, section names, numbers)

Everything here is heuristics over layout, written by hand because no library in reach recovers a section tree from
a PDF without an outline quickly (pymupdf4llm's layout model takes 9-23 s a document).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pymupdf

from strata.config import ParsingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import find_arxiv_id, safe_paper_id
from strata.documents.model import Paper
from strata.documents.parsers import ParseError
from strata.documents.parsers.pdf.assemble import Assembler
from strata.documents.parsers.pdf.metadata import find_authors, find_doi, find_venue, find_year
from strata.documents.parsers.pdf.opening import open_document
from strata.documents.parsers.pdf.reading import read_document
from strata.documents.parsers.pdf.reference_list import LinkDois
from strata.documents.parsers.pdf.tables import find_captions, find_tables

__all__ = ["PARSER", "PdfParser", "parse_pdf"]


class PdfParser:
    name = "pdf"

    def accepts(self, path: Path) -> bool:
        return path.suffix.lower() == ".pdf" and path.is_file()

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]:
        yield parse_pdf(path, settings)


PARSER = PdfParser()


def parse_pdf(path: Path, settings: ParsingSettings) -> Paper:
    document = open_document(path)
    try:
        return _parse_document(document, path, settings)
    finally:
        document.close()


def _parse_document(document: pymupdf.Document, path: Path, settings: ParsingSettings) -> Paper:
    reading = read_document(document, path)
    captions = find_captions(reading.lines, reading.body)
    tables = find_tables(document, reading.lines, captions) if settings.pdf_tables else []
    metadata = document.metadata or {}
    first_page_text = reading.layout.first_page_text
    doi = find_doi(path, metadata, first_page_text)
    builder = PaperBuilder(safe_paper_id(path.stem), PARSER.name, settings.chunking)
    abstract = Assembler(builder, reading, captions, LinkDois(document, doi)).run(tables)
    paper = builder.build(
        title=reading.title,
        authors=find_authors(reading.lines, reading.title_lines, metadata.get("author")),
        year=find_year(first_page_text, metadata),
        venue=find_venue(metadata.get("subject")),
        doi=doi,
        arxiv_id=find_arxiv_id(first_page_text),
        abstract=abstract,
        source_path=str(path),
    )
    if not paper.chunks:
        # A title or figure labels alone (a cover page before scanned pages): stored, nothing could ever find it.
        raise ParseError(path, "no text extracted beyond a title or labels (scanned pages without a text layer?)")
    return paper
