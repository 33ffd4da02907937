"""Deterministic validation of an answer against the corpus: nothing the store cannot reproduce is ever cited.

Each piece of evidence must name a paper in the store and a locator into that paper whose text contains the evidence
text and its quote (compared case- and whitespace-insensitively). Failing evidence is removed; a claim left citing no
valid evidence is dropped; an answer whose claims were all dropped is marked unsupported; a multiple-choice answer
must be one of the options. Section path, page and title are taken from the store, not from the answer. Citation
marks and locators written inside the answer's prose are removed: citations live only in claims' validated numbers
(a mark left in the prose would point at renumbered evidence, or at nothing).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from strata.documents.model import Locator
from strata.read.model import Answer, Claim, Evidence
from strata.store.protocol import PaperStore


# "[3]", "[1, 2]", "[2-4]", and locators such as "paper_id#120-480" (the form `Locator` prints).
INLINE_CITATION = re.compile(r"\s*\[\d+(?:\s*[,;\u2013-]\s*\d+)*\]|\s*\(?\b[\w.:/-]+#\d+-\d+\b\)?")


def without_inline_citations(text: str) -> str:
    return INLINE_CITATION.sub("", text).strip()


def normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def check_evidence(evidence: Evidence, store: PaperStore) -> tuple[Evidence | None, str]:
    """(the evidence with store-given title, section path and page, '') or (None, why it was rejected)."""
    if not store.has_paper(evidence.paper_id):
        return None, f"[{evidence.number}] cites paper {evidence.paper_id!r}, which is not in the corpus"
    try:
        locator = Locator.parse(evidence.locator)
    except ValueError as error:
        return None, f"[{evidence.number}] {error}"
    if locator.paper_id != evidence.paper_id:
        return None, f"[{evidence.number}] locator {evidence.locator} is not in paper {evidence.paper_id}"
    try:
        located, text = store.locate(locator)
    except (KeyError, ValueError) as error:
        return None, f"[{evidence.number}] {error}"
    source = normalized(text)
    for what, claimed in (("text", evidence.text), ("quote", evidence.quote)):
        if normalized(claimed) not in source:
            return None, f"[{evidence.number}] the {what} is not in {evidence.locator}: {claimed[:80]!r}"
    if not normalized(evidence.text):
        return None, f"[{evidence.number}] has no evidence text"
    title = store.paper_summaries([evidence.paper_id])[evidence.paper_id].title
    return evidence.model_copy(
        update={"title": title, "section_path": located.section_path, "page": located.page}
    ), ""


def validate_answer(answer: Answer, store: PaperStore, options: Sequence[str] | None = None) -> Answer:
    """The answer with only validated, cited evidence (renumbered from 1 in order) and the claims it supports."""
    rejections = list(answer.rejections)
    valid: dict[int, Evidence] = {}
    for item in answer.evidence:
        checked, why = check_evidence(item, store)
        if item.number in valid:
            why = f"[{item.number}] is numbered twice; the first one is kept"
        if checked is None or why:
            rejections.append(why)
            continue
        valid[item.number] = checked
    claims: list[Claim] = []
    for claim in answer.claims:
        citations = [number for number in claim.citations if number in valid]
        if citations:
            text = without_inline_citations(claim.text)
            claims.append(claim.model_copy(update={"citations": citations, "text": text}))
        else:
            rejections.append(f"claim dropped, none of its citations {claim.citations} is valid: {claim.text[:80]!r}")
    cited = {number for claim in claims for number in claim.citations}
    renumbered = {old: new for new, old in enumerate((n for n in valid if n in cited), start=1)}
    claims = [
        claim.model_copy(update={"citations": sorted({renumbered[number] for number in claim.citations})})
        for claim in claims
    ]
    evidence = [valid[old].model_copy(update={"number": new}) for old, new in renumbered.items()]
    choice = answer.choice
    if answer.format == "mc" and choice is not None and choice not in (options or []):
        rejections.append(f"choice {choice!r} is not one of the options")
        choice = None
    supported = bool(claims) and (answer.format != "mc" or choice is not None)
    return answer.model_copy(
        update={
            "text": without_inline_citations(answer.text),
            "evidence": evidence,
            "claims": claims,
            "choice": choice,
            "supported": supported if answer.answerable else answer.supported,
            "dropped_claims": answer.dropped_claims + len(answer.claims) - len(claims),
            "rejections": rejections,
        }
    )
