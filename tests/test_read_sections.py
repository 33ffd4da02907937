"""Evidence from a document without an outline gets its section from the induced ToC; evidence that already has a
section keeps it."""

from pathlib import Path

from strata.config import Settings
from strata.documents.builder import PaperBuilder
from strata.documents.model import Locator
from strata.read.model import Answer, Claim, Evidence
from strata.read.sections import with_toc_sections
from strata.store.sqlite import CorpusStore

REPORT = [
    "# Field methods",
    "Traps were set at dawn along the river.",
    "# Results",
    "Controls gained 5 g over four weeks.",
]


def evidence(number: int, store: CorpusStore, paper_id: str, quote: str) -> Evidence:
    text = store.paper_text(paper_id)
    start = text.index(quote)
    locator = Locator(paper_id=paper_id, char_start=start, char_end=start + len(quote))
    return Evidence(number=number, paper_id=paper_id, title="", locator=str(locator), text=quote)


def test_evidence_of_an_outline_less_document_is_placed_in_its_induced_section(tmp_path: Path):
    settings = Settings.load(overrides={"store.home": str(tmp_path), "index.dense": False})
    with CorpusStore(tmp_path / "corpus.sqlite3") as store:
        plain = PaperBuilder("report", "test")
        for block in REPORT:
            plain.add_block(block)
        store.put_paper(plain.build(title="Field report"), "sha-report")
        outlined = PaperBuilder("paper", "test")
        outlined.open_section("Discussion", level=1)
        outlined.add_block("Controls gained 5 g, as before.")
        store.put_paper(outlined.build(title="Paper"), "sha-paper")
        items = [evidence(1, store, "report", "Controls gained 5 g over four weeks."),
                 evidence(2, store, "paper", "Controls gained 5 g, as before.")]  # fmt: skip
        items[1] = items[1].model_copy(update={"section_path": ("Discussion",)})
        answer = Answer(question="q", format="text", text="5 g", claims=[Claim(text="5 g", citations=[1, 2])],
                        evidence=items)  # fmt: skip
        placed = with_toc_sections(answer, store, settings)
    assert [item.section_path for item in placed.evidence] == [("Results",), ("Discussion",)]
