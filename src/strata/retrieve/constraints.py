"""Venue and year restrictions a question names, found by rule, and the test whether a paper satisfies them.

Rules first because the embedded LLM is weak: it may add a venue or year, but only one the question's text contains
(`merge_llm_constraints`), so it can never invent a restriction that drops papers.
"""

from __future__ import annotations

import re

from strata.retrieve.rounds import Constraints, Subqueries
from strata.store.sqlite import PaperSummary

YEAR = r"(19[5-9]\d|20[0-4]\d)"
# Canonical venue name -> patterns that name it in a question or in a paper's venue field.
VENUES: dict[str, tuple[str, ...]] = {
    "NeurIPS": (r"neurips", r"nips", r"neural information processing systems"),
    "ICML": (r"icml", r"international conference on machine learning"),
    "ICLR": (r"iclr", r"international conference on learning representations"),
    "ACL": (r"acl", r"annual meeting of the association for computational linguistics"),
    "EMNLP": (r"emnlp", r"empirical methods in natural language processing"),
    "NAACL": (r"naacl",),
    "COLING": (r"coling",),
    "CVPR": (r"cvpr", r"computer vision and pattern recognition"),
    "ICCV": (r"iccv", r"international conference on computer vision"),
    "ECCV": (r"eccv", r"european conference on computer vision"),
    "AAAI": (r"aaai",),
    "IJCAI": (r"ijcai",),
    "KDD": (r"kdd", r"knowledge discovery and data mining"),
    "SIGIR": (r"sigir",),
    "TMLR": (r"tmlr", r"transactions on machine learning research"),
    "Nature": (r"nature",),
    "Science": (r"science",),
    "Cell": (r"cell",),
}
_VENUE_PATTERNS = {
    name: re.compile(r"\b(?:" + "|".join(patterns) + r")\b", re.IGNORECASE) for name, patterns in VENUES.items()
}
# Journals are ordinary words ("cell", "nature", "science"): only count them as a venue in a question when they are
# capitalised and introduced as one ("in Nature", "published in Cell").
_JOURNALS = {"Nature", "Science", "Cell"}
_JOURNAL_IN_QUESTION = re.compile(r"\b(?:in|at|from)\s+(Nature|Science|Cell)\b")
# A year restricts publication only when the question ties it to a venue ("NeurIPS 2023", "ICLR'24") or to a
# publication word ("papers since 2020", "a 2021 study", "published between 2019 and 2021"); "incidence fell since
# 1979" or "1/2000 patients" are about the content, not the paper.
_PUBLICATION = r"(?:published|appeared|released|papers?|stud(?:y|ies)|articles?|works?|publications?|proceedings)"
_VENUE_NAMES = "|".join(pattern for patterns in VENUES.values() for pattern in patterns)
_VENUE_YEAR = re.compile(rf"\b(?:{_VENUE_NAMES})\s*(?:'(\d\d)\b|{YEAR}\b)", re.IGNORECASE)
_YEAR_PUBLICATION = re.compile(rf"(?<![/\d]){YEAR}\s+{_PUBLICATION}\b", re.IGNORECASE)
_ANCHORED = re.compile(
    rf"\b{_PUBLICATION}\b[^.?!;]{{0,30}}?\b(between|from|since|in or after|after|before|prior to|until|in)\s+{YEAR}"
    rf"(?:\s*(?:and|to|-|–)\s*{YEAR})?\b",
    re.IGNORECASE,
)


def extract_constraints(question: str) -> Constraints:
    """Venues named in `question`, and publication years tied to a venue or publication word: 'NeurIPS 2023',
    'a 2021 study', 'papers between 2019 and 2021' / 'from 2018-2020', 'since 2020', 'after 2020', 'before 2018'."""
    years: set[int] = set()
    year_min = year_max = None
    for match in _VENUE_YEAR.finditer(question):
        years.add(2000 + int(match.group(1)) if match.group(1) else int(match.group(2)))
    years |= {int(match.group(1)) for match in _YEAR_PUBLICATION.finditer(question)}
    for match in _ANCHORED.finditer(question):
        word, first, second = match.group(1).lower(), int(match.group(2)), match.group(3)
        if second is not None:
            year_min, year_max = sorted((first, int(second)))
        elif word in ("since", "in or after", "from"):
            year_min = first
        elif word == "after":
            year_min = first + 1
        elif word in ("before", "prior to"):
            year_max = first - 1
        elif word == "until":
            year_max = first
        else:
            years.add(first)
    return Constraints(venues=_venues_in_question(question), years=sorted(years), year_min=year_min, year_max=year_max)


def mentions_publication(question: str) -> bool:
    """Whether the question speaks of papers or venues at all, so that a year in it may be a publication year."""
    return bool(re.search(rf"\b{_PUBLICATION}\b", question, re.IGNORECASE)) or bool(_venues_in_question(question))


def _venues_in_question(question: str) -> list[str]:
    found = {name for name, pattern in _VENUE_PATTERNS.items() if name not in _JOURNALS and pattern.search(question)}
    found |= {match.group(1) for match in _JOURNAL_IN_QUESTION.finditer(question)}
    return sorted(found)


def merge_llm_constraints(constraints: Constraints, question: str, answer: Subqueries) -> Constraints:
    """Add the LLM's venue/year when the rules missed it and the question's text names it (a year only in a
    question that speaks of papers or venues)."""
    venues, years = list(constraints.venues), list(constraints.years)
    if answer.venue:
        name = canonical_venue(answer.venue)
        if name and name not in venues and _VENUE_PATTERNS[name].search(question):
            venues.append(name)
    has_bound = constraints.year_min is not None or constraints.year_max is not None
    named = re.search(rf"(?<![/\d]){answer.year}\b", question) if answer.year is not None else None
    if answer.year is not None and not has_bound and answer.year not in years and named and mentions_publication(
        question
    ):
        years.append(answer.year)
    return constraints.model_copy(update={"venues": sorted(venues), "years": sorted(years)})


def canonical_venue(text: str) -> str | None:
    """The canonical name of the first known venue `text` names, or None."""
    for name, pattern in _VENUE_PATTERNS.items():
        if pattern.search(text):
            return name
    return None


def satisfies(paper: PaperSummary, constraints: Constraints) -> bool:
    """False only when the paper's known year or venue contradicts the constraints; unknown metadata passes."""
    if paper.year is not None:
        if constraints.years and paper.year not in constraints.years:
            return False
        if constraints.year_min is not None and paper.year < constraints.year_min:
            return False
        if constraints.year_max is not None and paper.year > constraints.year_max:
            return False
    if paper.venue and constraints.venues:
        return any(_VENUE_PATTERNS[name].search(paper.venue) for name in constraints.venues)
    return True
