"""Section locators from the ToC stage for evidence whose paper has no outline of its own.

A parsed paper's chunks already carry the section path of the ToC leaf that owns them. A document without an
outline (a plain-text report, a PDF without headings the parser recognised) gets the leaf of its induced ToC
(`strata.toc.induce`: headings written in the text, else embedding segments), so every citation can still name
a section. Segments are titled by their first words here: titling them with the LLM would cost a call per segment
for every cited document.
"""

from __future__ import annotations

from strata.config import Settings
from strata.documents.model import Locator
from strata.read.model import Answer, Evidence
from strata.store.protocol import PaperStore
from strata.toc.induce import induce_toc, needs_induction
from strata.toc.model import DocumentToc


def with_toc_sections(answer: Answer, store: PaperStore, settings: Settings) -> Answer:
    """The answer with a section path on every piece of evidence its paper's (induced) ToC can place."""
    unplaced = sorted({item.paper_id for item in answer.evidence if not item.section_path})
    tocs: dict[str, DocumentToc] = {}
    for paper_id in unplaced:
        paper = store.get_paper(paper_id)
        if needs_induction(paper) and paper.chunks:
            tocs[paper_id] = induce_toc(paper, settings, client=None)
    if not tocs:
        return answer
    evidence = [_placed(item, tocs.get(item.paper_id)) for item in answer.evidence]
    return answer.model_copy(update={"evidence": evidence})


def _placed(item: Evidence, toc: DocumentToc | None) -> Evidence:
    if toc is None or item.section_path:
        return item
    leaf = toc.leaf_at(Locator.parse(item.locator).char_start)
    return item if leaf is None else item.model_copy(update={"section_path": leaf.path})
