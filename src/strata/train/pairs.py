"""Cross-encoder training queries from the user's own corpus, most of them without an LLM call.

Sources (each query knows the paper it came from, its positive):
- title: a paper's title finds its body (the title left out of the passage, so matching it is no shortcut);
- inverse-cloze: a sentence of the body finds the rest of its passage (Lee et al., 2019), the sentence taken out;
  several sentences per paper (`train_cloze_per_paper`), as one abstract holds several findings a query may ask for;
- section: a paper's title and a section heading find that section's text (papers parsed with sections);
- llm: a query the LLM wrote for the passage (InPars/GPL style), cached by the LLM response cache, so a rerun
  continues where an interrupted one stopped;
- labelled: a benchmark's labelled training query and a paper judged relevant to it (a supervised control, never
  what `strata train-reranker` builds).
Hard negatives are other papers from the query's first-stage hits (`train_negative_method`: hybrid, the ranking the
reranker will reorder, or BM25), with a false-negative filter: a negative the dense encoder scores above the positive
is dropped (it may answer the query as well as the positive does). A negative is shown as its window (of the first
`cross_encoder_windows`) sharing most words with the query: the window the reranker's best-window score would come
from.
Citation contexts (the citing sentence -> the cited paper) are not a source: the store keeps reference entries and
the resolved citation graph, not the sentences that cite.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from strata.config import RerankSettings
from strata.documents.builder import SENTENCE_END
from strata.llm import LLMClient, LLMError, PromptRegistry
from strata.progress import Progress, tell
from strata.rerank.texts import PaperTexts, titled, window_starts
from strata.retrieve.protocol import Searcher

Source = Literal["title", "inverse-cloze", "section", "llm", "labelled"]
SOURCES: tuple[Source, ...] = ("title", "inverse-cloze", "section", "llm", "labelled")
UNTITLED: frozenset[Source] = frozenset({"title", "section"})  # sources whose query holds the paper's title
MIN_QUERY_WORDS = 4  # a shorter title or sentence ("Introduction", "Results.") asks nothing
MIN_BODY_WORDS = 30  # a body this short leaves no passage once a sentence is taken out
WORD = re.compile(r"[^\W\d_]{3,}")  # a word the nearest window is matched on: shorter ones are mostly stop words


class SyntheticQuery(BaseModel):
    query: str = Field(max_length=160, description="A short search query the passage answers")


@functools.cache
def training_prompts() -> PromptRegistry:
    """The prompts that write training data (`strata/train/prompts/`), loaded and validated once."""
    return PromptRegistry.from_directory(Path(__file__).with_name("prompts"), [SyntheticQuery])


class TrainingQuery(BaseModel):
    """A query, the paper it came from, and the passage of that paper it is trained to find."""

    query: str
    paper_id: str
    positive: str = Field(description="The positive passage, as the source writes it")
    source: Source


class TrainingPair(BaseModel):
    query: str
    passage: str
    label: float = Field(description="1 for the passage the query came from, 0 for a mined negative")
    source: Source = "llm"


def passage_of(
    texts: PaperTexts, source: Source, paper_id: str, words: int, query: str = "", windows: int = 1
) -> str:
    """How a source shows a paper: title and section queries name the paper's title, so they see bodies only
    (positives and negatives alike, so the model cannot tell them apart by a missing title), and a section query's
    negative is the other paper's section sharing most words with it (its positive is a section's opening, not a
    paper's, so an opening negative would teach the kind of passage, not relevance); the others see the reranker's
    own title + window, the one of its first `windows` sharing most words with `query` (the window a MaxP reranker's
    score would come from)."""
    sections = texts.sections(paper_id) if source == "section" else []
    if sections:  # matched on heading and text ('...: Methods' finds a Methods section), shown as text alone
        openings = {f"{heading} {prose}": " ".join(prose.split(maxsplit=words)[:words]) for heading, prose in sections}
        return openings[nearest_window(list(openings), query)]
    if source in UNTITLED:
        return " ".join(texts.body(paper_id)[:words])
    return nearest_window(texts.windows(paper_id, words, windows), query)


def nearest_window(windows: Sequence[str], query: str) -> str:
    """The window sharing most distinct words (lower case, 3+ letters) with `query`, the first on ties."""
    wanted = set(WORD.findall(query.lower()))
    return max(windows, key=lambda window: len(wanted.intersection(WORD.findall(window.lower()))))


def title_query(texts: PaperTexts, paper_id: str, words: int) -> TrainingQuery | None:
    title = texts.title(paper_id)
    if len(title.split()) < MIN_QUERY_WORDS or len(texts.body(paper_id)) < MIN_BODY_WORDS:
        return None
    return TrainingQuery(query=title, paper_id=paper_id, positive=passage_of(texts, "title", paper_id, words),
                         source="title")


def inverse_cloze_queries(
    texts: PaperTexts,
    paper_id: str,
    words: int,
    rng: random.Random,
    count: int = 1,
    keep: float = 0.0,
    windows: int = 1,
) -> list[TrainingQuery]:
    """Up to `count` different sentences of the body's first `windows` x `words` words (what the cross-encoder
    reads: a sentence beyond it asks about text the model never sees), each a query whose positive is the reranker's
    title + window where the sentence stood (of the first `windows`, from the first max(2, `windows`) x `words`
    words, so one window stays full once the sentence is out), with that sentence taken out, or, at rate `keep`,
    left in (Lee et al. keep it 10% of the time: a positive that never holds the query's words, against hard
    negatives mined for sharing them, teaches a reranker that word overlap means irrelevance)."""
    body = " ".join(texts.body(paper_id)[: max(2, windows) * words])
    sentences = SENTENCE_END.split(body)
    ends = itertools.accumulate(len(sentence.split()) for sentence in sentences)
    usable = [index for index, (sentence, end) in enumerate(zip(sentences, ends))
              if len(sentence.split()) >= MIN_QUERY_WORDS and end <= windows * words]  # fmt: skip
    if len(body.split()) < MIN_BODY_WORDS or len(sentences) < 2 or not usable:
        return []
    title = texts.title(paper_id)
    made = []
    for chosen in sorted(rng.sample(usable, min(count, len(usable)))):
        left_out = -1 if keep and rng.random() < keep else chosen
        rest = " ".join(sentence for index, sentence in enumerate(sentences) if index != left_out).split()
        at = len(" ".join(sentences[:chosen]).split())  # where the sentence stood (or stands) in `rest`
        start = max(start for start in window_starts(len(rest), words, windows) if start <= at)
        made.append(TrainingQuery(query=sentences[chosen], paper_id=paper_id,
                                  positive=titled(title, rest[start : start + words]), source="inverse-cloze"))
    return made


def section_queries(texts: PaperTexts, paper_id: str, words: int) -> list[TrainingQuery]:
    """'Paper title: section heading' for each top-level section with enough prose, its positive the first `words`
    words of that section (reading a paper's parts is what full-text reranking needs; abstract-only papers give
    none)."""
    title = texts.title(paper_id)
    return [
        TrainingQuery(query=f"{title}: {heading}" if title else heading, paper_id=paper_id,
                      positive=" ".join(prose.split(maxsplit=words)[:words]), source="section")
        for heading, prose in texts.sections(paper_id)
        if len(heading.split()) + len(title.split()) >= MIN_QUERY_WORDS and len(prose.split()) >= MIN_BODY_WORDS
    ]


def corpus_queries(texts: PaperTexts, paper_ids: Sequence[str], settings: RerankSettings) -> list[TrainingQuery]:
    """The LLM-free queries of up to `train_queries_per_source` papers sampled with the seed: a title query,
    `train_cloze_per_paper` inverse-cloze queries and the section queries of each."""
    rng = random.Random(settings.train_seed)
    sampled = rng.sample(list(paper_ids), min(settings.train_queries_per_source, len(paper_ids)))
    queries: list[TrainingQuery] = []
    for paper_id in sorted(sampled):
        title = title_query(texts, paper_id, settings.passage_words)
        queries += [title] if title is not None else []
        queries += inverse_cloze_queries(texts, paper_id, settings.passage_words, rng, settings.train_cloze_per_paper,
                                         settings.train_cloze_keep, settings.cross_encoder_windows)
        queries += section_queries(texts, paper_id, settings.passage_words)
    return queries


def writes_queries(settings: RerankSettings) -> bool:
    """Whether training asks the LLM for queries (training or validation ones): only then is it loaded."""
    return bool(settings.train_passages or settings.train_validation_written)


def sampled_papers(paper_ids: Collection[str], count: int, seed: int) -> list[str]:
    """Up to `count` of `paper_ids`, drawn with `seed`, in id order."""
    return sorted(random.Random(seed).sample(sorted(paper_ids), min(count, len(paper_ids))))


def llm_queries(
    texts: PaperTexts,
    paper_ids: Sequence[str],
    settings: RerankSettings,
    client: LLMClient,
    progress: Progress | None = None,
    stage: str = "LLM queries",
) -> tuple[list[TrainingQuery], int]:
    """(queries, failed generations): one LLM query for a passage of each of `paper_ids`."""
    prompts = training_prompts()
    queries: list[TrainingQuery] = []
    failed = 0
    for number, paper_id in enumerate(paper_ids):
        tell(progress, stage, number, len(paper_ids))
        positive = texts.passage(paper_id, settings.passage_words)
        try:
            answer = client.complete(prompts.render("rerank_query_gen", passage=positive), SyntheticQuery,
                                     max_tokens=48)
        except LLMError:
            failed += 1
            continue
        if answer.query.strip():
            queries.append(TrainingQuery(query=answer.query.strip(), paper_id=paper_id, positive=positive,
                                         source="llm"))
        else:
            failed += 1
    return queries, failed


# Dense similarity of each query to papers: (queries, paper ids) -> one row of cosines per query.
Similarity = Callable[[Sequence[str], Sequence[Sequence[str]]], list[np.ndarray]]


def mined_pairs(
    queries: Sequence[TrainingQuery],
    searcher: Searcher,
    texts: PaperTexts,
    settings: RerankSettings,
    similarity: Similarity | None,
    exclude: Collection[str] = (),
    progress: Progress | None = None,
) -> tuple[list[TrainingPair], int]:
    """(pairs, negatives dropped as likely false): each query's positive, then `train_negatives` papers drawn from
    its first-stage hits (`train_negative_method`; its own paper and `exclude` left out; with `similarity`, papers
    the dense encoder scores above the positive left out too)."""
    rng = random.Random(settings.train_seed + 2)
    pools = []
    for query in queries:
        hits = searcher.search(query.query, k=settings.train_negative_depth, method=settings.train_negative_method,
                               prf=False)
        pools.append([pid for pid in hits.paper_ids if pid != query.paper_id and pid not in exclude])
        tell(progress, "negatives mined", len(pools), len(queries))
    dropped = 0
    if similarity is not None:
        rows = similarity([query.query for query in queries], [[q.paper_id, *pool] for q, pool in zip(queries, pools)])
        kept_pools = []
        for pool, row in zip(pools, rows):
            kept = [paper_id for paper_id, score in zip(pool, row[1:]) if score <= row[0]]
            dropped += len(pool) - len(kept)
            kept_pools.append(kept)
        pools = kept_pools
    pairs: list[TrainingPair] = []
    for query, pool in zip(queries, pools):
        negatives = rng.sample(pool, min(settings.train_negatives, len(pool)))
        if not negatives:
            continue  # nothing to contrast the positive with
        pairs.append(TrainingPair(query=query.query, passage=query.positive, label=1.0, source=query.source))
        pairs += [
            TrainingPair(query=query.query, label=0.0, source=query.source,
                         passage=passage_of(texts, query.source, other, settings.passage_words, query.query,
                                            settings.cross_encoder_windows))
            for other in negatives
        ]
    return pairs, dropped


def split_by_paper(
    queries: Sequence[TrainingQuery], share: float, seed: int
) -> tuple[list[TrainingQuery], list[TrainingQuery]]:
    """(training, validation): a `share` of the papers, with every query that came from them, held out, so no
    validation query's paper was seen in training by another source's query."""
    papers = sorted({query.paper_id for query in queries})
    count = min(max(1, round(len(papers) * share)), len(papers) - 1)  # at least one paper on each side
    held = set(random.Random(seed + 3).sample(papers, count)) if len(papers) > 1 else set()
    return ([query for query in queries if query.paper_id not in held],
            [query for query in queries if query.paper_id in held])


def written_validation(
    held: Sequence[TrainingQuery],
    texts: PaperTexts,
    settings: RerankSettings,
    client: LLMClient | None,
    progress: Progress | None = None,
) -> tuple[list[TrainingQuery], int]:
    """(validation queries, failed generations): with an LLM and `train_validation_written`, LLM-written queries of
    the held-out papers only (those already written for training, then new ones for other held-out papers, up to
    that many); otherwise, or when none could be written, every held-out query."""
    if client is None or not settings.train_validation_written:
        return list(held), 0
    written = [query for query in held if query.source == "llm"][: settings.train_validation_written]
    have = {query.paper_id for query in written}
    others = sampled_papers({query.paper_id for query in held} - have,
                            settings.train_validation_written - len(written), settings.train_seed + 4)
    new, failed = llm_queries(texts, others, settings, client, progress, stage="validation queries")
    written += new
    return (written or list(held)), failed


def count_by_source(items: Sequence[TrainingQuery] | Sequence[TrainingPair]) -> dict[str, int]:
    counts = {source: 0 for source in SOURCES}
    for item in items:
        counts[item.source] += 1
    return {source: count for source, count in counts.items() if count}
