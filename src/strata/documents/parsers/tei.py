"""GROBID TEI XML (`*.tei.xml`): header metadata, numbered body divisions, figures and tables, bibliography."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from xml.etree.ElementTree import Element

from strata.config import ParsingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import normalize_arxiv_id, normalize_doi, safe_paper_id
from strata.documents.model import ContentType, Paper, Reference
from strata.documents.parsers import ParseError
from strata.documents.parsers._structured import (
    HeadingLevels,
    add_abstract,
    clean,
    element_text,
    find_or_empty,
    load_xml,
    local_name,
    make_reference,
    open_heading,
    parse_year,
    person_name,
    sniff,
    strip_abstract_label,
    table_text,
)

NS = {"t": "http://www.tei-c.org/ns/1.0"}
_TEXT_ELEMENTS = {
    "p": ContentType.TEXT,
    "note": ContentType.TEXT,
    "item": ContentType.TEXT,
    "formula": ContentType.EQUATION,
}


class TeiParser:
    name = "tei"

    def accepts(self, path: Path) -> bool:
        name = path.name.lower()
        if not (name.endswith(".xml") and path.is_file()):
            return False
        return name.endswith(".tei.xml") or "<TEI" in sniff(path)

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]:
        root = load_xml(path)
        if local_name(root) != "TEI":
            raise ParseError(path, f"not a TEI document: the root element is <{local_name(root)}>")
        yield paper_from_tei(root, path, settings)


def paper_from_tei(root: Element, path: Path, settings: ParsingSettings) -> Paper:
    paper_id = safe_paper_id(path.name.removesuffix(".xml").removesuffix(".tei"))
    builder = PaperBuilder(paper_id, TeiParser.name, settings.chunking)
    header = find_or_empty(root, "t:teiHeader", NS)
    source = find_or_empty(header, "t:fileDesc/t:sourceDesc/t:biblStruct", NS)
    abstract = _abstract(header)
    add_abstract(builder, abstract)
    _add_division(builder, find_or_empty(root, "t:text/t:body", NS), HeadingLevels(), top=True)
    back = find_or_empty(root, "t:text/t:back", NS)
    for division in back.findall("t:div", NS):
        if division.get("type") != "references":
            builder.close_sections()
            _add_division(builder, division, HeadingLevels())
    builder.references.extend(_reference(bibl) for bibl in back.iterfind(".//t:listBibl/t:biblStruct", NS))
    return builder.build(
        title=element_text(header.find("t:fileDesc/t:titleStmt/t:title", NS)),
        authors=_authors(source.findall("t:analytic/t:author", NS)),
        year=_year(source),
        venue=element_text(source.find("t:monogr/t:title", NS)) or None,
        doi=normalize_doi(_idno(source, "doi")),
        arxiv_id=normalize_arxiv_id(_idno(source, "arxiv")),
        abstract="\n\n".join(abstract),
        source_path=str(path),
    )


def _add_division(builder: PaperBuilder, division: Element, levels: HeadingLevels, top: bool = False) -> None:
    """Blocks of a body/back division in reading order; headings open sections by their `n` number."""
    for element in division:
        tag = local_name(element)
        if top and tag != "div":  # GROBID puts figures and footnotes after the last division: they have no section
            builder.close_sections()
        if tag in ("div", "list"):
            _add_division(builder, element, levels)
        elif tag == "head":
            open_heading(builder, levels, element_text(element), element.get("n"))
        elif tag in _TEXT_ELEMENTS:
            builder.add_block(element_text(element), _TEXT_ELEMENTS[tag])
        elif tag == "figure":
            _add_figure(builder, element)


def _add_figure(builder: PaperBuilder, figure: Element) -> None:
    caption = clean(" ".join(element_text(figure.find(f"t:{part}", NS)) for part in ("head", "figDesc")))
    if figure.get("type") != "table":
        builder.add_block(caption, ContentType.FIGURE_CAPTION)
        return
    table = figure.find("t:table", NS)
    parts = [caption, table_text(table) if table is not None else "", element_text(figure.find("t:note", NS))]
    builder.add_block("\n".join(part for part in parts if part), ContentType.TABLE)


def _abstract(header: Element) -> list[str]:
    abstract = header.find("t:profileDesc/t:abstract", NS)
    if abstract is None:
        return []
    paragraphs = [element_text(p) for p in abstract.iter(f"{{{NS['t']}}}p")] or [element_text(abstract)]
    return [text for text in map(strip_abstract_label, paragraphs) if text]


def _authors(authors: list[Element]) -> list[str]:
    names = []
    for author in authors:
        person = author.find("t:persName", NS)
        if person is not None:  # GROBID also lists bare affiliations as authors
            parts = [element_text(name) for name in person if local_name(name) in ("forename", "surname")]
            names.append(person_name(*parts))
    return [name for name in names if name]


def _year(bibl: Element) -> int | None:
    dates = bibl.findall(".//t:date[@type='published']", NS) or bibl.findall(".//t:date", NS)
    return next((year for date in dates if (year := parse_year(date.get("when") or element_text(date)))), None)


def _idno(bibl: Element, kind: str) -> str | None:
    return next((element_text(idno) for idno in bibl.iter(f"{{{NS['t']}}}idno")
                 if idno.get("type", "").lower() == kind), None)


def _reference(bibl: Element) -> Reference:
    title = next((element_text(found) for found in (
        bibl.find("t:analytic/t:title[@type='main']", NS),
        bibl.find("t:analytic/t:title", NS),
        bibl.find("t:monogr/t:title", NS),
    ) if found is not None), None)
    raw = element_text(bibl.find("t:note[@type='raw_reference']", NS))
    if not raw:
        authors = ", ".join(_authors(bibl.findall(".//t:author", NS)))
        raw = ". ".join(part for part in (authors, str(_year(bibl) or ""), title or "") if part)
    return make_reference(raw, title=title, year=_year(bibl), doi=_idno(bibl, "doi"), arxiv_id=_idno(bibl, "arxiv"))


PARSER = TeiParser()
