"""DOI, arXiv id and title normalisation shared by the parsers and the citation graph."""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s\"<>]+)", re.IGNORECASE)
_DOI_TRAILING = ".,;:)]}'"
_ARXIV_NEW = re.compile(r"(?:arxiv[:\s/]*|abs/|pdf/)(\d{4}\.\d{4,5})(?:v\d+)?", re.IGNORECASE)
_ARXIV_OLD = re.compile(r"(?:arxiv[:\s/]*|abs/|pdf/)([a-z\-]+(?:\.[A-Z]{2})?/\d{7})(?:v\d+)?", re.IGNORECASE)
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._\-]+")


def normalize_doi(doi: str | None) -> str | None:
    """Lower-cased bare DOI ('10.x/y'), or None when `doi` holds none."""
    if not doi:
        return None
    found = _DOI.search(unquote(doi))
    if not found:
        return None
    return found.group(1).rstrip(_DOI_TRAILING).lower()


def find_dois(text: str) -> list[str]:
    """Every DOI in `text`, normalised, in order of appearance, without repeats."""
    seen: dict[str, None] = {}
    for match in _DOI.finditer(text):
        seen.setdefault(match.group(1).rstrip(_DOI_TRAILING).lower(), None)
    return list(seen)


def normalize_arxiv_id(arxiv_id: str | None) -> str | None:
    if not arxiv_id:
        return None
    bare = re.sub(r"^arxiv:\s*", "", arxiv_id.strip(), flags=re.IGNORECASE)
    bare = re.sub(r"v\d+$", "", bare)
    return bare or None


def find_arxiv_id(text: str) -> str | None:
    """The first arXiv id written as 'arXiv:2101.00001', '.../abs/2101.00001' or an old-style 'hep-th/9901001'."""
    for pattern in (_ARXIV_NEW, _ARXIV_OLD):
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def normalize_title(title: str | None) -> str:
    """Case-, accent- and punctuation-free title for matching references to papers."""
    if not title:
        return ""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return " ".join(re.sub(r"[^a-z0-9]+", " ", ascii_title.lower()).split())


def safe_paper_id(raw: str) -> str:
    """An id usable in locators, URLs and file names: unquoted, unsafe characters replaced by '_'."""
    cleaned = _UNSAFE_ID_CHARS.sub("_", unquote(raw)).strip("_")
    if not cleaned:
        raise ValueError(f"cannot make a paper id from {raw!r}")
    return cleaned
