"""Parsers of the structured formats, run on the real sample files in ../shared/data.

Expected values come from the source files themselves (counted here with plain regex / json), not from the parsers.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from strata.config import ParsingSettings
from strata.documents.model import ContentType, Paper
from strata.documents.parsers import ParseError, beir, book, iter_papers, jats, parser_for, s2orc, tei, unarxive
from strata.documents.parsers._structured import (
    HeadingLevels,
    number_depth,
    parse_year,
    split_merged_heading,
    split_title_number,
)

SETTINGS = ParsingSettings()
STRUCTURED_PARSERS = [book.PARSER, tei.PARSER, jats.PARSER, unarxive.PARSER, beir.PARSER, s2orc.PARSER]


def only_paper(parser, path: Path) -> Paper:
    papers = list(parser.parse(path, SETTINGS))
    assert len(papers) == 1
    return papers[0]


def assert_well_formed(paper: Paper) -> None:
    """Chunk spans reproduce the text exactly and every chunk sits in a section that exists (or in none)."""
    assert paper.text and paper.chunks
    paths = {section.path for section in paper.walk_sections()}
    for ordinal, chunk in enumerate(paper.chunks):
        assert chunk.ordinal == ordinal
        assert paper.text[chunk.char_start : chunk.char_end] == chunk.text
        assert chunk.section_path == () or chunk.section_path in paths
    for section in paper.walk_sections():
        assert section.level == len(section.path)
        assert all(child.path[:-1] == section.path for child in section.children)


def paths_of(paper: Paper) -> set[tuple[str, ...]]:
    return {section.path for section in paper.walk_sections()}


def chunks_of(paper: Paper, content_type: ContentType) -> list[str]:
    return [chunk.text for chunk in paper.chunks if chunk.content_type == content_type]


# --- helpers ---------------------------------------------------------------------------------------------------


def test_heading_numbers_give_levels():
    assert [number_depth(n) for n in ("2", "2.1", "5.", "2.1.0.1", "-1", None, "IV")] == [1, 2, 1, 3, None, None, None]
    assert split_title_number("IV. SIMULATION") == ("IV", 1, "SIMULATION")
    assert split_title_number("A. Reward Uncertainty") == ("A", 2, "Reward Uncertainty")
    assert split_title_number("2) Mixed Gaussian Rewards:") == ("2", 3, "Mixed Gaussian Rewards:")
    assert split_title_number("3.2. Citation Prediction") == ("3.2", 2, "Citation Prediction")
    assert split_title_number("2000 Census data") == (None, None, "2000 Census data")
    # Only a lower-case word of letters makes the letter a genus initial ('E. coli'); these are numbered headings.
    assert split_title_number("C. mRNA levels") == ("C", 2, "mRNA levels")
    assert split_title_number("A. 3D reconstruction") == ("A", 2, "3D reconstruction")
    assert split_title_number("S. cerevisiae growth") == (None, None, "S. cerevisiae growth")
    assert split_merged_heading("Model 2.1 Overview", "2") == [("Model", "2"), ("Overview", "2.1")]
    assert split_merged_heading("Results", "5") == [("Results", "5")]
    levels = HeadingLevels()
    assert [levels.level(n) for n in (None, "1", "2.2", None, "2.3", "3")] == [1, 1, 2, 3, 2, 1]
    assert [parse_year(v) for v in ("2011-11", 2014, "Thu, 22 Dec 2022 17:01:56 GMT", "", None)] == [
        2011, 2014, 2022, None, None]


# --- S2ORC -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s2orc_dir(shared_data: Path) -> Path:
    return shared_data / "s2orc-doc2json-samples" / "tests"


def s2orc_files(s2orc_dir: Path) -> list[Path]:
    return sorted(s2orc_dir.glob("s2orc/*/*.json")) + sorted(s2orc_dir.glob("pdf/*.json"))


def test_s2orc_every_schema_version_parses(s2orc_dir: Path):
    files = s2orc_files(s2orc_dir)
    assert {path.parent.name for path in files} == {"20190928", "20200705", "20210101", "pdf"}
    for path in files:
        record = json.loads(path.read_text())
        content = record.get("pdf_parse") or record.get("grobid_parse") or record
        assert s2orc.PARSER.accepts(path), path
        paper = only_paper(s2orc.PARSER, path)
        assert_well_formed(paper)
        assert len(paper.references) == len(content["bib_entries"]), path
        assert content["body_text"][0]["text"][:40] in paper.text


def test_s2orc_accepts_only_s2orc_json(s2orc_dir: Path, shared_data: Path):
    assert not s2orc.PARSER.accepts(shared_data / "litqa2" / "pdf_manifest.json")
    assert not s2orc.PARSER.accepts(s2orc_dir / "pdf" / "N18-3011.tei.xml")
    assert not s2orc.PARSER.accepts(s2orc_dir / "jats" / "PMC5828200.nxml")


def test_s2orc_sec_num_gives_levels(s2orc_dir: Path):
    paper = only_paper(s2orc.PARSER, s2orc_dir / "pdf" / "N18-3011.json")
    assert paper.toc_depth() == 2
    assert ("Structure of The Literature Graph", "Node Types") in paths_of(paper)
    assert ("Entity Extraction and Linking", "Entity Linking Models") in paths_of(paper)


def test_s2orc_pdf_output_keeps_full_file_name_as_id_and_splits_glued_headings(s2orc_dir: Path):
    paper = only_paper(s2orc.PARSER, s2orc_dir / "pdf" / "2020.acl-main.207.json")
    assert paper.id == "2020.acl-main.207"  # doc2json's own paper_id is the truncated '2020'
    assert paper.title.startswith("SPECTER")
    assert ("Model", "Overview") in paths_of(paper)  # GROBID heading 'Model 2.1 Overview' with n='2'
    assert ("Model", "Background: Pretrained Transformers", "Document Representation") in paths_of(paper)
    assert "10.18653/v1/d17-1070" in {reference.doi for reference in paper.references}


def test_s2orc_unnumbered_ieee_headings_nest_by_their_printed_numbers(s2orc_dir: Path):
    paper = only_paper(s2orc.PARSER, s2orc_dir / "s2orc" / "20200705" / "18980380.json")
    assert paper.toc_depth() == 3
    assert (
        "SIMULATION",
        "Reward Uncertainty in the Machine Replacement Problem",
        "Machine Replacement as a MDP With Gaussian Rewards:",
    ) in paths_of(paper)


def test_s2orc_2019_metadata_and_reference_dois(s2orc_dir: Path):
    path = s2orc_dir / "s2orc" / "20190928" / "10002293.json"
    record = json.loads(path.read_text())
    paper = only_paper(s2orc.PARSER, path)
    assert (paper.id, paper.doi, paper.year) == ("10002293", "10.3389/fmicb.2017.00498", 2017)
    assert paper.venue == "Frontiers in microbiology" and paper.authors[0] == "Patrícia Diogo"
    source_dois = [entry["other_ids"].get("doi", [None])[0] for entry in record["grobid_parse"]["bib_entries"].values()]
    assert [reference.doi for reference in paper.references] == [doi and doi.lower() for doi in source_dois]
    assert sum(1 for doi in source_dois if doi) > 40
    assert paper.sections[0].title == "Abstract" and paper.abstract.startswith("Endodontic biofilms")
    assert chunks_of(paper, ContentType.FIGURE_CAPTION) and chunks_of(paper, ContentType.TABLE)


# --- GROBID TEI ------------------------------------------------------------------------------------------------


def test_tei_sections_metadata_and_references(s2orc_dir: Path):
    path = s2orc_dir / "pdf" / "N18-3011.tei.xml"
    assert tei.PARSER.accepts(path) and not jats.PARSER.accepts(path)
    paper = only_paper(tei.PARSER, path)
    assert_well_formed(paper)
    assert paper.id == "N18-3011" and paper.title == "Construction of the Literature Graph in Semantic Scholar"
    assert paper.authors[:2] == ["Waleed Ammar", "Dirk Groeneveld"] and "Oren Etzioni" in paper.authors
    assert paper.toc_depth() == 2
    node_types = next(section for section in paper.walk_sections() if section.title == "Node Types")
    assert (node_types.number, node_types.path) == ("2.1", ("Structure of The Literature Graph", "Node Types"))
    assert len(paper.references) == path.read_text().count("<biblStruct xml:id=")
    assert paper.references[0].year == 2017 and paper.references[0].title.startswith("The ai2 system")
    assert chunks_of(paper, ContentType.EQUATION)


def test_tei_reference_dois_match_the_idno_elements(s2orc_dir: Path):
    path = s2orc_dir / "pdf" / "2020.acl-main.207.tei.xml"
    paper = only_paper(tei.PARSER, path)
    assert_well_formed(paper)
    source_dois = {doi.lower() for doi in re.findall(r'<idno type="DOI">([^<]+)</idno>', path.read_text())}
    assert len(source_dois) == 7
    assert {reference.doi for reference in paper.references if reference.doi} == source_dois
    assert ("Model", "Background: Pretrained Transformers", "Document Representation") in paths_of(paper)
    assert any(text.startswith("Table 1 : Results on the SCIDOCS") for text in chunks_of(paper, ContentType.TABLE))
    assert ("Acknowledgements",) in paths_of(paper)


def _write_tei(path: Path, header: str, body: str) -> Path:
    path.write_text(
        "<TEI xmlns='http://www.tei-c.org/ns/1.0'><teiHeader><fileDesc><titleStmt><title>T</title></titleStmt>"
        f"<sourceDesc><biblStruct>{header}</biblStruct></sourceDesc></fileDesc></teiHeader>"
        f"<text><body>{body}</body></text></TEI>"
    )
    return path


def test_tei_heading_opening_with_a_genus_initial_is_not_numbered(tmp_path: Path):
    body = (
        "<div><head n='2'>Methods</head><p>We grew cells.</p></div>"
        "<div><head>E. coli strains and growth conditions</head><p>Strains are listed in Table 1.</p></div>"
    )
    paper = only_paper(tei.PARSER, _write_tei(tmp_path / "genus.tei.xml", "", body))
    assert ("Methods", "E. coli strains and growth conditions") in paths_of(paper)
    assert [section.number for section in paper.walk_sections()] == ["2", None]


def test_tei_header_arxiv_id_is_the_bare_id(tmp_path: Path):
    header = "<idno type='arXiv'>arXiv:1810.04805v2[cs.CL]</idno>"  # as GROBID writes it from the arXiv stamp
    paper = only_paper(tei.PARSER, _write_tei(tmp_path / "bert.tei.xml", header, "<div><p>Text.</p></div>"))
    assert paper.arxiv_id == "1810.04805"


# --- JATS ------------------------------------------------------------------------------------------------------


def test_jats_metadata_nested_sections_tables_and_figures(s2orc_dir: Path):
    path = s2orc_dir / "jats" / "PMC5828200.nxml"
    paper = only_paper(jats.PARSER, path)
    assert_well_formed(paper)
    assert paper.id == "PMC5828200" and paper.title.startswith("Curcuminoid submicron particle ameliorates")
    assert (paper.doi, paper.year, paper.venue) == ("10.18632/oncotarget.24369", 2018, "Oncotarget")
    assert paper.authors[0] == "Yi-Heng Tai" and len(paper.authors) == 7
    assert paper.toc_depth() == 2
    assert ("RESULTS", "Bioavailability of CSP") in paths_of(paper)
    assert ("MATERIALS AND METHODS", "In vitro Aβ aggregation") in paths_of(paper)  # title with inline markup
    tables = chunks_of(paper, ContentType.TABLE)
    assert len(tables) == 1 and tables[0].startswith("Table 1 Pharmacokinetic") and "Treatment | Dosage" in tables[0]
    figures = chunks_of(paper, ContentType.FIGURE_CAPTION)
    assert len(figures) == path.read_text().count("<fig ") and figures[0].startswith("Figure 1 CSP had better")
    assert len(paper.references) == path.read_text().count("<ref id=")


def test_jats_reference_dois(s2orc_dir: Path):
    path = s2orc_dir / "jats" / "PMC6398430.nxml"
    paper = only_paper(jats.PARSER, path)
    assert_well_formed(paper)
    assert paper.doi == "10.1093/beheco/ary157"
    with_doi = [reference for reference in paper.references if reference.doi]
    assert [reference.doi for reference in with_doi] == ["10.5061/dryad.t0g149j"]
    assert with_doi[0].year == 2018 and with_doi[0].raw.startswith("F Uhl, M Ringler")
    assert len(chunks_of(paper, ContentType.EQUATION)) == 2
    assert ("DISCUSSION", "Environmental effects") in paths_of(paper)


# --- unarXive --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unarxive_file(shared_data: Path) -> Path:
    return shared_data / "unarxive-sample" / "arXiv_src_2212_086.jsonl"


@pytest.fixture(scope="module")
def unarxive_papers(unarxive_file: Path) -> list[Paper]:
    return list(unarxive.PARSER.parse(unarxive_file, SETTINGS))


@pytest.fixture(scope="module")
def unarxive_records(unarxive_file: Path) -> list[dict]:
    return [json.loads(line) for line in unarxive_file.read_text().splitlines()]


def test_unarxive_gives_49_arxiv_papers(unarxive_papers: list[Paper], unarxive_records: list[dict]):
    assert len(unarxive_papers) == 49
    assert [paper.id for paper in unarxive_papers] == [record["paper_id"] for record in unarxive_records]
    assert all(paper.arxiv_id == paper.id for paper in unarxive_papers)
    for paper in unarxive_papers:
        assert_well_formed(paper)
        assert paper.title and paper.authors and paper.year == 2022


def test_unarxive_references_carry_the_resolved_ids(unarxive_papers: list[Paper], unarxive_records: list[dict]):
    for paper, record in zip(unarxive_papers, unarxive_records):
        entries = list(record["bib_entries"].values())
        assert len(paper.references) == len(entries)
        for reference, entry in zip(paper.references, entries):
            ids = entry.get("ids") or {}
            if ids.get("doi"):
                assert reference.doi == ids["doi"].lower()
            if ids.get("arxiv_id"):
                assert reference.arxiv_id == re.sub(r"v\d+$", "", ids["arxiv_id"])  # versions are dropped
    references = [reference for paper in unarxive_papers for reference in paper.references]
    assert sum(1 for reference in references if reference.doi) >= 517  # SOURCE.txt: 517 DOI, 146 arXiv resolved
    assert sum(1 for reference in references if reference.arxiv_id) >= 146
    assert sum(1 for reference in references if reference.year) > 0.9 * len(references)  # read from the string
    byun = next(reference for reference in unarxive_papers[0].references if reference.doi == "10.1090/tran/8674")
    assert byun.year == 2022 and byun.raw.startswith("S.-S. Byun, J. Lee, and T. R. Reddy.")


def test_unarxive_text_has_no_markers_and_citations_point_into_references(
    unarxive_papers: list[Paper], unarxive_records: list[dict]
):
    marker = re.compile(r"\{\{(cite|formula|figure|table):")
    for paper in unarxive_papers:
        assert not marker.search(paper.text)
        assert not any(marker.search(section.title) for section in paper.walk_sections())
    paper, record = unarxive_papers[0], unarxive_records[0]
    body = " ".join(paragraph["text"] for paragraph in record["body_text"])
    cited = re.search(r"Pemantle and Rivin \{\{cite:(\w+)\}\}", body).group(1)
    number = list(record["bib_entries"]).index(cited) + 1
    assert f"Pemantle and Rivin [{number}] conjectured" in paper.text
    assert paper.references[number - 1].raw.startswith("R. Pemantle")
    assert sum(len(chunks_of(paper, ContentType.FIGURE_CAPTION)) for paper in unarxive_papers) > 200


def test_unarxive_section_types_give_levels(unarxive_papers: list[Paper]):
    first = unarxive_papers[0]
    assert ("Introduction", "Notation") in paths_of(first)  # sec_type 'subsection'
    assert max(paper.toc_depth() for paper in unarxive_papers) >= 3
    esg = next(paper for paper in unarxive_papers if paper.title.startswith("Predicting Companies' ESG Ratings"))
    assert ("Dataset", "ESG Ratings Dataset Creation") in paths_of(esg)  # sec_number '1' but sec_type 'subsection'


# --- BEIR ------------------------------------------------------------------------------------------------------


def test_beir_corpus_ids_round_trip_to_qrels_and_parse_fast(shared_data: Path):
    corpus = shared_data / "scifact" / "beir" / "corpus.jsonl"
    assert beir.PARSER.accepts(corpus)
    assert not beir.PARSER.accepts(shared_data / "scifact" / "beir" / "queries.jsonl")
    started = time.perf_counter()
    papers = list(beir.PARSER.parse(corpus, SETTINGS))
    elapsed = time.perf_counter() - started
    assert elapsed < 10, f"BEIR parse took {elapsed:.1f}s"
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    assert [paper.id for paper in papers] == [record["_id"] for record in records]
    qrels = (shared_data / "scifact" / "beir" / "qrels" / "test.tsv").read_text().splitlines()[1:]
    qrel_ids = {line.split("\t")[1] for line in qrels}
    assert len(qrel_ids) == 283 and qrel_ids <= {paper.id for paper in papers}
    for paper, record in zip(papers[:500], records):
        assert_well_formed(paper)
        assert (paper.title, paper.abstract, paper.text) == (record["title"], record["text"], record["text"])
        assert paper.sections == []


def test_beir_rejects_ids_that_would_change(tmp_path: Path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"_id": "ok-1", "title": "T", "text": "x"}) + "\n"
        + json.dumps({"_id": "doc 2/3", "title": "T", "text": "y"}) + "\n"
    )
    papers = beir.PARSER.parse(corpus, SETTINGS)
    assert next(papers).id == "ok-1"
    with pytest.raises(ParseError, match=r"corpus\.jsonl: line 2: _id 'doc 2/3'"):
        next(papers)


def test_nul_characters_are_replaced_one_for_one_so_every_store_accepts_the_paper(tmp_path: Path):
    # PostgreSQL text cannot hold NUL; PDFs yield it for unmapped glyphs, JSON for a \u0000 escape
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "title": "A\u0000B", "text": "edge p1 \u0000 p2. More text."}) + "\n")
    (paper,) = iter_papers(corpus)
    assert "\\u0000" not in paper.model_dump_json()  # title, text, abstract and chunks alike
    assert (paper.title, paper.text) == ("A\ufffdB", "edge p1 \ufffd p2. More text.")
    assert all(paper.text[chunk.char_start : chunk.char_end] == chunk.text for chunk in paper.chunks)


# --- OpenStax book folder --------------------------------------------------------------------------------------


@pytest.mark.parametrize("book_name", ["introduction-sociology-3e", "psychology-2e"])
def test_book_toc_follows_toc_json_and_matches_gold_paths(shared_data: Path, book_name: str):
    folder = shared_data / "openstax-toc-qa" / book_name / "derived"
    assert book.PARSER.accepts(folder) and not book.PARSER.accepts(folder / "sections.jsonl")
    paper = only_paper(book.PARSER, folder)
    assert_well_formed(paper)
    assert paper.id == book_name and paper.toc_depth() == 3
    toc = json.loads((folder / "toc.json").read_text())
    assert paper.title == toc["title"]
    assert [section.title for section in paper.sections] == [node["title"] for node in toc["children"]]
    paths = paths_of(paper)
    gold_paths = [tuple(json.loads(line)["gold_path"]) for line in (folder / "queries.jsonl").read_text().splitlines()]
    assert gold_paths and all(any(path[: len(gold)] == gold for path in paths) for gold in gold_paths)
    titled_toc_nodes = sum(1 for node in _toc_nodes(toc) if node["title"].strip()) - 1  # less the book itself
    assert len(list(paper.walk_sections())) == titled_toc_nodes  # every module could be split at its subsections
    assert not any(chunk.text.startswith("## ") for chunk in paper.chunks)
    # The export repeats a subsection's title at the start of its text ('## Hypnosis\nHypnosis Hypnosis is ...').
    for section in paper.walk_sections():
        first = next((chunk for chunk in paper.chunks if chunk.section_path == section.path), None)
        if section.level == 3 and first is not None:
            assert not first.text.startswith(f"{section.title} {section.title}")
    assert not any(parser.accepts(folder / "queries.jsonl") for parser in STRUCTURED_PARSERS)


def _toc_nodes(node: dict) -> list[dict]:
    return [node] + [nested for child in node.get("children", []) for nested in _toc_nodes(child)]


def test_book_module_whose_text_does_not_match_its_subsections_stays_a_leaf(tmp_path: Path):
    toc = {"type": "book", "title": "Tiny", "children": [{"type": "chapter", "title": "One", "children": [
        {"type": "section", "module_id": "m1", "title": "Split", "children": [
            {"type": "subsection", "title": "First"}, {"type": "subsection", "title": "Second"}]},
        {"type": "section", "module_id": "m2", "title": "Leaf", "children": [
            {"type": "subsection", "title": "Not in the text"}]},
    ]}]}
    modules = [
        {"book": "tiny", "module_id": "m1", "text": "Intro line.\n\n## First\nFirst Body one.\n## Second\nSecond Two."},
        {"book": "tiny", "module_id": "m2", "text": "Leaf text.\n## Something else\nMore."},
    ]
    (tmp_path / "toc.json").write_text(json.dumps(toc))
    (tmp_path / "sections.jsonl").write_text("\n".join(map(json.dumps, modules)))
    paper = only_paper(book.PARSER, tmp_path)
    assert_well_formed(paper)
    assert paths_of(paper) == {("One",), ("One", "Split"), ("One", "Split", "First"), ("One", "Split", "Second"),
                               ("One", "Leaf")}
    assert [(chunk.section_path[-1], chunk.text) for chunk in paper.chunks] == [
        ("Split", "Intro line."), ("First", "Body one."), ("Second", "Two."),
        ("Leaf", "Leaf text.\n\nSomething else\n\nMore."),
    ]


# --- dispatch and bad input ------------------------------------------------------------------------------------


def test_dispatch_picks_the_right_parser(shared_data: Path, s2orc_dir: Path):
    expected = {
        s2orc_dir / "pdf" / "N18-3011.json": "s2orc",
        s2orc_dir / "s2orc" / "20200705" / "18980380.json": "s2orc",
        s2orc_dir / "pdf" / "N18-3011.tei.xml": "tei",
        s2orc_dir / "jats" / "PMC6398430.nxml": "jats",
        shared_data / "unarxive-sample" / "arXiv_src_2212_086.jsonl": "unarxive",
        shared_data / "scifact" / "beir" / "corpus.jsonl": "beir",
        shared_data / "openstax-toc-qa" / "psychology-2e" / "derived": "book",
    }
    for path, name in expected.items():
        parser = parser_for(path)
        assert parser is not None and parser.name == name, path
    for path in (shared_data / "litqa2" / "pdf_manifest.json", shared_data / "scifact" / "beir" / "queries.jsonl",
                 shared_data / "openstax-toc-qa" / "psychology-2e" / "derived" / "queries.jsonl"):
        assert parser_for(path) is None, path


@pytest.mark.parametrize(
    ("file_name", "content"),
    [
        ("broken.json", '{"paper_id": "x", "body_text": [{"text": "unterminated'),
        ("broken.tei.xml", "<TEI xmlns='http://www.tei-c.org/ns/1.0'><teiHeader><fileDesc></teiHeader></TEI>"),
        ("broken.nxml", "<article><front><article-meta></front></article>"),
        ("broken.jsonl", json.dumps({"paper_id": "2212.00001", "body_text": [], "bib_entries": {}}) + "\n{not json\n"),
        ("corpus.jsonl", json.dumps({"_id": "1", "title": "t", "text": "x"}) + "\n[1, 2\n"),
        # entity expansion ('billion laughs') is refused by the XML parser instead of exhausting memory
        ("laughs.nxml", "<!DOCTYPE article [<!ENTITY a 'aaaaaaaaaa'>" + "".join(
            f"<!ENTITY {name} '{('&' + previous + ';') * 10}'>" for previous, name in zip("abcdefg", "bcdefgh")
        ) + "]><article><body><p>" + "&h;" * 20 + "</p></body></article>"),
    ],
)
def test_malformed_files_raise_parse_error_naming_the_file(tmp_path: Path, file_name: str, content: str):
    path = tmp_path / file_name
    path.write_text(content)
    with pytest.raises(ParseError) as raised:
        list(iter_papers(path))
    assert file_name in str(raised.value)
    assert raised.value.path == str(path)


def test_jats_text_after_a_subsection_is_its_parents_and_lists_are_read_once_apart(tmp_path: Path):
    body = (
        "<sec><title>Results</title><p>Cells grew.</p>"
        "<sec><title>Sub A</title><p>Sub text.</p></sec>"
        "<p>The criteria were:<list><list-item><p>age over 18;</p><list><list-item><p>adults only.</p></list-item>"
        "</list></list-item><list-item><p>written consent.</p></list-item></list></p></sec>"
    )
    path = tmp_path / "paper.nxml"
    path.write_text(
        "<article><front><article-meta><title-group><article-title>A trial</article-title></title-group>"
        f"</article-meta></front><body>{body}</body></article>"
    )
    paper = only_paper(jats.PARSER, path)
    blocks = {chunk.text: chunk.section_path for chunk in paper.chunks}
    assert paper.text.count("adults only.") == 1 and "were:age" not in paper.text
    closing = next(chunk for chunk in paper.chunks if "The criteria were:" in chunk.text)
    assert closing.section_path == ("Results",), blocks


def test_unarxive_paragraph_headings_sit_below_every_section_level(unarxive_file: Path):
    paper = next(p for p in unarxive.PARSER.parse(unarxive_file, SETTINGS) if "2212.11862" in p.id)
    paths = [section.path for section in paper.walk_sections()]
    assert ("Numerical experiments", "Results", "Decision problems:") in paths  # \paragraph under \subsubsection
    assert ("Numerical experiments", "Generalizations") in paths  # a subsection is not taken into a paragraph
    assert ("Optimizer:",) not in paths  # a \paragraph counter '2' is no top-level section number


def test_jats_floats_group_back_notes_and_citation_alternatives_are_read(tmp_path: Path):
    path = tmp_path / "paper.nxml"
    path.write_text(
        "<article><front><article-meta><title-group><article-title>A study</article-title></title-group>"
        "</article-meta></front><body><p>Cells grew faster (Figure 1).</p></body><back>"
        "<notes><title>Data availability</title><p>All data are on Zenodo.</p></notes>"
        "<ref-list><ref id='r1'><citation-alternatives><element-citation><person-group><name><surname>Smith"
        "</surname><given-names>J</given-names></name></person-group><article-title>Zinc fingers bind DNA"
        "</article-title><year>2019</year></element-citation><mixed-citation><string-name>Smith J</string-name>. "
        "<article-title>Zinc fingers bind DNA</article-title>. <year>2019</year>.</mixed-citation>"
        "</citation-alternatives></ref></ref-list></back>"
        "<floats-group><fig id='f1'><label>Figure 1</label><caption><p>Growth curves.</p></caption></fig>"
        "</floats-group></article>"
    )
    paper = only_paper(jats.PARSER, path)
    assert "All data are on Zenodo." in paper.text and ("Data availability",) in paths_of(paper)
    assert any("Growth curves." in text for text in chunks_of(paper, ContentType.FIGURE_CAPTION))
    (reference,) = paper.references
    assert (reference.title, reference.year) == ("Zinc fingers bind DNA", 2019)
