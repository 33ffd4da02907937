"""DOI, arXiv id and title normalisation shared by the parsers and the citation graph."""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s\"<>]+)", re.IGNORECASE)
_DOI_TRAILING = ".,;:)]}'"
# bioRxiv/medRxiv URLs append a version and page ('10.1101/2023.01.11.523679v3.full'); the DOI has neither.
_PREPRINT_VERSION = re.compile(r"^(10\.1101/(?:\d{4}\.\d{2}\.\d{2}\.)?\d{6,})v\d+.*$")
_ARXIV_PREFIX = r"(?:arxiv[:\s/]*|abs/|pdf/)"
_ARXIV_NEW_ID = r"\d{4}\.\d{4,5}"
_ARXIV_OLD_ID = r"[a-z\-]+(?:\.[A-Z]{2})?/\d{7}"
_ARXIV_NEW = re.compile(rf"{_ARXIV_PREFIX}({_ARXIV_NEW_ID})", re.IGNORECASE)
_ARXIV_OLD = re.compile(rf"{_ARXIV_PREFIX}({_ARXIV_OLD_ID})", re.IGNORECASE)
# A bare id ('1810.04805', 'hep-th/9901001'): trusted in id fields; in free text only after a prefix (find_arxiv_id).
ARXIV_ID = re.compile(rf"(?<!\d)({_ARXIV_NEW_ID}|{_ARXIV_OLD_ID})(?!\d)", re.IGNORECASE)
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._\-]+")


def normalize_doi(doi: str | None) -> str | None:
    """Lower-cased bare DOI ('10.x/y'), or None when `doi` holds none."""
    if not doi:
        return None
    found = _DOI.search(unquote(doi))
    return _bare_doi(found.group(1)) if found else None


def find_dois(text: str) -> list[str]:
    """Every DOI in `text`, normalised, in order of appearance, without repeats."""
    return list(dict.fromkeys(_bare_doi(match.group(1)) for match in _DOI.finditer(text)))


def _bare_doi(matched: str) -> str:
    """A matched DOI without the sentence punctuation after it or a preprint URL's version suffix, lower-cased."""
    doi = matched.rstrip(_DOI_TRAILING).lower()
    return _PREPRINT_VERSION.sub(r"\1", doi)


def normalize_arxiv_id(arxiv_id: str | None) -> str | None:
    """The bare id in an arXiv id field ('arXiv:1810.04805v2[cs.CL]', an abs URL, 'math/0510508v1'), else None."""
    found = ARXIV_ID.search(arxiv_id or "")
    return found.group(1) if found else None


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
