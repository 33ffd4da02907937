"""What a printed line says, wherever it stands: its characters cleaned up, and whether it is a caption label, a
standard section name, a numbered heading or the end of a sentence. Every other module of the PDF parser reads text
through these, so that a rule about wording lives in one place."""

from __future__ import annotations

import html
import re

from strata.documents.parsers._structured import split_title_number

_SOFT_HYPHEN = "\u00ad"  # shows only where a word breaks at a line end; some publishers put one in every compound
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))  # zero-width spaces inside URLs and DOIs
_UNDOTTED_NUMBER = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})\s+([A-Z].*)$")
# Top-level section names: their font marks the top heading level when a paper has no outline.
_CANONICAL_TITLE = re.compile(
    r"^(?:abstract|summary|author summary|significance|graphical abstract|highlights|introduction|background"
    r"|results?(?: and discussion)?|discussion|conclusions?|(?:materials? and )?methods?(?: and materials?)?"
    r"|experimental(?: procedures| section)?|related work|experiments?|evaluation|limitations"
    r"|acknowledge?ments?|references|bibliography|literature cited|(?:data|code) availability"
    r"|author contributions|funding|conflicts? of interest(?: statement)?|competing interests|declarations"
    r"|abbreviations|supplementary (?:data|materials?|information)|conclusions? and future work|star\W*methods"
    r"|additional information|declaration of interests)\b",
    re.IGNORECASE,
)
_CANONICAL_MAX_WORDS = 5

CAPTION = re.compile(
    r"^(?P<supplement>Supplementary\s+)?(?:Extended\s+Data\s+|Appendix\s+)?"
    r"(?P<kind>Fig(?:ure)?s?\.?|Table|Scheme|Box|Chart)\s*(?P<number>S?\d{1,3})[A-Za-z]?(?=$|[\s.:|—–\-)])\s*"
    r"(?P<after>.?)",
    re.IGNORECASE,
)
SENTENCE_END = re.compile(r"[.!?:]['\")\]”’]*$")
REFERENCES_TITLE = re.compile(
    r"^(?:\d+\.?\s*)?(?:references?(?: and notes| cited)?|bibliography|literature cited|works cited|cited literature)"
    r"\s*:?$",
    re.IGNORECASE,
)
ABSTRACT_TITLE = re.compile(r"^(?:abstract|summary)\b", re.IGNORECASE)


def visible(text: str) -> str:
    """Printed text with whitespace collapsed, invisible characters dropped and a line-end soft hyphen made visible."""
    text = " ".join(text.translate(_INVISIBLE).split()).replace("\u2010", "-").replace("\u2011", "-")
    broken = text.endswith(_SOFT_HYPHEN)
    text = text.replace(_SOFT_HYPHEN, "")
    return text + "-" if broken else text


def unescaped(raw: str) -> str:
    """A metadata or outline string with HTML entities decoded and whitespace collapsed."""
    return " ".join(html.unescape(raw).split())


def match_key(text: str) -> str:
    """Letters and digits only, lower-cased: how outline and metadata titles are matched to printed lines."""
    return re.sub(r"[\W_]+", "", text.lower())


def split_number(text: str) -> tuple[str | None, int | None, str]:
    """(number, depth, rest) of a numbered heading, also undotted ('1 Introduction'); 'A. baumannii grows...' keeps
    its genus initial."""
    number, depth, rest = split_title_number(text)
    undotted = _UNDOTTED_NUMBER.match(text) if number is None else None
    if undotted:  # '1 Introduction', '2.1 Data' (ACL style)
        return undotted.group(1), undotted.group(1).count(".") + 1, undotted.group(2)
    return number, depth, rest


def is_canonical(title: str) -> bool:
    """'Methods', 'Results and discussion', 'Conflict of interest statement': a standard section name."""
    return len(title.split()) <= _CANONICAL_MAX_WORDS and bool(_CANONICAL_TITLE.match(title))
