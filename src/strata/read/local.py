"""Lit3R paper-local reading: for one (question, candidate paper) pair, Decision A, Decision B and the passages.

The embedded 0.5B model is unreliable at writing JSON judgements, so each decision is a scored choice: the
log-probabilities of 'yes' and 'no' (either case) as the start of the answer give P(yes). The three prompts share
their text up to the question, so the model reads the paper's passages once per paper.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from strata.config import ReadSettings
from strata.documents.model import Candidate, ChunkHit, ContentType
from strata.llm import LLMClient, Trace
from strata.llm.backend import probabilities
from strata.read.model import PaperReading, read_prompts


def flat(text: str) -> str:
    """Whitespace collapsed to single spaces, as passages are shown to the model."""
    return " ".join(text.split())


def numbered(texts: Sequence[str]) -> str:
    return "\n".join(f"[{number}] {flat(text)}" for number, text in enumerate(texts, start=1))


class LocalReader:
    def __init__(self, client: LLMClient, settings: ReadSettings) -> None:
        self.client = client
        self.settings = settings

    def read(
        self,
        question: str,
        candidate: Candidate,
        passages: list[ChunkHit],
        trace: Trace,
        choose: bool = True,
        trusted: bool = False,
    ) -> PaperReading:
        """Decision A, then (if A holds) Decision B, then the supporting passages of an accepted paper: the ones the
        model names, or with `choose=False` all shown (a multiple-choice answer cites the passages that state its
        option, so the model's pick would cost a call and decide nothing). A `trusted` paper (`read.accept_top`) is
        accepted without the two decisions."""
        passages = [hit for hit in passages if not is_reference_entry(hit)]
        fields = {
            "title": flat(candidate.title) or candidate.paper_id,
            "passages": numbered([hit.text for hit in passages]),
            "question": flat(question),
        }
        reading = PaperReading(paper_id=candidate.paper_id, title=candidate.title, rank=candidate.rank, accepted=False)
        if not trusted:
            reading.relevant = self._p_yes("read_relevance", fields, trace)
            if reading.relevant < self.settings.accept_threshold or not passages:
                return reading
            reading.sufficient = self._p_yes("read_sufficiency", fields, trace)
            if reading.sufficient < self.settings.accept_threshold:
                return reading
        if not passages:
            return reading
        reading.accepted = True
        reading.shown = passages
        reading.passages = self._supporting(fields, passages, trace) if choose else passages
        return reading

    def _p_yes(self, prompt_name: str, fields: dict[str, str], trace: Trace) -> float:
        prompt = read_prompts().render(prompt_name, **fields)
        return self.client.p_yes(prompt, trace=trace)

    def _supporting(self, fields: dict[str, str], passages: list[ChunkHit], trace: Trace) -> list[ChunkHit]:
        """The passage the model names as stating the answer, plus any others it gives a large share."""
        if len(passages) == 1:
            return passages
        prompt = read_prompts().render("read_passage", **fields)
        shares = probabilities(self.client.score(prompt, [str(n) for n in range(1, len(passages) + 1)], trace=trace))
        return [passages[index] for index in chosen(shares, self.settings.passage_min_share)]


# Headings of a reference list; a chunk under one is a citation of other work, never a finding of this paper.
REFERENCE_HEADING = re.compile(
    r"^\W*(?:\d+\.?\s*)?(?:references?(?: and notes)?|bibliography|literature cited|works cited|cited literature)\W*$",
    re.IGNORECASE,
)


def is_reference_entry(hit: ChunkHit) -> bool:
    """Whether the chunk is an entry of a reference list: typed so by the parser, or under a reference heading
    (a parser that missed the list's layout still names its section)."""
    if hit.content_type == ContentType.REFERENCE:
        return True
    return any(REFERENCE_HEADING.match(title) for title in hit.locator.section_path[-1:])


def chosen(shares: Sequence[float], min_share: float) -> list[int]:
    """Indices of the best choice and of every other with at least `min_share`, best first (ties: earlier first)."""
    order = sorted(range(len(shares)), key=lambda index: (-shares[index], index))
    return [index for position, index in enumerate(order) if position == 0 or shares[index] >= min_share]
