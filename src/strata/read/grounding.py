"""Lexical grounding of multiple-choice options: where in the evidence each option is stated, and how close to the
question's key terms.

An option is *found* in a passage when its normalised tokens occur there in order (exact), or when the passage holds
most of its distinguishing terms and every number it states (partial, scored below an exact match). Normalisation
makes '4.2mg/mL', '4.2 mg/ml' and '4.20 mg/ml' one form, likewise 'super-open' and 'super open', '344–360' (any
unicode dash) and '344-360', 'Mn²⁺' and 'Mn2+', '3.5e-4' and '0.00035'; words and names compare in any case ('K548R'
and 'k548r'), but a unit symbol after a number in its own ('5 mW' is not '5 MW'), and a number's unit comes before
the next number ('12 and 5 mg' states no 12 mg). Terms that every option shares ('residues' in
'residues 344–360' / 'residues 360-380') or that the question already states distinguish nothing and are left out.

A passage's score for an option is the match times the share of the question's key terms the passage holds, both
weighted by rarity among the passages at hand (a term in every passage tells nothing), and lowered when the match's
polarity differs from the question's ('A and B, but not C' answers 'which was not shown?' with C, and is no
evidence for A or B there). A negated question that no passage answers in its own polarity is answered by
elimination: the options stated plainly with its terms are the ones it excludes. An option whose distinguishing
terms all come from the question ('supported' for 'is the claim supported or refuted?') cannot be told apart by
words and is never grounded. An earlier check with this rule and no LLM picked the right LitQA2 option for 18 of 23
dev questions, twice the 0.5B reader's rate.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from strata.documents.sentences import sentence_spans
from strata.index.bm25 import english_analyzer

# Hyphen, non-breaking hyphen, figure dash, en and em dashes, horizontal bar, minus sign, small and full-width minus.
DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"), "-")
DIGIT_GROUP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # '1,250' -> '1250', not '1,2'
# PDFs print 'Å' as 'A˚', a spacing ring that the compatibility form turns into a space and a combining ring.
SPACED_ACCENT = re.compile(r"(?<=[^\W\d_]) (?=[\u0300-\u036f])")
# One way of reading a number everywhere (grounding, validation, a fact's value): '4.2', '.05', '3.5e-4'.
NUMERAL = r"(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d{1,3}(?!\d))?"
# Fine tokens: numbers, runs of letters, and the symbols that change meaning ('Mn2+', '5%', '<0.01'); letters and
# digits split ('K548R' -> k 548 r) so that spacing and joining ('4.2mg', '4.2 mg') do not matter.
# A sign belongs to a number only where no word or digit precedes it ('-3 °C', '(+2 mV)'; not 'IL-6' or '5-10').
FINE = re.compile(rf"(?:(?<![\w.])[-+])?{NUMERAL}|[^\W\d_]+|[+%<>±]")
# Coarse terms: numbers, and words with their digits kept together ('k548r', 'mn2') so an identifier stays whole;
# a number runs into no unit ('4.2mg' -> 4.2, mg).
COARSE = re.compile(rf"{NUMERAL}|[^\W\d_][^\W_]*")
NUMBER = re.compile(NUMERAL)
LITRE = re.compile(r"[a-zμ]?L")  # 'mL' is 'ml': the litre has two official symbols
# Generic wordings of an 'insufficient information' option, in any benchmark or user question.
INSUFFICIENT = re.compile(
    r"\b(?:insufficient|not enough|too little)\s+(?:information|evidence|data|detail)"
    r"|\b(?:cannot|can ?not|can't|unable to)\s+(?:be\s+)?(?:determined?|answered|answer|tell|say|know)"
    r"|\b(?:not|cannot be)\s+(?:determinable|answerable)\b"
    r"|^\s*(?:unknown|undetermined|not (?:stated|reported|known|specified|mentioned))\W*$",
    re.IGNORECASE,
)
PARTIAL = 0.8  # a partial match never ties an exact one ('R548K' holds the terms of 'K548R', not its order)
MOST = 0.5  # a partial match needs at least this weighted share of the option's distinguishing terms
OFF_TOPIC = 0.05  # weight of a passage holding the option but none of the question's key terms


def _written(text: str) -> str:
    """Unicode compatibility form ('²' -> '2', 'ﬁ' -> 'fi', 'A˚' -> 'Å'), case and accents kept, every dash a '-',
    digit groups joined."""
    composed = unicodedata.normalize("NFC", SPACED_ACCENT.sub("", unicodedata.normalize("NFKC", text)))
    bare = "".join(char for char in composed if not unicodedata.combining(char))  # marks no letter takes
    return DIGIT_GROUP.sub("", bare.translate(DASHES))


def _folded(text: str) -> str:
    """Without accents ('Å' and 'A' alike, as PDFs often drop them) and case folded."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(char for char in decomposed if not unicodedata.combining(char)).casefold()


def normal_text(text: str) -> str:
    """The form words and terms compare in: compatibility form, no accents, case folded."""
    return _folded(_written(text))


def is_number(token: str) -> bool:
    """Whether a fine token is a number."""
    return token[-1].isdigit()


def _number(token: str) -> str:
    """One spelling per number: '4.20' -> '4.2', '007' -> '7', '5.0' -> '5', '.05' -> '0.05', '+2' -> '2',
    '3.5e-4' -> '0.00035'; a minus is kept ('-3' is not '3'), except on zero."""
    spelled = format(Decimal(token), "f")
    if "." in spelled:
        spelled = spelled.rstrip("0").removesuffix(".")
    return "0" if spelled in ("0", "-0") else spelled


def unit_form(token: str) -> str:
    """A unit as it compares: a symbol exactly, as case is its meaning ('mW' is not 'MW', nor 'mm' 'Mm', 'K' 'k',
    'Å' 'A'), except the litre's two ('mL', 'ml'); a word of three or more letters in lower, title or upper case
    ('hours', 'Hours', 'HOURS') in any case and without accents."""
    if len(token) >= 3 and token.isalpha() and (token.islower() or token.istitle() or token.isupper()):
        return _folded(token)
    return token[:-1] + "l" if LITRE.fullmatch(token) else token


def _written_tokens(text: str) -> list[str]:
    return [_number(token) if is_number(token) else token for token in FINE.findall(_written(text))]


def fine_tokens(text: str) -> list[str]:
    """Numbers (signed, in one spelling), words and meaningful symbols of `text`, in order; folded, except that a
    unit right after a number keeps its `unit_form` ('5 mW' is not '5 MW'), unless the three are one name
    ('K548R' is 'k548r', 'IL-17A' 'IL-17a')."""
    written, found = _matches(text)
    tokens = [_number(match.group()) if is_number(match.group()) else match.group() for match in found]
    return [unit_form(token) if at and is_number(tokens[at - 1]) and not _in_name(found, written, at) else _folded(token)
            for at, token in enumerate(tokens)]  # fmt: skip


def name_numbers(text: str) -> set[int]:
    """Positions among `fine_tokens(text)` of the numbers that are part of a name ('IL-6', 'p53', 'K548R'): no
    count or measurement."""
    written, found = _matches(text)
    return {at for at, match in enumerate(found) if is_number(match.group()) and _after_letters(found, written, at)}


def _matches(text: str) -> tuple[str, list[re.Match[str]]]:
    """`text` as written for comparison, and its fine tokens' matches in it (their spans say what is glued)."""
    written = _written(text)
    return written, list(FINE.finditer(written))


def _after_letters(found: Sequence[re.Match[str]], written: str, at: int) -> bool:
    """Whether found[at] follows a word with nothing or a hyphen between them ('p53', 'IL-6')."""
    return at > 0 and found[at - 1].group().isalpha() and written[found[at - 1].end() : found[at].start()] in ("", "-")


def _in_name(found: Sequence[re.Match[str]], written: str, at: int) -> bool:
    """Whether found[at] is glued to the number before it, itself glued (or hyphened) to letters ('K548R')."""
    return at >= 2 and found[at].start() == found[at - 1].end() and _after_letters(found, written, at - 1)


def unit_tokens(text: str) -> list[str]:
    """The fine tokens of `text`, each in its `unit_form` (position for position those of `fine_tokens`)."""
    return [unit_form(token) for token in _written_tokens(text)]


def read_numbers(text: str) -> list[float]:
    """The numbers `text` states, in order, read as grounding reads them ('1,250' is one, '1,2' two; the digits of a
    name, 'IL-6', are none)."""
    names = name_numbers(text)
    return [float(token) for at, token in enumerate(_written_tokens(text)) if is_number(token) and at not in names]


@functools.cache
def _stem(word: str) -> str:
    """The word as BM25 indexes it (Snowball English), '' for a stop word."""
    analysed = english_analyzer().analyze(word)
    return analysed[0] if len(analysed) == 1 else word if analysed else ""


def _term(token: str) -> str:
    if NUMBER.fullmatch(token):
        return _number(token)
    return _stem(token) if token.isalpha() else token


def coarse_terms(text: str) -> set[str]:
    """Distinct terms: numbers in one spelling, identifiers whole, other words stemmed, stop words left out."""
    terms = {_term(token) for token in COARSE.findall(normal_text(text))}
    terms.discard("")
    return terms


# Negation in the manner of NegEx (Chapman et al., 2001): a trigger word negates the terms in the few words after it,
# up to a conjunction that starts a new clause ('interacted with A and B, but not C'; 'all variants except X
# increased ...'). Written here because the negation libraries need a spaCy pipeline this project does not ship.
NEGATION_TRIGGERS = frozenset({"not", "no", "never", "neither", "nor", "except", "cannot", "none", "unable"})
SCOPE_ENDS = frozenset({"but", "however", "although", "whereas", "while", "yet"})
NEGATION_SCOPE = 5  # words after a trigger that it negates
CONTRACTED_NOT = re.compile(r"n['’]t\b")


def _words(text: str) -> list[str]:
    """Coarse tokens in order, unstemmed, "n't" spelled 'not' (triggers are stop words, which stemming drops)."""
    return COARSE.findall(CONTRACTED_NOT.sub(" not", normal_text(text)))


def negated_terms(text: str) -> frozenset[str]:
    """The terms of `text` within some negation trigger's scope ('not PBE1' -> pbe1)."""
    words = _words(text)
    negated: set[str] = set()
    for at, word in enumerate(words):
        if word not in NEGATION_TRIGGERS:
            continue
        for following in words[at + 1 : at + 1 + NEGATION_SCOPE]:
            if following in SCOPE_ENDS:
                break
            negated.add(_term(following))
    negated.discard("")
    return frozenset(negated)


def is_negated(text: str) -> bool:
    """Whether `text` holds a negation trigger ('Which gene is not upregulated?')."""
    return any(word in NEGATION_TRIGGERS for word in _words(text))


def contains_sequence(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    """Whether `needle` occurs in `haystack` as a contiguous run of tokens (not inside a longer token)."""
    if not needle:
        return False
    width = len(needle)
    first = needle[0]
    return any(
        haystack[start] == first and list(haystack[start : start + width]) == list(needle)
        for start in range(len(haystack) - width + 1)
    )


SPREAD_WORDS = frozenset({"±", "sd", "se", "sem", "iqr", "ci", "range"})  # a spread's numbers belong to the value


def first_number(tokens: Sequence[str]) -> int:
    """The index of the first number among fine `tokens` that is not part of a spread, len(tokens) when there is
    none: in '12 ± 3 g', '54 (SD 8) years', '36 (IQR 24-48) months' and '4.2 (95% CI 3.9-4.5) mg' the numbers after
    the value qualify it. (A bare bracketed spread, '4.2 (3.9) mg', cannot be told from a second value once the
    brackets are gone.)"""
    spread = False
    for at, token in enumerate(tokens):
        word = token.lower()
        if word in SPREAD_WORDS or (word == "d" and at and tokens[at - 1].lower() == "s"):  # 's.d.'
            spread = True
        elif is_number(token):
            if not spread and [t.lower() for t in tokens[at + 1 : at + 3]] != ["%", "ci"]:  # '95% CI'
                return at
        elif word not in ("%", "s"):
            spread = False
    return len(tokens)


def near_sequence(haystack: Sequence[str], needle: Sequence[str], gap: int) -> bool:
    """Whether `needle`'s tokens occur in order with at most `gap` other tokens between neighbours ('344 to 360')."""
    starts = [index for index, token in enumerate(haystack) if needle and token == needle[0]]
    for start in starts:
        at = start
        for token in needle[1:]:
            window = haystack[at + 1 : at + 2 + gap]
            window = window[: first_number(window) + 1]  # not past another number: '12 and 5 mg' is no 12 mg
            if token not in window:
                break
            at += 1 + list(window).index(token)
        else:
            return True
    return False


# "[3]", "[1, 2]", "[2-4]", and locators such as "paper_id#120-480" (the form `Locator` prints).
INLINE_CITATION = re.compile(r"\s*\[\d+(?:\s*[,;\u2013-]\s*\d+)*\]|\s*\(?\b[\w.:/-]+#\d+-\d+\b\)?")


def without_inline_citations(text: str) -> str:
    return INLINE_CITATION.sub("", text).strip()


def is_insufficient(option: str) -> bool:
    """Whether the option says the question cannot be answered ('Insufficient information to answer')."""
    return bool(INSUFFICIENT.search(option))


@dataclass(frozen=True, slots=True)
class OptionTerms:
    """What must be found of one option: its fine tokens in order, or its distinguishing terms and numbers."""

    tokens: tuple[str, ...]
    terms: frozenset[str]
    numbers: frozenset[str]
    core: tuple[str, ...] = ()  # its numbers in order, with the unit after the last ('2 Å' -> 2 a, not the 2 of 12 Å)
    restated: bool = False  # every term telling it apart is already in the question ('supported' of 'supported or
    # refuted?'): a passage on the topic holds them whichever option is true, so lexical matching cannot decide it
    negative: bool = False  # it states a negation itself ('no gain for any model')
    denied: frozenset[str] = frozenset()  # the terms it negates (gain, ani, model): a passage supports it only by
    # negating one of them too ('did not gain'), not by naming them ('fine-tuning any model gained')


def option_terms(options: Sequence[str], question: str = "") -> list[OptionTerms]:
    """Per option, the terms that tell it apart: not shared by every option, not already in the question (unless
    nothing else is left)."""
    every = [coarse_terms(option) for option in options]
    real = [terms for option, terms in zip(options, every, strict=True) if not is_insufficient(option)]
    shared = set.intersection(*real) if len(real) > 1 else set()
    asked = coarse_terms(question)
    described = []
    for option, terms in zip(options, every, strict=True):
        own = (terms - shared) or terms
        restated = bool(own) and own <= asked
        own = (own - asked) or own
        numbers = frozenset(term for term in own if NUMBER.fullmatch(term))
        tokens = fine_tokens(option)
        core = numeric_core(tokens, numbers)
        described.append(OptionTerms(tuple(tokens), frozenset(own), numbers, core, restated, is_negated(option),
                                     negated_terms(option)))
    return described


def numeric_core(tokens: Sequence[str], numbers: frozenset[str]) -> tuple[str, ...]:
    """The option's tokens from its first to its last distinguishing number, and the unit right after it."""
    at = [index for index, token in enumerate(tokens) if token in numbers]
    if not at:
        return ()
    end = at[-1] + 1
    if end < len(tokens) and not is_number(tokens[end]):
        end += 1
    return tuple(tokens[at[0] : end])


NUMBER_GAP = 2  # tokens allowed between an option's numbers, or a number and its unit, in the passage


def match_strength(option: OptionTerms, tokens: Sequence[str], terms: set[str], weight: dict[str, float]) -> float:
    """1 for the option's tokens in order, PARTIAL x the weighted share of its terms when the passage holds every
    number it states and at least MOST of that share, else 0."""
    if contains_sequence(tokens, option.tokens):
        return 1.0
    if not option.terms or not option.numbers <= terms:
        return 0.0
    if option.core and not near_sequence(tokens, option.core, NUMBER_GAP):
        return 0.0
    unseen = max(weight.values(), default=1.0)  # a term in none of the passages is as rare as they come
    total = sum(weight.get(term, unseen) for term in option.terms)
    share = sum(weight.get(term, unseen) for term in option.terms if term in terms) / total
    return PARTIAL * share if share >= MOST else 0.0


def _described(option: str, options: Sequence[str], question: str) -> OptionTerms:
    """The option's terms among `options` (it is added to them when missing)."""
    described = option_terms([*options, option] if option not in options else options, question)
    return described[list(options).index(option) if option in options else len(options)]


def states_content(option: str, options: Sequence[str] = (), question: str = "") -> bool:
    """Whether a passage could state the option lexically: not an 'insufficient information' option, and not one
    that only restates the question's own alternatives ('supported' for 'is it supported or refuted?')."""
    return not is_insufficient(option) and not _described(option, options, question).restated


def mentions(option: str, passage: str, options: Sequence[str] = (), question: str = "") -> bool:
    """Whether the passage states the option, exactly or in normalised form (most of its distinguishing terms and
    all its numbers); `options` and `question` say which of its terms distinguish it."""
    described = _described(option, options, question)
    return match_strength(described, fine_tokens(passage), coarse_terms(passage), {}) > 0


def rarity(passages: Sequence[set[str]]) -> dict[str, float]:
    """Smoothed inverse document frequency of each term over the passages at hand."""
    count = Counter(term for terms in passages for term in terms)
    size = len(passages)
    return {term: math.log(1 + (size + 1) / (df + 0.5)) for term, df in count.items()}


@dataclass(frozen=True, slots=True)
class OptionGrounding:
    """One option against the passages: the best match, the best score, and the passages that state it, best first,
    with their scores; `as_asked` is the best score had every statement of it been in the question's polarity (None:
    the same as `score`)."""

    option: str
    strength: float
    score: float
    passages: tuple[int, ...] = ()
    scores: tuple[float, ...] = ()
    as_asked: float | None = None

    @property
    def grounded(self) -> bool:
        return self.strength > 0


@dataclass(frozen=True, slots=True)
class Grounding:
    options: tuple[OptionGrounding, ...]

    @property
    def any_grounded(self) -> bool:
        return any(option.grounded for option in self.options)

    def shares(self) -> list[float]:
        """Each option's share of the summed scores, or of the strongest statement of any option taken in the
        question's polarity when that is larger, so an option found only in the opposite polarity ('A was not
        raised' for 'which was raised?') does not take the whole share (all 0 when no option is found anywhere)."""
        total = sum(option.score for option in self.options)
        strongest = max((option.score if option.as_asked is None else option.as_asked for option in self.options),
                        default=0.0)  # fmt: skip
        reference = max(total, strongest)
        return [option.score / reference if reference else 0.0 for option in self.options]


CLAUSE_END = re.compile(r"(?<=;)\s+(?=[^a-z\s])")  # 'X rose; ABC1 fell' states two things, as two sentences would
SPREAD = 0.5  # an option and the question's terms in one passage but different sentences count half as much


@dataclass(frozen=True, slots=True)
class _Unit:
    """A passage or one of its sentences, analysed once."""

    passage: int
    tokens: list[str]
    terms: set[str]
    negated: frozenset[str]


def _unit(passage: int, text: str) -> _Unit:
    return _Unit(passage, fine_tokens(text), coarse_terms(text), negated_terms(text))


def statements(text: str) -> list[str]:
    """The passage's sentences as quoting cuts them (pysbd: 'et al.', 'Fig. 3' and decimals end none), each further
    cut at semicolons."""
    return [clause for start, end in sentence_spans(text) for clause in CLAUSE_END.split(text[start:end])]


def _units(passages: Sequence[str]) -> tuple[list[_Unit], list[_Unit]]:
    whole = [_unit(index, text) for index, text in enumerate(passages)]
    sentences = [_unit(index, sentence) for index, text in enumerate(passages) for sentence in statements(text)]
    return whole, sentences


OPPOSITE = 0.25  # weight of a match whose polarity differs from the question's ('all except X increased Y' for
# 'what did X do?'; 'A and B but not C' for 'which was not shown?')


def ground(question: str, options: Sequence[str], passages: Sequence[str]) -> Grounding:
    """Where each option is stated among `passages` and how well its surroundings match the question: a passage's
    score for an option is its best sentence's (match x share of the question's key terms), or SPREAD x the same
    over the whole passage when the option and the terms are in different sentences."""
    whole, sentences = _units(passages)
    weight = rarity([unit.terms for unit in sentences])
    asked = coarse_terms(question)
    asked_total = sum(weight.get(term, 0.0) for term in asked)

    def coverage(unit: _Unit) -> float:  # share of the question's key terms the unit holds, weighted by rarity
        return sum(weight.get(term, 0.0) for term in asked & unit.terms) / asked_total if asked_total else 0.0

    negative = is_negated(question)

    def polarity(described: OptionTerms, unit: _Unit) -> float:
        """1 when the unit states the option (or the question's subject) as the question asks, negated or not,
        else OPPOSITE; an option saying a negation itself ('no gain') needs the unit to negate what it does."""
        if described.negative:
            return 1.0 if described.denied & unit.negated else OPPOSITE
        negated = bool((described.terms | asked) & unit.terms & unit.negated)
        return 1.0 if negated == negative else OPPOSITE

    def score(described: OptionTerms, unit: _Unit, polar: bool = True) -> float:
        strength = match_strength(described, unit.tokens, unit.terms, weight)
        if not strength:
            return 0.0
        return strength * (OFF_TOPIC + coverage(unit)) * (polarity(described, unit) if polar else 1.0)

    def per_passage(described: OptionTerms, strengths: list[float], polar: bool) -> list[float]:
        """Each passage's score for the option: its best sentence's, or SPREAD x the whole passage's."""
        scores = [SPREAD * score(described, unit, polar) if strength else 0.0
                  for unit, strength in zip(whole, strengths, strict=True)]  # fmt: skip
        for unit in sentences:
            if strengths[unit.passage]:
                scores[unit.passage] = max(scores[unit.passage], score(described, unit, polar))
        return scores

    def affirms(described: OptionTerms, unit: _Unit) -> bool:  # states the option as a negated question asks
        return not described.negative and polarity(described, unit) == 1.0 and score(described, unit) > 0

    grounded = []
    answered = False  # some passage states an option in a negated question's own polarity ('but not C')
    for option, described in zip(options, option_terms(options, question), strict=True):
        if is_insufficient(option) or described.restated:  # says nothing the evidence could state
            grounded.append(OptionGrounding(option, 0.0, 0.0))
            continue
        answered = answered or (negative and any(affirms(described, unit) for unit in sentences))
        strengths = [match_strength(described, unit.tokens, unit.terms, weight) for unit in whole]
        scores = per_passage(described, strengths, polar=True)
        found = sorted((i for i, s in enumerate(strengths) if s > 0), key=lambda i: (-scores[i], i))
        best = (max(strengths, default=0.0), max(scores, default=0.0))
        as_asked = max(per_passage(described, strengths, polar=False), default=0.0)
        grounded.append(OptionGrounding(option, *best, tuple(found), tuple(scores[i] for i in found), as_asked))
    return Grounding(tuple(eliminated(grounded) if negative and not answered else grounded))


def eliminated(grounded: Sequence[OptionGrounding]) -> list[OptionGrounding]:
    """A negated question ('which gene is not upregulated?') that no passage answers in its own polarity, answered
    by elimination: an option stated plainly with the question's terms ('A, B and C were upregulated') is evidence
    against it, so each found option scores the best plain score less its own. Options found nowhere stay at 0: the
    evidence cannot be cited for them."""
    top = max((option.score for option in grounded if option.grounded), default=0.0)
    return [replace(option, score=top - option.score, as_asked=None) if option.grounded else option
            for option in grounded]
