"""Reference-list splitting and entry parsing on synthetic lines (real PDFs are covered in test_pdf_parser.py)."""

from __future__ import annotations

import pytest

from strata.documents.identifiers import find_dois, normalize_arxiv_id, normalize_doi
from strata.documents.references import (
    ReferenceLine,
    entry_number,
    guess_title,
    guess_year,
    join_lines,
    looks_like_entry_start,
    parse_reference,
    parse_reference_list,
    split_entries,
)


def _texts(lines: list[ReferenceLine] | list[str]) -> list[str]:
    return [entry.text for entry in split_entries(lines)]


def test_bracketed_numbers_split_entries_and_rejoin_a_doi_broken_across_lines():
    lines = [
        "[1] Smith J, Doe K. Deep learning for cells. Cell. 2019;12:1-10.",
        "doi:10.1016/j.cell.",
        "2019.01.001",
        "[2] Lee M. A second paper that wraps over",
        "two lines. Nature. 2020;5:3.",
        "[3] Chen X. Third. Science. 2021;1:2.",
    ]
    entries = _texts(lines)
    assert [entry[:3] for entry in entries] == ["[1]", "[2]", "[3]"]
    assert entries[1] == "[2] Lee M. A second paper that wraps over two lines. Nature. 2020;5:3."
    assert parse_reference(entries[0]).doi == "10.1016/j.cell.2019.01.001"


def test_numbered_list_is_not_split_at_lines_that_start_with_other_numbers():
    lines = [
        "1. Zaremba-Niedzwiedzka, K. et al. Asgard archaea illuminate the origin of",
        "eukaryotic cellular complexity. Nature 541,",
        "353–358 (2017).",
        "2. Imachi, H. et al. Isolation of an archaeon at the prokaryote–eukaryote",
        "interface. Nature 577, 519–525 (2020).",
        "3. Liu, Y. et al. Expanded diversity of Asgard archaea. Nature 593, 553–557 (2021).",
    ]
    entries = _texts(lines)
    assert len(entries) == 3
    assert entries[0].endswith("353–358 (2017).")


def test_a_number_printed_on_its_own_line_opens_the_entry_after_it():
    lines = ["1.", "Smith, J. First title here. Nature 1, 2 (2001).", "2.", "Doe, K. Second title. Cell 3, 4 (2002)."]
    assert _texts(lines) == [
        "1. Smith, J. First title here. Nature 1, 2 (2001).",
        "2. Doe, K. Second title. Cell 3, 4 (2002).",
    ]


def test_hanging_indent_separates_author_year_entries():
    lines = [
        ReferenceLine("Garge RK, Cha HJ, Lee C, Gollihar JD, Kachroo AH, Wallingford JB,", indent=0),
        ReferenceLine("Marcotte EM. 2021. Discovery of new vascular disrupting agents.", indent=12),
        ReferenceLine("Genetics. 219(1):iyab101. doi:10.1093/genetics/iyab101.", indent=12),
        ReferenceLine("Gibson BR, Lawrence SJ, Leclaire JPR, Powell CD, Smart KA. 2007.", indent=0),
        ReferenceLine("Yeast responses to stresses associated with industrial brewery", indent=12),
        ReferenceLine("handling. FEMS Microbiol Rev. 31(5):535–569.", indent=12),
        ReferenceLine("Ho B, Baryshnikova A, Brown GW. 2018. Unification of protein abun-", indent=0),
        ReferenceLine("dance datasets. Cell Syst. 6(2):192–205.", indent=12),
    ]
    entries = _texts(lines)
    assert [entry.split()[0] for entry in entries] == ["Garge", "Gibson", "Ho"]
    assert "protein abundance datasets" in entries[2]


def test_text_blocks_separate_entries_when_there_is_no_other_layout_signal():
    lines = [
        ReferenceLine("Adams A, Brown B (2001) A study of one thing.", starts_block=True),
        ReferenceLine("J Biol 1:1-2", starts_block=False),
        ReferenceLine("Clark C, Davis D (2002) Another study of", starts_block=True),
        ReferenceLine("another thing. J Biol 2:3-4", starts_block=False),
        ReferenceLine("Evans E (2003) A third study. J Biol 3:5-6", starts_block=True),
    ]
    assert [entry.split()[0] for entry in _texts(lines)] == ["Adams", "Clark", "Evans"]


def test_plain_author_year_lines_split_where_a_surname_follows_a_finished_entry():
    lines = [
        "Smith, J., and Doe, K. (2019). Growth of E. coli in the gut. Cell 12,",
        "1–10.",
        "Turner, A., and Young, B. (2020). Another title. Nature 5, 3–4.",
    ]
    assert [entry.split(",")[0] for entry in _texts(lines)] == ["Smith", "Turner"]


def test_stray_short_lines_are_not_references():
    blocks = [
        ReferenceLine("Adams A, Brown B (2001) A study of one thing. J Biol 1:1-2", starts_block=True),
        ReferenceLine("Editor: G. Brown", starts_block=True),
        ReferenceLine("Clark C, Davis D (2002) Another study. J Biol 2:3-4", starts_block=True),
        ReferenceLine("Evans E (2003) A third study. J Biol 3:5-6", starts_block=True),
    ]
    assert [entry.split()[0] for entry in _texts(blocks)] == ["Adams", "Clark", "Evans"]
    assert _texts(["Editor: G. Brown"]) == []


@pytest.mark.parametrize(
    ("raw", "title", "year"),
    [
        (  # ACL style, a middle initial inside the author list: no segment ends after 'D.'
            "Isabelle Augenstein, Mrinal Das, Sebastian Riedel, Lakshmi Vikraman, and Andrew D. McCallum. 2017. "
            "Semeval 2017 task 10: ScienceIE. In SemEval.",
            "Semeval 2017 task 10: ScienceIE",
            2017,
        ),
        (
            "5. Gaucher, E. A., Thomson, J. M., Burgan, M. F. & Benner, S. A. Inferring the palaeoenvironment of "
            "ancient bacteria on the basis of resurrected proteins. Nature 425, 285–288 (2003).",
            "Inferring the palaeoenvironment of ancient bacteria on the basis of resurrected proteins",
            2003,
        ),
        (
            "Smith, J.A., Doe, K., and Lee, M. (2019). Growth of E. coli in the gut. Cell 12, 1-10.",
            "Growth of E. coli in the gut",
            2019,
        ),
        (
            "Jacob Devlin, Ming-Wei Chang, Kenton Lee, and Kristina Toutanova. 2019. BERT: Pre-training of deep "
            "bidirectional transformers for language understanding. In Proceedings of NAACL, pages 4171–4186.",
            "BERT: Pre-training of deep bidirectional transformers for language understanding",
            2019,
        ),
        (
            "[3] Smith JA, Doe K, Lee M. Title of a Vancouver paper. J Biol Chem. 2019;294:1-10.",
            "Title of a Vancouver paper",
            2019,
        ),
        (
            "1. R. T. Abraham, Cell cycle checkpoint signaling through the ATM and ATR kinases. Genes Dev. 15, "
            "2177–2196 (2001).",
            "Cell cycle checkpoint signaling through the ATM and ATR kinases",
            2001,
        ),
        (
            "Ariel F, Lucero L, Christ A, Liu C et al (2020) R-loop mediated trans action of the APOLO long "
            "noncoding RNA. Mol Cell 77:1055–1065",
            "R-loop mediated trans action of the APOLO long noncoding RNA",
            2020,
        ),
        (
            "ENCODE Project Consortium. An integrated encyclopedia of DNA elements in the human genome. Nature 489, "
            "57–74 (2012).",
            "An integrated encyclopedia of DNA elements in the human genome",
            2012,
        ),
    ],
)
def test_title_and_year_of_common_citation_styles(raw: str, title: str, year: int):
    reference = parse_reference(raw)
    assert reference.title == title
    assert reference.year == year
    assert reference.raw == raw


def test_a_venue_only_entry_has_no_title():
    assert guess_title("12. A. Smith et al., Nature 12, 34 (2019).") is None


def test_identifiers_are_normalised_and_printed_dois_win_over_linked_ones():
    reference = parse_reference(
        "Vaswani A, et al. Attention is all you need. arXiv preprint arXiv:1706.03762v5 (2017). "
        "https://doi.org/10.48550/ARXIV.1706.03762",
        link_dois=["10.9999/other"],
    )
    assert reference.arxiv_id == "1706.03762"
    assert reference.doi == "10.48550/arxiv.1706.03762"
    assert reference.title == "Attention is all you need"
    linked = parse_reference("Smith J. A title without a printed DOI. Cell. 2019;1:2.", ["https://doi.org/10.1234/ABC"])
    assert linked.doi == "10.1234/abc"


def test_a_printed_doi_cut_at_a_line_end_is_completed_by_the_link_over_it():
    # printed over two lines as '.../10.1038/nchem' and 'bio.780.': nothing in the text says the DOI goes on
    raw = "9. Smith J. G4 ligands. Nat Chem Biol. 2012;8(3):301-10. https://doi.org/10.1038/nchem bio.780. PMID:2230"
    reference = parse_reference(raw, link_dois=["https://doi.org/10.1038/nchembio.780"])
    assert reference.doi == "10.1038/nchembio.780"
    assert parse_reference(raw).doi == "10.1038/nchem"  # without a link there is nothing to tell


def test_year_prefers_parentheses_and_ignores_numbers_inside_dois():
    assert guess_year("Smith J. Title from 1990 to 2010. Nature 5, 1 (2015).") == 2015
    assert guess_year("Smith J. Title. doi:10.1038/s2019-1999-x. Cell. 2021;3:4.") == 2021
    assert guess_year("No year here at all.") is None


def test_year_is_not_read_from_an_arxiv_id():
    # 'arXiv:1810.04805' was submitted in October 2018; it says nothing of the year 1810
    assert guess_year("Devlin J, et al. BERT. arXiv preprint arXiv:1810.04805, 2018.") == 2018
    assert guess_year("Lee K. Kernels. arXiv:2012.00152v2 [cs.LG], 2020.") == 2020
    assert guess_year("K. Costello and M. Yamazaki, Gauge theory III, [arXiv:1908.02289].") is None
    assert parse_reference("Ng A. A title on arXiv here. arXiv:1907.11692, 2019.").year == 2019


def test_biorxiv_urls_give_the_doi_without_their_version_suffix():
    reference = parse_reference(
        "Lee K. A preprint study of cells. bioRxiv https://www.biorxiv.org/content/10.1101/2023.01.11.523679v3 (2023)."
    )
    assert reference.doi == "10.1101/2023.01.11.523679"
    assert normalize_doi("https://doi.org/10.1101/2020.03.22.002386v2.full.pdf") == "10.1101/2020.03.22.002386"
    assert find_dois("biorxiv.org/content/10.1101/123456v1, 2017") == ["10.1101/123456"]
    assert normalize_doi("10.1101/gad.1234567.110") == "10.1101/gad.1234567.110"  # a journal DOI of the same prefix


def test_arxiv_ids_from_metadata_lose_prefix_url_version_and_category():
    assert normalize_arxiv_id("arXiv:1810.04805v2[cs.CL]") == "1810.04805"  # GROBID's TEI header idno
    assert normalize_arxiv_id("https://arxiv.org/abs/2101.00001V3") == "2101.00001"
    assert normalize_arxiv_id("math/0510508v1") == "math/0510508"
    assert normalize_arxiv_id("arXiv:hep-th/9901001") == "hep-th/9901001"
    assert normalize_arxiv_id("2212.11867") == "2212.11867"
    assert normalize_arxiv_id("not an arXiv id") is None


def test_join_lines_rejoins_hyphenated_words_urls_and_keeps_compounds():
    assert join_lines(["the detri-", "mental effect"]) == "the detrimental effect"
    assert join_lines(["Restriction-", "Modification system"]) == "Restriction-Modification system"
    assert join_lines(["see https://doi.org/", "10.1000/xyz"]) == "see https://doi.org/10.1000/xyz"
    assert join_lines(["doi:10.1186/1471-2180-13-215.", "Bühligen F, Rüdinger P"]) == (
        "doi:10.1186/1471-2180-13-215. Bühligen F, Rüdinger P"
    )


def test_entry_markers():
    assert entry_number("[12] Smith") == 12
    assert entry_number("12. Smith") == 12
    assert entry_number("2019. Smith") == 2019  # callers check the running count, not this
    assert entry_number("Smith J") is None
    assert looks_like_entry_start("Smith, J. A. et al.")
    assert not looks_like_entry_start("(A) The tumor microenvironment acts")


def test_parse_reference_list_parses_every_entry():
    references = parse_reference_list(
        ["1. Smith, J. First title here. Nature 1, 2 (2001).", "2. Doe, K. Second title here. Cell 3, 4 (2002)."]
    )
    assert [(reference.title, reference.year) for reference in references] == [
        ("First title here", 2001),
        ("Second title here", 2002),
    ]
