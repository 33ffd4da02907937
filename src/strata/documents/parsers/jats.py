"""JATS / PubMed Central XML (`*.nxml`): article metadata, nested sections, tables, figures, formulas, references."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from xml.etree.ElementTree import Element

from strata.config import ParsingSettings
from strata.documents.builder import PaperBuilder
from strata.documents.identifiers import normalize_arxiv_id, normalize_doi, safe_paper_id
from strata.documents.model import ContentType, Paper, Reference
from strata.documents.parsers import ParseError
from strata.documents.parsers._structured import (
    add_abstract,
    clean,
    element_text,
    find_or_empty,
    load_xml,
    local_name,
    make_reference,
    parse_year,
    person_name,
    sniff,
    table_text,
)

# Floating elements may sit inside a paragraph; they become blocks of their own after it.
_FLOATS = {"fig", "table-wrap", "disp-formula"}
_CITATIONS = {"element-citation", "mixed-citation", "citation", "nlm-citation"}
_SKIPPED = {"title", "label", "supplementary-material", "fn-group", "ref-list"}
_ACK_TITLE = "Acknowledgements"
_JATS_ROOT = re.compile(r"<article[\s>][\s\S]*<front>")


class JatsParser:
    name = "jats"

    def accepts(self, path: Path) -> bool:
        name = path.name.lower()
        if not path.is_file():
            return False
        if name.endswith(".nxml"):
            return True
        return name.endswith(".xml") and _JATS_ROOT.search(sniff(path)) is not None

    def parse(self, path: Path, settings: ParsingSettings) -> Iterator[Paper]:
        root = load_xml(path)
        if local_name(root) != "article":
            raise ParseError(path, f"not a JATS article: the root element is <{local_name(root)}>")
        yield paper_from_jats(root, path, settings)


def paper_from_jats(root: Element, path: Path, settings: ParsingSettings) -> Paper:
    paper_id = safe_paper_id(path.name.removesuffix(".nxml").removesuffix(".xml"))
    builder = PaperBuilder(paper_id, JatsParser.name, settings.chunking)
    meta = find_or_empty(root, "front/article-meta")
    abstract = _abstract(meta)
    add_abstract(builder, abstract)
    _add_blocks(builder, find_or_empty(root, "body"), level=1)
    _add_back_matter(builder, find_or_empty(root, "back"))
    builder.close_sections()
    for float_ in find_or_empty(root, "floats-group"):  # a publisher's figures and tables gathered after the back
        if local_name(float_) in _FLOATS:
            _add_float(builder, float_)
    builder.references.extend(_reference(ref) for ref in root.iterfind("back//ref"))
    journal = find_or_empty(root, "front/journal-meta")
    return builder.build(
        title=element_text(meta.find("title-group/article-title")),
        authors=_authors(meta),
        year=min(filter(None, (parse_year(date.findtext("year")) for date in meta.iter("pub-date"))), default=None),
        venue=element_text(journal.find(".//journal-title")) or None,
        doi=normalize_doi(_article_id(meta, "doi")),
        arxiv_id=normalize_arxiv_id(_article_id(meta, "arxiv")),
        abstract="\n\n".join(abstract),
        source_path=str(path),
    )


def _add_blocks(builder: PaperBuilder, container: Element, level: int) -> None:
    """The blocks of a body, section or box in reading order; `level` is the level its sub-sections get."""
    for element in container:
        tag = local_name(element)
        if tag in ("sec", "app"):
            _add_section(builder, element, level)
        elif tag == "p":
            _add_paragraph(builder, element)
        elif tag in _FLOATS:
            _add_float(builder, element)
        elif tag == "list":
            _add_list(builder, element)
        elif tag not in _SKIPPED:
            if len(element):
                _add_blocks(builder, element, level)
            else:
                builder.add_block(element_text(element))


def _add_section(builder: PaperBuilder, section: Element, level: int) -> None:
    if section.get("sec-type") == "supplementary-material":
        return  # only links to files we do not have
    title = element_text(section.find("title"))
    opened = None
    if title:
        label = element_text(section.find("label")) or None
        opened = builder.open_section(title, level, number=label)
    elif level == 1:
        builder.close_sections()  # an untitled top-level section: its text belongs to no section
    _add_blocks(builder, section, level + 1)
    if opened is not None:
        builder.end_section(opened)  # text after this <sec> inside its parent is the parent's again


def _add_float(builder: PaperBuilder, element: Element) -> None:
    tag = local_name(element)
    if tag == "fig":
        builder.add_block(_caption(element), ContentType.FIGURE_CAPTION)
    elif tag == "table-wrap":
        tables = "\n".join(table_text(table) for table in element.iter("table"))
        parts = [_caption(element), tables, element_text(element.find("table-wrap-foot"))]
        builder.add_block("\n".join(part for part in parts if part), ContentType.TABLE)
    else:
        tex = element.find(".//tex-math")
        # MathML leaves are single symbols; spaces keep them apart as tokens.
        formula = element_text(tex) if tex is not None else clean(" ".join(element.itertext()))
        builder.add_block(formula, ContentType.EQUATION)


def _caption(element: Element) -> str:
    """Label, caption title and caption paragraphs, kept apart by spaces."""
    caption = element.find("caption")
    parts = list(caption) if caption is not None and len(caption) else [caption]
    return clean(" ".join(element_text(part) for part in [element.find("label"), *parts]))


def _add_paragraph(builder: PaperBuilder, paragraph: Element) -> None:
    """The paragraph's own text, then the lists and floats inside it, each a block of its own (PMC writes no space
    between tags: a list left inside ran into the sentence introducing it)."""
    builder.add_block(element_text(paragraph, replace=_drop_nested))
    for nested in _nested_in(paragraph):
        _add_nested(builder, nested)


def _add_list(builder: PaperBuilder, element: Element) -> None:
    """Each item a block, a list nested in it after it (its text once, not again inside the item's)."""
    for item in element:
        if local_name(item) == "list-item":
            builder.add_block(element_text(item, replace=_drop_nested))
            for nested in _nested_in(item):
                _add_nested(builder, nested)


def _add_nested(builder: PaperBuilder, element: Element) -> None:
    if local_name(element) == "list":
        _add_list(builder, element)
    else:
        _add_float(builder, element)


_NESTED = {*_FLOATS, "list"}


def _nested_in(element: Element) -> Iterator[Element]:
    """The outermost floats and lists inside a paragraph or list item, in order."""
    for child in element:
        if local_name(child) in _NESTED:
            yield child
        else:
            yield from _nested_in(child)


def _drop_nested(element: Element) -> str | None:
    return "" if local_name(element) in _NESTED else None


def _add_back_matter(builder: PaperBuilder, back: Element) -> None:
    for element in back:
        tag = local_name(element)
        if tag == "ack":
            builder.open_section(element_text(element.find("title")) or _ACK_TITLE, level=1)
            _add_blocks(builder, element, level=2)
        elif tag in ("sec", "app", "notes"):  # notes: data availability, author contributions
            _add_section(builder, element, level=1)
        elif tag == "app-group":
            _add_blocks(builder, element, level=1)


def _abstract(meta: Element) -> list[str]:
    abstracts = meta.findall("abstract")
    plain = [abstract for abstract in abstracts if not abstract.get("abstract-type")] or abstracts
    if not plain:
        return []
    return [text for text in (element_text(p) for p in plain[0].iter("p")) if text]


def _authors(meta: Element) -> list[str]:
    names = []
    for contrib in meta.iterfind("contrib-group/contrib[@contrib-type='author']"):
        name = contrib.find("name")
        if name is not None:
            names.append(_person(name))
        else:
            names.append(element_text(contrib.find("collab")) or element_text(contrib.find("string-name")))
    return [name for name in names if name]


def _person(name: Element) -> str:
    return person_name(name.findtext("given-names"), name.findtext("surname"), name.findtext("suffix"))


def _article_id(meta: Element, kind: str) -> str | None:
    found = [element_text(article_id) for article_id in meta.iterfind(f"article-id[@pub-id-type='{kind}']")]
    return found[0] if found else None


def _reference(ref: Element) -> Reference:
    # Anywhere inside: <citation-alternatives> wraps them; a mixed citation is the reference as printed.
    found = [child for child in ref.iter() if local_name(child) in _CITATIONS]
    citation = next((c for c in found if local_name(c) == "mixed-citation"), found[0] if found else ref)
    titles = (element_text(citation.find(tag)) for tag in ("article-title", "chapter-title", "source"))
    title = next(filter(None, titles), None)
    pub_ids = {found.get("pub-id-type", "").lower(): element_text(found) for found in citation.iter("pub-id")}
    return make_reference(
        _citation_text(citation),
        title=title,
        year=citation.findtext("year"),
        doi=pub_ids.get("doi"),
        arxiv_id=pub_ids.get("arxiv"),
    )


def _citation_text(citation: Element) -> str:
    """The reference as printed: mixed citations carry their own punctuation, element citations are composed."""
    if local_name(citation) == "mixed-citation":
        return element_text(citation, replace=lambda child: _person(child) if local_name(child) == "name" else None)
    authors = ", ".join(_person(name) for name in citation.iter("name"))
    parts = [authors, citation.findtext("year"), element_text(citation.find("article-title")),
             element_text(citation.find("source")), citation.findtext("volume")]
    return ". ".join(clean(part) for part in parts if part and clean(part))


PARSER = JatsParser()
