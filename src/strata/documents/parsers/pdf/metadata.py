"""A paper's metadata from its first page and the PDF's info dictionary: the title (printed, since publishers' info
titles are often placeholders or cut short), the authors under it, the year, the venue and the DOI."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

from strata.documents.identifiers import find_dois, normalize_doi
from strata.documents.parsers.pdf.layout import Line, half_points
from strata.documents.parsers.pdf.text import match_key, unescaped
from strata.documents.references import join_lines

_PLACEHOLDER_TITLE = re.compile(r"^(?:untitled|title|microsoft|document\d*)\b|\.(?:docx?|pdf|tex|indd)$", re.I)
_NAME = re.compile(r"^[A-Z][\w'’.\-]*(?:\s+[A-Z][\w'’.\-]*){1,3}$")
_AUTHOR_MARKS = re.compile(r"[\d*†‡§¶#✉✝]+|\(\s*\)")
_YEAR = r"(?:19[5-9]\d|20\d\d)"
_STATED_YEAR = re.compile(
    rf"(?:©|\(c\)|copyright|published|posted|accepted|available online)[^\n]{{0,40}}?(?<!\d)({_YEAR})(?!\d)", re.I
)
_ANY_YEAR = re.compile(rf"(?<!\d)({_YEAR})(?!\d)")
_MAX_VENUE_FIELD = 200  # a longer subject field holds a whole abstract, as some publishers put there


def clean_metadata_title(raw: str | None) -> str:
    """The info dictionary's title, or '' when it is a placeholder ('Untitled', 'Microsoft Word - draft.docx')."""
    title = unescaped(raw or "")
    if len(title.split()) < 3 or _PLACEHOLDER_TITLE.search(title):
        return ""
    return title


_MAX_TITLE_LINES = 12


def printed_title(lines: list[Line], body_size: float, metadata_title: str) -> tuple[str, set[int]]:
    """The title and the indices of the lines printing it: the largest text near the top of the first pages, when it
    is larger than the running text (of `body_size`)."""
    candidates = [index for index, line in enumerate(lines) if line.page <= 2 and len(line.text) > 1]
    if not candidates:
        return metadata_title, set()
    best = max(candidates, key=lambda index: (lines[index].size, -index))
    if half_points(lines[best].size) <= body_size:
        # Nothing is set apart: on a short page printed in one size the largest text is the running text itself.
        return metadata_title, set()
    size = lines[best].size
    page = lines[best].page
    same_look = lambda index: (  # noqa: E731
        index in candidates and abs(lines[index].size - size) < 0.5 and lines[index].page == page
    )
    start = best
    while best - start <= _MAX_TITLE_LINES and same_look(start - 1):
        start -= 1
    end = best + 1
    while end - best <= _MAX_TITLE_LINES and same_look(end):
        end += 1
    if end - start > _MAX_TITLE_LINES:
        # A run of same-size lines this long is body text, not a title (and joining all of a huge page's lines took
        # quadratic time).
        return metadata_title, set()
    printed = join_lines([line.text for line in lines[start:end]])
    printed_key, metadata_key = match_key(printed), match_key(metadata_title)
    if metadata_title and printed_key.startswith(metadata_key) and len(printed) > len(metadata_title):
        return printed, set(range(start, end))  # the metadata holds a cut-off title
    if metadata_title:
        matches = printed_key[:24] and metadata_key.startswith(printed_key[:24])
        return metadata_title, set(range(start, end)) if matches else set()
    if len(printed.split()) < 3 or len(printed) > 400:
        return "", set()
    return printed, set(range(start, end))


def find_authors(lines: list[Line], title_lines: set[int], metadata_author: str | None) -> list[str]:
    """Names printed right under the title, else the PDF's author field."""
    if title_lines:
        after = max(title_lines) + 1
        printed = " ".join(line.text for line in lines[after : after + 3] if line.page == lines[after - 1].page)
        names = _names(_AUTHOR_MARKS.sub(" ", printed))
        if names:
            return names
    return _metadata_authors(metadata_author or "")


def _names(text: str) -> list[str]:
    pieces = [" ".join(piece.split()) for piece in re.split(r",|;|\band\b|&", text)]
    pieces = [piece for piece in pieces if piece]
    names = [piece for piece in pieces if _NAME.match(piece)]
    return names if names and len(names) >= 0.6 * len(pieces) else []


def _metadata_authors(raw: str) -> list[str]:
    raw = unescaped(raw)
    if not raw:
        return []
    if ";" in raw:
        return [name.strip() for name in raw.split(";") if name.strip()]
    pieces = [piece.strip() for piece in re.split(r",|\band\b", raw) if piece.strip()]
    if len(pieces) == 2 and all(len(piece.split()) == 1 for piece in pieces):  # 'McVey, Mitch'
        return [f"{pieces[1]} {pieces[0]}"]
    return pieces


def find_year(first_page_text: str, metadata: dict[str, str]) -> int | None:
    """The latest year the first page states (copyright, published, posted), else the year in the publisher's subject
    field, else the file's creation year, else the first page's most frequent year (citations make that a weak
    guess)."""
    stated = [int(year) for year in _STATED_YEAR.findall(first_page_text)]
    if stated:
        return max(stated)
    in_subject = _ANY_YEAR.search(metadata.get("subject") or "")
    created = re.match(r"D:(\d{4})", metadata.get("creationDate") or "")
    for found in (in_subject, created):
        if found:
            return int(found.group(1))
    years = Counter(int(year) for year in _ANY_YEAR.findall(first_page_text))
    return years.most_common(1)[0][0] if years else None


def find_venue(subject: str | None) -> str | None:
    """The journal from a publisher's subject field ('Cell, 187 (2024) 1762-1777. doi:...' -> 'Cell')."""
    subject = " ".join((subject or "").split())
    if len(subject) > _MAX_VENUE_FIELD:
        return None
    for part in subject.split(";"):
        if part.strip() and not part.strip().lower().startswith("doi"):
            venue = re.split(r",|\s\d|\bdoi\b", part, maxsplit=1, flags=re.IGNORECASE)[0].strip(" .:")
            return venue if 1 <= len(venue.split()) <= 8 else None
    return None


def find_doi(path: Path, metadata: dict[str, str], first_page_text: str) -> str | None:
    """The DOI the file is named after (LitQA2 names files by URL-encoded DOI), else the metadata's, else page 1's."""
    stem = unquote(path.stem)
    if stem.startswith("10."):
        return normalize_doi(stem)
    for value in (metadata.get("subject"), metadata.get("keywords")):
        found = find_dois(value or "")
        if found:
            return found[0]
    found = find_dois(first_page_text)
    return found[0] if found else None
