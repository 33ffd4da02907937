"""Deterministic validation of an answer against the corpus: nothing the store cannot reproduce is ever cited.

Each piece of evidence must name a paper in the store and a locator into that paper whose text contains the evidence
text and its quote (compared case- and whitespace-insensitively), outside a reference list. Failing evidence is
removed. Then content: a fact's value and unit must be written in the passage it cites, a calculation must compute
from the facts kept, a multiple-choice answer's passage must state the chosen option (`strata.read.grounding`
normalises both) unless the option only restates the question's alternatives (a verdict, which no passage words). A claim left citing no valid evidence is dropped; an answer whose claims were all dropped is
marked unsupported; a multiple-choice answer must be one of the options. Section path, page and title are taken from
the store, not from the answer. Citation marks and locators written inside the answer's prose are removed: citations
live only in claims' validated numbers (a mark left in the prose would point at renumbered evidence, or at nothing).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from strata.documents.model import Locator
from strata.read.calculate import compute, fact_number
from strata.read.grounding import contains_sequence, fine_tokens, mentions, states_content
from strata.read.local import REFERENCE_HEADING
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
    if any(REFERENCE_HEADING.match(title) for title in located.section_path[-1:]):
        return None, f"[{evidence.number}] is a reference-list entry, which states no finding of the paper"
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
    claims = stated_claims(answer, claims, valid, options or [], rejections)
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


def stated_claims(
    answer: Answer, claims: list[Claim], valid: dict[int, Evidence], options: Sequence[str], rejections: list[str]
) -> list[Claim]:
    """The claims whose content their cited passages state: a fact's value and unit, a multiple-choice answer's
    option (exactly or normalised), a calculation recomputed from the facts kept. A citation whose passage does not
    state the claim is removed; a claim left citing nothing is dropped (each with a line in `rejections`)."""
    kept: list[Claim] = []
    for claim in claims:
        if claim.expression is not None:
            continue  # calculations are checked below, against the facts that survive
        if claim.value is not None:
            stating = [n for n in claim.citations if states_value(claim.value, claim.unit or "", valid[n].text)]
            what = f"the value {claim.text!r}"
        elif answer.format == "mc" and claim.text == answer.choice and states_content(claim.text, options,
                                                                                      answer.question):
            stating = [n for n in claim.citations if mentions(claim.text, valid[n].text, options, answer.question)]
            what = f"the chosen option {claim.text!r}"
        else:
            kept.append(claim)
            continue
        rejections.extend(f"[{n}] does not state {what}" for n in claim.citations if n not in stating)
        if stating:
            kept.append(claim.model_copy(update={"citations": stating}))
        else:
            rejections.append(f"claim dropped, no cited passage states {what}")
    facts = [claim for claim in kept if claim.value is not None]
    for claim in claims:
        if claim.expression is not None and (checked := recomputed(claim, facts, rejections)) is not None:
            kept.append(checked)
    return kept


def states_value(value: str, unit: str, passage: str) -> bool:
    """Whether the passage states the value (numbers compared in one spelling: '4.20' is '4.2', '1,250' is '1250')
    with its unit within a few tokens of it ('12 ± 3 g', 'mass (g): 12'); spacing, case and dashes do not matter."""
    tokens, wanted, units = fine_tokens(passage), fine_tokens(value), fine_tokens(unit)
    if not wanted:
        return False
    if units and wanted[-len(units) :] == units:  # the value already carries its unit ('5 g')
        units = []
    width = len(wanted)
    for start in range(len(tokens) - width + 1):
        if tokens[start : start + width] != wanted:
            continue
        near = tokens[max(0, start - UNIT_WINDOW) : start + width + UNIT_WINDOW + len(units)]
        if not units or contains_sequence(near, units):
            return True
    return False


UNIT_WINDOW = 6  # tokens either side of a value within which its unit must be written


def recomputed(claim: Claim, facts: Sequence[Claim], rejections: list[str]) -> Claim | None:
    """The calculation citing the passages of the facts it uses, when it still computes, to the value it claims,
    from the facts validation kept (its own citations may name a passage that validation rejected); else None."""
    try:
        result, citations = compute(claim.expression or "", facts)
    except ValueError as error:
        rejections.append(f"calculation dropped: {error}")
        return None
    if fact_number(claim.value or "") != float(f"{result:.6g}"):
        rejections.append(f"calculation dropped: {claim.expression} is {result:.6g}, not {claim.value}")
        return None
    return claim.model_copy(update={"citations": citations})
