"""The PDF parser on a synthetic paper, on the 39 LitQA2 papers, on two ACL papers, and on broken files."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pymupdf
import pytest

from strata.config import ParsingSettings
from strata.documents.identifiers import find_dois, normalize_title, safe_paper_id
from strata.documents.model import ContentType, Paper
from strata.documents.parsers import ParseError, iter_papers, parse

LITQA2_COUNT = 39
NO_TABLES = ParsingSettings(pdf_tables=False)  # the table finder has its own (slower) test


@pytest.fixture(scope="module")
def litqa2(shared_data: Path) -> dict[str, Paper]:
    """Every LitQA2 PDF parsed once for the whole module, by file stem."""
    pdfs = sorted((shared_data / "litqa2" / "pdfs").glob("*.pdf"))
    assert len(pdfs) == LITQA2_COUNT
    return {path.stem: parse(path, NO_TABLES) for path in pdfs}


# --- a synthetic paper: exact expectations -------------------------------------------------------------------------

_SENTENCE = "The cells were grown in rich medium and the proteins were measured at every time point of the study. "


def _write_paper(path: Path) -> None:
    """Three pages: running header and page number on each, a title, numbered headings in two sizes, references."""
    document = pymupdf.open()
    flow = [
        ("title", "A Synthetic Study of Parsing Printed Papers"),
        ("h1", "1 Introduction"),
        ("text", _SENTENCE * 6),
        ("h2", "1.1 Background"),
        ("text", _SENTENCE * 8),
        ("h1", "2 Methods"),
        ("text", _SENTENCE * 9),
        ("h2", "2.1 Data collection"),
        ("text", _SENTENCE * 5),
        ("text", "y = a x + b (1)"),
        ("text", _SENTENCE * 4),
        ("h1", "References"),
        ("text", "[1] Smith J, Doe K. Parsing papers with care. J Test. 2019;1:2. doi:10.1234/jt.2019.1"),
        ("text", "[2] Lee M. Another study of layout. Nature. 2020;5:3. doi:10.1234/nat.2020.5"),
    ]
    styles = {"title": ("hebo", 18), "h1": ("hebo", 14), "h2": ("hebo", 12), "text": ("helv", 10)}
    page, y = None, 0.0
    for kind, text in flow:
        font, size = styles[kind]
        for line in _wrap(text, 95 if kind == "text" else 60):
            if page is None or y > 760:
                page = document.new_page(width=595, height=842)
                page.insert_text((72, 40), "Journal of Synthetic Tests, 2024", fontname="helv", fontsize=8)
                page.insert_text((290, 815), str(document.page_count), fontname="helv", fontsize=8)
                y = 90.0
            page.insert_text((72, y), line, fontname=font, fontsize=size)
            y += size * 1.3
        y += 10
    document.save(path)
    document.close()


def _wrap(text: str, width: int) -> list[str]:
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + len(word) + 1 > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return [*lines, current]


def test_synthetic_paper_structure_headers_and_references(tmp_path: Path):
    path = tmp_path / "synthetic-paper.pdf"
    _write_paper(path)
    paper = parse(path)

    assert paper.id == "synthetic-paper"
    assert paper.title == "A Synthetic Study of Parsing Printed Papers"
    tree = [(section.title, section.number, [child.title for child in section.children]) for section in paper.sections]
    assert tree == [
        ("Introduction", "1", ["Background"]),
        ("Methods", "2", ["Data collection"]),
        ("References", None, []),
    ]
    assert "Journal of Synthetic Tests" not in paper.text
    assert not re.search(r"(?m)^\d+$", paper.text.replace("\n\n", "\n"))  # no bare page numbers
    assert [(reference.doi, reference.year) for reference in paper.references] == [
        ("10.1234/jt.2019.1", 2019),
        ("10.1234/nat.2020.5", 2020),
    ]
    references = [chunk for chunk in paper.chunks if chunk.content_type is ContentType.REFERENCE]
    assert [chunk.section_path for chunk in references] == [("References",), ("References",)]
    data_chunks = [chunk for chunk in paper.chunks if chunk.section_path == ("Methods", "Data collection")]
    assert [chunk.content_type for chunk in data_chunks] == [ContentType.TEXT, ContentType.EQUATION, ContentType.TEXT]
    assert data_chunks[1].text == "y = a x + b (1)"
    assert data_chunks[2].text.startswith("The cells were grown")


def test_a_short_page_printed_in_one_size_keeps_its_text(tmp_path: Path):
    # Its largest text is all of its text: taken for the title, it left a paper without chunks.
    sentences = [
        "Zinc finger proteins bind DNA in a sequence specific manner.",
        "We measured the binding of twelve variants in yeast cells.",
        "The strongest binder doubled the expression of the reporter.",
    ]
    path = tmp_path / "note.pdf"
    document = pymupdf.open()
    page = document.new_page(width=595, height=842)
    for number, sentence in enumerate(sentences):
        page.insert_text((72, 90 + 14 * number), sentence, fontname="helv", fontsize=11)
    document.save(path)
    document.close()
    paper = parse(path)

    assert paper.title == ""
    assert paper.text == " ".join(sentences)
    assert [chunk.text for chunk in paper.chunks] == [paper.text]


# --- the 39 LitQA2 papers ------------------------------------------------------------------------------------------


def test_ids_and_dois_come_from_the_url_encoded_file_names(litqa2: dict[str, Paper]):
    for stem, paper in litqa2.items():
        assert paper.id == safe_paper_id(stem)
        assert paper.doi == unquote(stem).lower()
        assert paper.source_format == "pdf"
    assert litqa2["10.1093%2Fnar%2Fgkae069"].id == "10.1093_nar_gkae069"


def test_every_paper_has_a_multi_level_section_tree(litqa2: dict[str, Paper]):
    for stem, paper in litqa2.items():
        assert paper.toc_depth() >= 2, stem
        assert len(list(paper.walk_sections())) >= 8, stem
        top_titles = {section.title.lower() for section in paper.sections}
        standard = {"introduction", "background", "results", "discussion", "methods", "materials and methods"}
        assert top_titles & standard or any(title.startswith("references") for title in top_titles), stem


def test_chunk_spans_reproduce_the_text_exactly(litqa2: dict[str, Paper]):
    for paper in litqa2.values():
        assert paper.chunks
        for chunk in paper.chunks:
            assert paper.text[chunk.char_start : chunk.char_end] == chunk.text


def test_references_are_split_with_dois_years_and_titles(litqa2: dict[str, Paper]):
    with_many_dois = 0
    references = [reference for paper in litqa2.values() for reference in paper.references]
    for stem, paper in litqa2.items():
        assert len(paper.references) >= 20, stem
        chunks = [chunk for chunk in paper.chunks if chunk.content_type is ContentType.REFERENCE]
        assert len(chunks) >= len(paper.references), stem
        printed = [reference for reference in paper.references if find_dois(reference.raw)]
        # the printed DOI, or the link DOI that completes one cut at a line end ('10.1038/nchem' + 'bio.780')
        matched = [reference for reference in printed if (reference.doi or "").startswith(find_dois(reference.raw)[0])]
        assert len(matched) >= 0.95 * len(printed), stem
        with_many_dois += sum(1 for reference in paper.references if reference.doi) >= 20
        numbers = [int(found.group(1)) for r in paper.references if (found := re.match(r"\[?(\d+)[.\]]\s", r.raw))]
        if numbers and numbers[0] == 1:  # a numbered list: entries are neither lost nor split
            assert abs(len(paper.references) - max(numbers)) <= 2, stem
    assert with_many_dois >= 10
    assert sum(1 for reference in references if reference.year) >= 0.95 * len(references)
    assert sum(1 for reference in references if reference.title) >= 0.9 * len(references)
    preprint = litqa2["10.1101%2F2024.02.13.580051"]
    assert sum(1 for reference in preprint.references if reference.doi) >= 90


def test_no_running_headers_footers_or_page_numbers_remain(litqa2: dict[str, Paper]):
    stamps = re.compile(
        r"The copyright holder for this preprint|Downloaded from https?://academic\.oup\.com"
        r"|Nature Communications\s*\|\s*\(\d{4}\)|Page \d+ of \d+"
    )
    for stem, paper in litqa2.items():
        assert not stamps.search(paper.text), stem
        pages = max(chunk.page or 0 for chunk in paper.chunks)
        short_blocks = Counter(
            re.sub(r"\d+", "#", block) for block in paper.text.split("\n\n") if len(block.split()) <= 15
        )
        repeated = [block for block, count in short_blocks.items() if count >= max(3, pages // 2)]
        assert not repeated, (stem, repeated)


def test_preprint_line_numbers_are_removed(litqa2: dict[str, Paper]):
    paper = litqa2["10.1101%2F2024.05.13.593936"]  # every line carries a number in the left margin
    tokens = [token for chunk in paper.chunks if chunk.content_type is ContentType.TEXT for token in chunk.text.split()]
    assert len(tokens) > 5000
    assert sum(1 for token in tokens if re.fullmatch(r"\d{2,4}", token)) < 0.01 * len(tokens)


def test_metadata_titles_years_authors_and_abstracts(litqa2: dict[str, Paper]):
    for stem, paper in litqa2.items():
        assert len(paper.title.split()) >= 4, stem
        assert paper.year is not None and 2020 <= paper.year <= 2025, stem
    assert sum(1 for paper in litqa2.values() if paper.authors) >= 36
    assert sum(1 for paper in litqa2.values() if len(paper.abstract.split()) >= 50) >= 34
    # The PDF metadata of this one cuts the title short; the printed title is complete.
    assert litqa2["10.1007%2Fs00125-024-06103-w"].title.startswith("A loss-of-function mutation in KCNJ11 causing")
    # NAR sets letters apart with zero-width 'spaces' that must not split words.
    assert "The complex formed by Ku70/80 and DNA-PKcs" in litqa2["10.1093%2Fnar%2Fgkae105"].abstract


def test_figure_captions_are_their_own_chunks(litqa2: dict[str, Paper]):
    label = re.compile(r"(?:Fig\.?|Figure|FIGURE)\s*\d+\b")
    punctuated_label = re.compile(r"(?:Fig\.|Figure|FIGURE)\s*\d+\s*[|.:]")
    with_captions = 0
    for stem, paper in litqa2.items():
        captions = [chunk for chunk in paper.chunks if chunk.content_type is ContentType.FIGURE_CAPTION]
        with_captions += any(label.match(chunk.text) for chunk in captions)  # long captions go on in more chunks
        texts = [chunk for chunk in paper.chunks if chunk.content_type is ContentType.TEXT]
        assert not [chunk.text[:40] for chunk in texts if punctuated_label.match(chunk.text)], stem
    assert with_captions >= 36


# --- ACL papers (two-column) and tables -----------------------------------------------------------------------------


@pytest.mark.parametrize(("stem", "year"), [("2020.acl-main.207", 2020), ("N18-3011", 2018)])
def test_acl_papers_match_their_reference_parse(shared_data: Path, stem: str, year: int):
    folder = shared_data / "s2orc-doc2json-samples" / "tests" / "pdf"
    expected = json.loads((folder / f"{stem}.json").read_text())
    paper = parse(folder / f"{stem}.pdf", NO_TABLES)

    assert normalize_title(paper.title) == normalize_title(expected["title"])
    assert paper.toc_depth() >= 2
    introduction = paper.sections[[section.title for section in paper.sections].index("Introduction")]
    assert introduction.number == "1"
    assert len(paper.references) >= 0.9 * len(expected["pdf_parse"]["bib_entries"])
    assert paper.year == year


def test_tables_are_found_only_when_enabled(shared_data: Path):
    path = shared_data / "litqa2" / "pdfs" / "10.1007%2Fs00125-024-06103-w.pdf"  # one page with a table caption
    with_tables = parse(path)
    tables = [chunk for chunk in with_tables.chunks if chunk.content_type is ContentType.TABLE]
    assert tables and "Glibenclamide | G0639" in tables[0].text
    assert not any(chunk.content_type is ContentType.TABLE for chunk in parse(path, NO_TABLES).chunks)


# --- broken input --------------------------------------------------------------------------------------------------


def _real_pdf(shared_data: Path) -> bytes:
    return (shared_data / "litqa2" / "pdfs" / "10.1038%2Fs41467-024-44806-1.pdf").read_bytes()


@pytest.mark.parametrize("kept", [0.5, 0.95])
def test_a_truncated_copy_is_rejected(shared_data: Path, tmp_path: Path, kept: float):
    data = _real_pdf(shared_data)
    path = tmp_path / "truncated.pdf"
    path.write_bytes(data[: int(len(data) * kept)])
    with pytest.raises(ParseError, match="truncated") as raised:
        parse(path)
    assert raised.value.path == str(path)


def test_an_encrypted_pdf_is_rejected(shared_data: Path, tmp_path: Path):
    path = tmp_path / "locked.pdf"
    document = pymupdf.open(stream=_real_pdf(shared_data), filetype="pdf")
    document.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")
    with pytest.raises(ParseError, match="password"):
        parse(path)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file"),
        (b"hello, I am a text file that calls itself a PDF\n", "not a PDF"),
        (
            b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n"
            b"trailer<</Root 1 0 R>>\n%%EOF\n",
            "no pages",
        ),
    ],
)
def test_files_that_are_not_usable_pdfs_are_rejected(tmp_path: Path, content: bytes, reason: str):
    path = tmp_path / "broken.pdf"
    path.write_bytes(content)
    with pytest.raises(ParseError, match=reason):
        list(iter_papers(path))


def test_a_pdf_without_a_text_layer_is_rejected(tmp_path: Path):
    path = tmp_path / "scan.pdf"
    document = pymupdf.open()
    document.new_page().draw_rect(pymupdf.Rect(50, 50, 300, 300), fill=(0.5, 0.5, 0.5))
    document.save(path)
    with pytest.raises(ParseError, match="no extractable text"):
        parse(path)


def test_a_sentence_printed_again_inside_a_paragraph_is_kept_a_repeated_block_is_not():
    from strata.documents.parsers.pdf.layout import Line
    from strata.documents.parsers.pdf.noise import drop_noise

    def line(text: str, page: int, block: int, y: float) -> Line:
        return Line(text, page, 50.0, y, 500.0, y + 10, 10.0, False, "", block)

    stamp = "This article is licensed under a Creative Commons Attribution licence."
    said = "We found a significant effect of the microstimulation on the recorded potentials."
    lines = [
        line(stamp, 1, 1, 400), line(said, 1, 2, 300),
        line(stamp, 2, 3, 400),  # the licence block again: dropped
        line("As on the first page, the stimulation had an effect we describe here.", 2, 4, 300),
        line(said, 2, 4, 312),  # restated inside a paragraph of new text: kept
    ]
    kept = [(item.page, item.text) for item in drop_noise(lines, [(600.0, 800.0)] * 2)]
    assert (2, said) in kept and (2, stamp) not in kept and (1, stamp) in kept


def test_the_arxiv_stamp_names_the_paper_not_an_arxiv_id_its_text_cites(tmp_path: Path):
    path = tmp_path / "preprint.pdf"
    document = pymupdf.open()
    page = document.new_page(width=595, height=842)
    page.insert_text((72, 90), "We build on BERT (Devlin et al., arXiv:1810.04805) for tagging.", fontsize=11)
    page.insert_text((72, 104), "Our tagger improves recall on every benchmark we tried.", fontsize=11)
    page.insert_text((30, 600), "arXiv:2301.01234v1 [cs.CL] 3 Jan 2023", fontsize=12, rotate=90)
    document.save(path)
    document.close()
    assert parse(path).arxiv_id == "2301.01234"
