"""Split a printed reference list into entries and read each entry's DOI, arXiv id, year and title.

Written by hand because nothing usable here does it (GROBID cannot run in this environment). It works on the lines
of a reference section as a PDF lays them out and tries, in order: numbered entries ('[12]', '12.', '12 Smith'),
hanging indents, entries as separate text blocks, and finally 'a line that starts with a surname after a line that
ended an entry'. Parsing an entry is best-effort: identifiers and the year are reliable, the title is a guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from strata.documents.identifiers import ARXIV_ID, find_arxiv_id, find_dois, normalize_doi
from strata.documents.model import Reference


@dataclass(frozen=True, slots=True)
class ReferenceLine:
    """One printed line of a reference list."""

    text: str
    indent: float = 0.0  # points right of the column's left edge; 0 when unknown
    starts_block: bool = False  # the PDF laid this line out as the first of a text block
    page: int | None = None
    link_dois: tuple[str, ...] = ()  # DOIs of hyperlinks laid over the line ('Article', 'CrossRef', 'Google Scholar')


@dataclass(frozen=True, slots=True)
class PrintedReference:
    """One entry of a reference list as printed, with the page it starts on."""

    text: str
    page: int | None = None
    link_dois: tuple[str, ...] = ()


_MARKER = re.compile(r"^\s*(?:\[(\d{1,4})\]|\((\d{1,4})\)|(\d{1,4})\.(?!\d)|(\d{1,4})(?=\s+\S))\s*")
_BARE_MARKER = re.compile(r"^\s*(?:\[\d{1,4}\]|\(\d{1,4}\)|\d{1,4}\.?)\s*$")
_MAX_NUMBER_GAP = 3  # a numbered list may skip a few numbers (entries lost to extraction)
_MAX_FIRST_NUMBER = 50  # a list (or its part after a page break) starts low
_HANGING_INDENT_PT = 3.0
_MIN_ENTRY_WORDS = 6
_SURNAME_START = re.compile(
    r"^(?:[A-Z][A-Za-z'’\-]*\s+){0,2}[A-Z][A-Za-z'’\-]+,?\s+(?:[A-Z]{1,3}\b|[A-Z]\.|[A-Z][a-z]+)"
    r"|^(?:[A-Z]\.\s?){1,3}[A-Z][A-Za-z'’\-]+"
)
_ENTRY_END = re.compile(r"[.)\]]$|\d$")
_URL_TOKEN = re.compile(r"(?:https?://|www\.|doi\.org|\b10\.\d{4,9}/)\S*$", re.IGNORECASE)
_YEAR = r"(?:1[89]\d\d|20\d\d)"
_PAREN_YEAR = re.compile(rf"\(({_YEAR})[a-z]?\)")
_BARE_YEAR = re.compile(rf"(?<![\d/.\-])({_YEAR})[a-z]?(?![\d/])")
_LEADING_YEAR = re.compile(rf"^[\s.,:;]*(?:\(?{_YEAR}[a-z]?\)?[.,:;]?\s*)?")
_URL_OR_DOI = re.compile(r"(?:https?://|www\.|doi:\s*|\b10\.\d{4,9}/)\S*", re.IGNORECASE)
# Not after a middle initial between given name and surname ('Matthew E. Peters'): the names would split in two.
_SEGMENT_END = re.compile(rf"(?<=[.?!])(?<!\b[A-Z]\.)\s+(?=\S)|(?<=\({_YEAR}\))\s+|(?<=\({_YEAR}[a-z]\))\s+")
_INITIAL_END = re.compile(r"(?:^|[\s,.\-])(?:[A-Z]{1,3}|[A-Z][a-z]?)\.$|et al\.?$|\b[A-Z]{1,3}$")
_SPECIES_CUT = re.compile(r"\s[A-Z]\.$")  # 'E.' of 'E. coli': the title goes on
_YEAR_SEGMENT = re.compile(rf"^\(?{_YEAR}[a-z]?\)?[.,:]?$")
_NAME_PARTICLES = frozenset({"and", "et", "al", "van", "von", "der", "den", "de", "del", "della", "di", "da", "dos"})
_VENUE_NUMBERS = re.compile(r"\d+\s*[,:(]\s*\d|\bvol\.|\bpp\.", re.IGNORECASE)
_QUOTES = "\"'“”‘’«»"

# An author list at the start of an entry: 'Smith, J. A.', 'Smith JA', 'J. A. Smith', each optionally 'et al.'.
_CAPITAL = r"[^\W\d_a-z]"  # a letter that is not an ASCII lower-case one: names start with (accented) capitals
_NAME_WORD = rf"{_CAPITAL}[\w'’\-]*"
_SURNAME = rf"(?:(?:van|von|de|der|den|del|della|di|da|dos|du|la|le|ten|ter)\s+)*{_NAME_WORD}(?:\s+{_NAME_WORD})?"
_INITIALS = r"(?:[A-Z]\.\s?-?){1,4}"
_NAME = (
    rf"(?:{_SURNAME},\s+{_INITIALS}|{_SURNAME}\s+[A-Z]{{1,4}}\b|{_INITIALS}\s*{_SURNAME})(?:\s+et\s+al\b\.?)?"
    r"(?:(?<=\.)|(?=\s*(?:[,;&(]|and\b|\.|$)))"
)
_AUTHOR_LIST = re.compile(
    rf"^{_NAME}(?:(?:\s*,\s*(?:and\s+|&\s*)?|\s*;\s*|\s*&\s*|\s+and\s+){_NAME})*(?:,?\s*et\s+al\b\.?)?"
)


def split_entries(lines: Sequence[ReferenceLine | str]) -> list[PrintedReference]:
    """The references printed on `lines` (plain strings are lines without layout information)."""
    typed = [line if isinstance(line, ReferenceLine) else ReferenceLine(line) for line in lines]
    typed = _attach_bare_markers([line for line in typed if line.text.strip()])
    if not typed:
        return []
    starts = next((found for strategy in _STRATEGIES if (found := strategy(typed))), [0])
    bounds = [*starts, len(typed)]
    entries = [_printed(typed[start:end]) for start, end in pairwise(bounds)]
    return [entry for entry in entries if _could_be_reference(entry.text)]


def parse_reference(raw: str, link_dois: Sequence[str] = ()) -> Reference:
    """DOI, arXiv id, year and a best-effort title of one reference string; `link_dois` are DOIs of the links laid
    over the printed entry, used when it prints none or only the start of one."""
    raw = " ".join(raw.split())
    body = _MARKER.sub("", raw, count=1)
    printed = find_dois(body)
    linked = [doi for doi in map(normalize_doi, link_dois) if doi]
    return Reference(
        raw=raw,
        title=guess_title(body),
        year=guess_year(body),
        doi=_completed_doi(printed[0], linked) if printed else next(iter(linked), None),
        arxiv_id=find_arxiv_id(body),
    )


def parse_reference_list(lines: Sequence[ReferenceLine | str]) -> list[Reference]:
    """The entries of a reference section, parsed."""
    return [parse_reference(entry.text, entry.link_dois) for entry in split_entries(lines)]


def entry_number(text: str) -> int | None:
    """The number a line opens with as a reference-list marker ('12.', '[12]', '(12)', '12 Smith'), if any."""
    found = _MARKER.match(text)
    if not found:
        return None
    return int(next(group for group in found.groups() if group is not None))


def next_entry_number(current: int | None, text: str) -> int | None:
    """The running number of a numbered list after the line `text`: its marker when that continues the count
    ('[3]' after '[2]', a few skipped numbers allowed), else `current`. A list starts at a small number."""
    number = entry_number(text)
    if number is None:
        return current
    if current is None:
        return number if number <= _MAX_FIRST_NUMBER else None
    return number if current < number <= current + _MAX_NUMBER_GAP else current


def looks_like_entry_start(text: str) -> bool:
    """Whether a printed line could open a reference: a number marker ('12.', '[12]') or a surname and initials."""
    return entry_number(text) is not None or bool(_SURNAME_START.match(text.strip()))


def join_lines(texts: Sequence[str]) -> str:
    """Printed lines as one string: words hyphenated at a line end are rejoined, and so are broken URLs and DOIs."""
    joined = ""
    for text in (" ".join(text.split()) for text in texts):
        if not text:
            continue
        if not joined:
            joined = text
        elif _URL_TOKEN.search(joined) and (joined[-1] in "/-_" or (joined[-1] == "." and not text[0].isupper())):
            joined += text
        elif joined.endswith("-") and len(joined) > 1 and joined[-2].isalpha():
            # 'detri-' + 'mental' was one word broken by the line end; 'Restriction-' + 'Modification' a compound
            joined = (joined[:-1] if joined[-2].islower() and text[:1].islower() else joined) + text
        else:
            joined += " " + text
    return joined


def guess_year(entry: str) -> int | None:
    """The publication year: a parenthesised one first ('(2019)'), else the first bare year outside URLs, DOIs and
    arXiv ids ('arXiv:1810.04805' was submitted in October 2018, not in 1810)."""
    text = ARXIV_ID.sub(" ", _URL_OR_DOI.sub(" ", entry))
    found = _PAREN_YEAR.search(text) or _BARE_YEAR.search(text)
    return int(found.group(1)) if found else None


def guess_title(entry: str) -> str | None:
    """What follows the author list (and a year right after it), up to the end of its sentence, when it reads like a
    title."""
    body = _URL_OR_DOI.sub("", entry).strip()
    authors = _AUTHOR_LIST.match(body)
    title: str | None
    if authors and authors.end() > 0:
        title = _first_sentence(_LEADING_YEAR.sub("", body[authors.end() :], count=1))
    else:
        title = _title_after_author_segments(body)
    title = (title or "").strip().rstrip(".,;:").strip(_QUOTES).strip()
    if len(title.split()) < 2 or len(title) > 400 or _VENUE_NUMBERS.search(title):
        return None
    return title


def _completed_doi(printed: str, linked: list[str]) -> str:
    """The link DOI that `printed` is the start of: a DOI cut at a line end without a hyphen ('10.1038/nchem' +
    'bio.780') cannot be told from a whole one by its text."""
    return next((doi for doi in linked if doi.startswith(printed)), printed)


def _attach_bare_markers(lines: list[ReferenceLine]) -> list[ReferenceLine]:
    """A number printed on its own line ('12.') belongs to the line after it."""
    merged: list[ReferenceLine] = []
    pending: ReferenceLine | None = None
    for line in lines:
        if _BARE_MARKER.match(line.text):
            pending = line
            continue
        if pending is not None:
            line = ReferenceLine(
                f"{pending.text.strip()} {line.text}",
                pending.indent,
                pending.starts_block,
                pending.page,
                pending.link_dois + line.link_dois,
            )
            pending = None
        merged.append(line)
    return merged


def _printed(lines: list[ReferenceLine]) -> PrintedReference:
    link_dois = dict.fromkeys(doi for line in lines for doi in line.link_dois)
    return PrintedReference(join_lines([line.text for line in lines]), lines[0].page, tuple(link_dois))


def _could_be_reference(text: str) -> bool:
    """Stray lines caught in a reference list ('Editor: G. Brown', a running title) have no year, no identifier and
    few words."""
    return len(text.split()) >= _MIN_ENTRY_WORDS or bool(_BARE_YEAR.search(text) or find_dois(text))


def _numbered_starts(lines: list[ReferenceLine]) -> list[int] | None:
    """Lines starting with the next number of a running count; the sequence guards against '12, 34–56 (2019).'."""
    current = next_entry_number(None, lines[0].text)
    if current is None:
        return None
    starts = [0]
    for index, line in enumerate(lines[1:], start=1):
        following = next_entry_number(current, line.text)
        if following != current:
            starts.append(index)
            current = following
    return starts if len(starts) >= min(3, len(lines)) and len(starts) * 8 >= len(lines) else None


def _hanging_indent_starts(lines: list[ReferenceLine]) -> list[int] | None:
    """Entries whose continuation lines are indented: starts are the lines at the column's left edge."""
    indented = [line.indent > _HANGING_INDENT_PT for line in lines]
    if not (0.15 * len(lines) <= sum(indented) < len(lines) - 1):
        return None
    return [index for index, is_indented in enumerate(indented) if not is_indented]


def _block_starts(lines: list[ReferenceLine]) -> list[int] | None:
    """Each entry its own text block: accepted when blocks are entry-sized and most hold a year."""
    starts = [index for index, line in enumerate(lines) if line.starts_block or index == 0]
    if len(starts) < 3:
        return None
    bounds = [*starts, len(lines)]
    entries = [join_lines([line.text for line in lines[start:end]]) for start, end in pairwise(bounds)]
    short = sum(len(entry) <= 700 for entry in entries)
    with_year = sum(bool(_BARE_YEAR.search(entry)) for entry in entries)
    return starts if short >= 0.9 * len(entries) and with_year >= 0.7 * len(entries) else None


def _surname_starts(lines: list[ReferenceLine]) -> list[int] | None:
    """A line that begins with a surname right after a line that ended an entry (author-year lists without layout)."""
    starts = [0] + [
        index
        for index in range(1, len(lines))
        if _ENTRY_END.search(lines[index - 1].text.rstrip()) and _SURNAME_START.match(lines[index].text.strip())
    ]
    return starts if len(starts) >= 2 else None


# Entry boundaries, most reliable evidence first.
_STRATEGIES: tuple[Callable[[list[ReferenceLine]], list[int] | None], ...] = (
    _numbered_starts,
    _hanging_indent_starts,
    _block_starts,
    _surname_starts,
)


def _first_sentence(text: str) -> str:
    segments = _SEGMENT_END.split(text.strip())
    sentence = segments[0]
    for segment in segments[1:]:
        if not _SPECIES_CUT.search(sentence):
            break
        sentence = f"{sentence} {segment}"
    return sentence


def _title_after_author_segments(body: str) -> str | None:
    """For author lists the name pattern misses ('Jacob Devlin, Ming-Wei Chang, and ...'): the first sentence-like
    segment after the name-like ones and a year."""
    segments = _SEGMENT_END.split(body)
    index = 1  # the first segment always holds (the start of) the author list
    while index < len(segments) and _is_author_segment(segments[index]):
        index += 1
    while index < len(segments) and _YEAR_SEGMENT.match(segments[index]):
        index += 1
    return _first_sentence(" ".join(segments[index:])) if index < len(segments) else None


def _is_author_segment(segment: str) -> bool:
    """'A., Doe, K.' or 'et al.': capitalised names, initials and particles only, ending like a name list does."""
    words = re.findall(r"[^\W\d_][\w'’\-]*", segment)
    if any(word[0].islower() and word not in _NAME_PARTICLES for word in words):
        return False
    return bool(_INITIAL_END.search(segment.rstrip(",")) or _PAREN_YEAR.search(segment))
