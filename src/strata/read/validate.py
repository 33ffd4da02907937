"""Deterministic validation of an answer against the corpus: nothing the store cannot reproduce is ever cited.

Each piece of evidence must name a paper in the store and a locator into that paper whose text contains the evidence
text and its quote (compared case- and whitespace-insensitively; both are then kept as the store writes them),
outside a reference list. Failing evidence is removed. Then content: a fact's value and unit must be written in the
passage it cites, a calculation must compute from the facts kept, a multiple-choice answer's passage must state the
chosen option (`strata.read.grounding` normalises both) unless the option only restates the question's alternatives
(a verdict, which no passage words). A claim left citing no valid evidence is dropped; an answer whose claims were all
dropped is marked unsupported (a table keeps only the rows whose claim is kept); a multiple-choice answer must
be one of the options. Section path, page and title are taken from the store, not from the answer. Citation marks and
locators written inside the answer's prose and a table's cells are removed: citations live only in claims' validated
numbers (a mark left in the prose would point at renumbered evidence, or at nothing).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Sequence

from strata.documents.model import Locator
from strata.read.calculate import compute, fact_number
from strata.read.grounding import (
    first_number,
    fine_tokens,
    is_number,
    mentions,
    name_numbers,
    read_numbers,
    states_content,
    unit_tokens,
    without_inline_citations,
)
from strata.read.local import REFERENCE_HEADING
from strata.read.model import Answer, Claim, Evidence
from strata.store.protocol import PaperStore


def normalized(text: str) -> str:
    return _normal_form(text)[0]


def _normal_form(text: str) -> tuple[str, list[tuple[int, int]]]:
    """`text` in compatibility form, case folded, whitespace runs one space and none at either end; and per
    character of it, the span of `text` it comes from (a character and its combining marks are normalised as one,
    as NFKC composes them)."""
    starts = [at for at, char in enumerate(text) if not at or not unicodedata.combining(char)]
    chars: list[str] = []
    spans: list[tuple[int, int]] = []
    for start, end in zip(starts, [*starts[1:], len(text)]):
        for char in unicodedata.normalize("NFKC", text[start:end]).casefold():
            space = char.isspace()
            if space and (not chars or chars[-1] == " "):
                continue
            chars.append(" " if space else char)
            spans.append((start, end))
    if chars and chars[-1] == " ":
        del chars[-1], spans[-1]
    return "".join(chars), spans


def verbatim(claimed: str, text: str) -> str | None:
    """The part of `text` that `claimed` is once both are normalised, as `text` writes it ('' for ''); None when
    `text` holds no such part."""
    wanted = normalized(claimed)
    source, spans = _normal_form(text)
    at = source.find(wanted)
    if at < 0:
        return None
    return text[spans[at][0] : spans[at + len(wanted) - 1][1]] if wanted else ""


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
    found: dict[str, str] = {}
    for what, claimed in (("text", evidence.text), ("quote", evidence.quote)):
        if (stored := verbatim(claimed, text)) is None:
            return None, f"[{evidence.number}] the {what} is not in {evidence.locator}: {claimed[:80]!r}"
        found[what] = stored
    if not found["text"]:
        return None, f"[{evidence.number}] has no evidence text"
    if any(REFERENCE_HEADING.match(title) for title in located.section_path[-1:]):
        return None, f"[{evidence.number}] is a reference-list entry, which states no finding of the paper"
    title = store.paper_summaries([evidence.paper_id])[evidence.paper_id].title
    store_given = {"title": title, "section_path": located.section_path, "page": located.page}
    return evidence.model_copy(update={**found, **store_given}), ""  # text and quote as the corpus writes them


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
    # A text answer stands on its prose: facts kept beside prose that was dropped do not support it.
    prose_dropped = answer.format == "text" and _has_prose(answer.claims) and not _has_prose(claims)
    supported = bool(claims) and not prose_dropped and (answer.format != "mc" or choice is not None)
    table = validated_table(answer, {claim.text for claim in claims})
    return answer.model_copy(
        update={
            # A table's text is its rows: only those kept.
            "text": "\n".join(claim.text for claim in claims) if table else without_inline_citations(answer.text),
            "table": table,
            "evidence": evidence,
            "claims": claims,
            "choice": choice,
            "supported": supported if answer.answerable else answer.supported,
            "dropped_claims": answer.dropped_claims + len(answer.claims) - len(claims),
            "rejections": rejections,
        }
    )


def _has_prose(claims: Sequence[Claim]) -> bool:
    return any(claim.value is None and claim.expression is None for claim in claims)


def validated_table(answer: Answer, kept: Collection[str]) -> list[list[str]] | None:
    """A table answer's header and the rows whose claim (a row's cells joined by ' | ', citation marks stripped) was
    kept, their cells without citation marks; None for other answers."""
    if not answer.table:
        return None
    header, *rows = answer.table
    stripped = [[without_inline_citations(cell) for cell in row] for row in rows]
    return [[without_inline_citations(cell) for cell in header],
            *[row for row in stripped if without_inline_citations(" | ".join(row)) in kept]]  # fmt: skip


def stated_claims(
    answer: Answer, claims: list[Claim], valid: dict[int, Evidence], options: Sequence[str], rejections: list[str]
) -> list[Claim]:
    """The claims whose content their cited passages state: a fact's value and unit, a multiple-choice answer's
    option (exactly or normalised), a calculation recomputed from the facts kept, and every number of any other
    claim (the answer's prose, a table row). A citation whose passage does not state the claim is removed; a claim
    left citing nothing is dropped (each with a line in `rejections`)."""
    kept: list[Claim] = []
    prose: list[Claim] = []
    # The option as the claims were stripped of citation marks: an option's '[2]' names a reference the question
    # cites, which the passage need not state (and left in, it would keep the claim from being seen as the choice).
    choice = without_inline_citations(answer.choice or "")
    bare = [without_inline_citations(option) for option in options]
    for claim in claims:
        if claim.expression is not None:
            continue  # calculations are checked below, against the facts that survive
        if claim.value is not None:
            stating = [n for n in claim.citations if states_value(claim.value, claim.unit or "", valid[n].text)]
            what = f"the value {claim.text!r}"
        elif answer.format == "mc" and claim.text == choice and states_content(choice, bare, answer.question):
            stating = [n for n in claim.citations if mentions(choice, valid[n].text, bare, answer.question)]
            what = f"the chosen option {claim.text!r}"
        else:
            prose.append(claim)
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
    known = {fact_number(claim.value or "") for claim in kept}  # values checked above may be restated in prose
    for claim in prose:
        unstated = [number for number in read_numbers(claim.text) if number not in known and not any(
            states_value(f"{number:g}", "", f"{valid[n].text} {valid[n].quote}") for n in claim.citations)]  # fmt: skip
        if unstated:
            rejections.append(f"claim dropped, no cited passage states its number {unstated[0]:g}: {claim.text[:80]!r}")
        else:
            kept.append(claim)
    order = {id(claim): at for at, claim in enumerate(claims)}  # the answer's order: its prose first
    return sorted(kept, key=lambda claim: order.get(id(claim), len(claims)))


def states_value(value: str, unit: str, passage: str) -> bool:
    """Whether the passage states the value (numbers compared in one spelling: '4.20' is '4.2', '1,250' is '1250')
    with its unit within a few tokens of it and no other number between ('12 ± 3 g', 'mass (g): 12'); spacing,
    dashes and the case of words do not matter, the case of a unit symbol does (`unit_form`)."""
    tokens, wanted, written, units = fine_tokens(passage), fine_tokens(value), unit_tokens(passage), unit_tokens(unit)
    if not wanted:
        return False
    if units and unit_tokens(value)[-len(units) :] == units:  # the value already carries its unit ('5 g')
        units = []
    width, names = len(wanted), name_numbers(passage)  # '6' is not stated by 'IL-6', nor '53' by 'p53'
    return any(
        tokens[start : start + width] == wanted and start not in names
        and (not units or has_unit(written, start, start + width, units))
        for start in range(len(tokens) - width + 1)
    )


UNIT_WINDOW = 6  # tokens either side of a value within which its unit must be written


def has_unit(tokens: list[str], start: int, end: int, unit: list[str]) -> bool:
    """Whether `unit` is written within UNIT_WINDOW tokens of tokens[start:end] with no other number between them:
    in '12 patients received 5 mg' the mg is the 5's, and in 'from 5 mg to 12 g' the mg before the 12 is the 5's."""
    width = len(unit)
    for at in [*range(max(0, start - UNIT_WINDOW), start - width + 1), *range(end, end + UNIT_WINDOW + 1)]:
        between = tokens[at + width : start] if at < start else tokens[end:at]
        owned = at < start and at > 0 and is_number(tokens[at - 1])  # a unit before the value, after another number
        if tokens[at : at + width] == unit and first_number(between) == len(between) and not owned:
            return True
    return False


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
