"""Synthetic training questions (the STAIR recipe): an LLM writes questions from passages spread over each leaf's
text, shown without the leaf's title or path (so the questions do not echo the ToC entry they are trained to find).

Questions are cached on disk per document and generating model, keyed by the leaf's path and a hash of the whole
prompts (instructions, worked example and passages: an edited prompt file asks again), so a run only asks about
leaves it has not seen (also when the ToC is renumbered, e.g. for a chapter subset), and another recipe (more
questions or passages per leaf) writes beside the old questions instead of hiding them. The train/dev split is made
per leaf and is deterministic: a leaf's questions are ordered by a seeded hash and the first share goes to dev. Real
test questions are never used here.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel

from strata.config import TocSettings
from strata.llm import LLMClient, Prompt, PromptRegistry
from strata.llm.structured import StructuredOutputError, parse_structured
from strata.progress import Progress, tell
from strata.toc.model import DocumentToc, SyntheticQuestions, TocEntry, TrainingQuestion, toc_prompts

QUESTIONS_PROMPT = "toc_questions"
NEAR_DUPLICATE = 0.8  # word-set Jaccard at which a question repeats an earlier one (small models reword little)
# Longer is the passage copied, not a question (the 0.5B asked for 3 a passage copied up to 149 words); such a
# suffix also widens every training batch it is in (16 of them attending to the whole ToC ran 24 GiB out of memory).
MAX_QUESTION_WORDS = 40
_WORD = re.compile(r"\w+")
_QUOTED_QUESTION = re.compile(r'"([^"\n]{8,}\?)"')


class CachedQuestions(BaseModel):
    path: tuple[str, ...]
    prompt_sha: str
    questions: list[str]


def leaf_passages(toc: DocumentToc, leaf: TocEntry, words: int, count: int) -> list[str]:
    """Up to `count` windows of `words` words spread evenly over the leaf's text, first and last included (one when
    the text is that short; the title alone when the leaf has no text)."""
    tokens = toc.leaf_text(leaf.number).split()
    if not tokens:
        return [leaf.title]
    count = max(1, min(count, -(-len(tokens) // words)))
    room = max(len(tokens) - words, 0)
    starts = sorted({round(index * room / (count - 1)) for index in range(count)}) if count > 1 else [0]
    return [" ".join(tokens[start : start + words]) for start in starts]


def question_prompts(
    toc: DocumentToc, leaf: TocEntry, settings: TocSettings, registry: PromptRegistry | None = None
) -> list[Prompt]:
    """One prompt per passage of the leaf, together asking for `questions_per_leaf` questions."""
    passages = leaf_passages(toc, leaf, settings.passage_words, settings.passages_per_leaf)
    each = -(-settings.questions_per_leaf // len(passages))
    return [
        (registry or toc_prompts()).render(
            QUESTIONS_PROMPT, book=toc.title or toc.paper_id, count=str(each), passage=passage
        )
        for passage in passages
    ]


def parse_questions(text: str) -> list[str]:
    """Questions from a model's answer: the JSON object when it parses, else every quoted string ending in '?'.

    The second path rescues the malformed JSON of small models generating without a grammar (transformers).
    """
    try:
        return parse_structured(text, SyntheticQuestions).questions
    except StructuredOutputError:
        return _QUOTED_QUESTION.findall(text)


class QuestionCache:
    """JSONL of generated questions for one document and one generating model."""

    def __init__(self, folder: Path, paper_id: str, model: str) -> None:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)[-80:]
        self.path = folder.expanduser() / f"{paper_id}--{slug}.jsonl"

    def load(self) -> dict[tuple[tuple[str, ...], str], CachedQuestions]:
        """Entries by (leaf path, prompt hash)."""
        if not self.path.is_file():
            return {}
        entries: dict[tuple[tuple[str, ...], str], CachedQuestions] = {}
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                entry = CachedQuestions.model_validate_json(line)
            except ValueError as error:
                raise ValueError(f"{self.path}:{number}: not a cached question record: {error}") from error
            entries[entry.path, entry.prompt_sha] = entry
        return entries

    def add(self, entries: Iterable[CachedQuestions]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            for entry in entries:
                handle.write(entry.model_dump_json() + "\n")


def prompt_sha(prompts: Iterable[Prompt]) -> str:
    text = "\x00".join(f"{prompt.system}\x01{prompt.user}" for prompt in prompts)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_questions(
    toc: DocumentToc, leaves: Iterable[TocEntry], settings: TocSettings, cache: QuestionCache
) -> dict[str, list[str]]:
    """Questions already cached for these leaves (for the passage they would be shown now)."""
    stored = cache.load()
    found: dict[str, list[str]] = {}
    for leaf in leaves:
        entry = stored.get((leaf.path, prompt_sha(question_prompts(toc, leaf, settings))))
        if entry is not None:
            found[leaf.number] = clean_questions(entry.questions)  # as cleaned now (an older cache held long ones)
    return found


def generate_questions(
    client: LLMClient,
    toc: DocumentToc,
    leaves: Iterable[TocEntry],
    settings: TocSettings,
    cache: QuestionCache,
    progress: Progress | None = None,
) -> dict[str, list[str]]:
    """Questions for each leaf, from the cache or asked of `client` passage by passage (each leaf's cached as soon
    as its passages are answered, so an interrupted run resumes with the next leaf)."""
    leaves = list(leaves)
    found = cached_questions(toc, leaves, settings, cache)
    for done, leaf in enumerate(leaves, start=1):
        if leaf.number not in found:
            prompts = question_prompts(toc, leaf, settings)
            asked = [q for prompt in prompts for q in client.complete(prompt, SyntheticQuestions).questions]
            found[leaf.number] = clean_questions(asked)
            cache.add([CachedQuestions(path=leaf.path, prompt_sha=prompt_sha(prompts), questions=found[leaf.number])])
        tell(progress, "synthetic questions", done, len(leaves), leaf.title)
    return found


def clean_questions(questions: Iterable[str]) -> list[str]:
    """Stripped, non-empty and at most MAX_QUESTION_WORDS words, near-duplicates dropped: a question whose word set
    overlaps an earlier kept one's by NEAR_DUPLICATE (Jaccard) or more, exact repeats (case aside) included."""
    kept: list[str] = []
    word_sets: list[set[str]] = []
    for question in questions:
        text = " ".join(question.split())
        words = set(_WORD.findall(text.casefold()))
        if len(text.split()) > MAX_QUESTION_WORDS:
            continue
        if text and not any(_jaccard(words, earlier) >= NEAR_DUPLICATE for earlier in word_sets):
            kept.append(text)
            word_sets.append(words)
    return kept


def _normalised(question: str) -> str:
    return " ".join(question.split()).casefold()


def _jaccard(first: set[str], second: set[str]) -> float:
    return len(first & second) / len(first | second) if first or second else 1.0


def split_questions(questions: Mapping[str, list[str]], dev_fraction: float, seed: int) -> list[TrainingQuestion]:
    """Per leaf: questions ordered by a seeded hash, the first round(share * n) to dev (at least one when a leaf has
    two or more questions and the share is positive), the rest to train. A question written for two leaves (case and
    spacing aside) is dropped: its answer is ambiguous, and it could be trained on under one leaf and checked on
    under the other."""
    leaves_asking = Counter(text for leaf in questions for text in {_normalised(q) for q in questions[leaf]})
    split: list[TrainingQuestion] = []
    for leaf in sorted(questions):
        own = [q for q in questions[leaf] if leaves_asking[_normalised(q)] == 1]
        ordered = sorted(own, key=lambda q: hashlib.sha256(f"{seed}\x00{leaf}\x00{q}".encode()).digest())
        dev = round(dev_fraction * len(ordered))
        if dev_fraction > 0 and len(ordered) >= 2:
            dev = min(max(dev, 1), len(ordered) - 1)
        split.extend(
            TrainingQuestion(leaf=leaf, question=q, split="dev" if i < dev else "train") for i, q in enumerate(ordered)
        )
    return split
