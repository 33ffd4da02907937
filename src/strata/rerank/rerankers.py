"""The listwise LLM rerankers: vanilla, sliding window, CoRank and CoRank's two controls."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence

from strata.config import RerankSettings
from strata.documents.model import Candidate, Ranking
from strata.rerank.features import CompactFeatures
from strata.rerank.listwise import ListwiseLLM, estimated_tokens
from strata.rerank.texts import PaperTexts


def reordered(candidates: Ranking, head: Sequence[Candidate], name: str) -> Ranking:
    """`head` first, then every other candidate in its first-stage order; ranks renumbered, scores strictly
    decreasing (so evaluation sees exactly this order)."""
    head_ids = {candidate.paper_id for candidate in head}
    ordered = list(head) + [candidate for candidate in candidates.candidates if candidate.paper_id not in head_ids]
    total = len(ordered)
    return Ranking(
        query=candidates.query,
        method=f"{candidates.method}>{name}",
        candidates=[
            candidate.model_copy(update={"rank": rank, "score": float(total - rank + 1)})
            for rank, candidate in enumerate(ordered, start=1)
        ],
    )


class ListwiseReranker:
    """Vanilla listwise: the top `listwise_depth` candidates in one prompt, on full text."""

    name = "listwise"

    def __init__(self, llm: ListwiseLLM, texts: PaperTexts, settings: RerankSettings) -> None:
        self.llm, self.texts, self.settings = llm, texts, settings

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        top = candidates.candidates[: self.settings.listwise_depth]
        return reordered(candidates, fine_order(self.llm, self.texts, self.settings, query, top), self.name)


class SlidingWindowReranker:
    """RankGPT: windows of `window` full-text candidates, `stride` apart, from the bottom of the top
    `sliding_depth` to the top."""

    name = "sliding-window"

    def __init__(self, llm: ListwiseLLM, texts: PaperTexts, settings: RerankSettings) -> None:
        self.llm, self.texts, self.settings = llm, texts, settings

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        settings = self.settings
        top = candidates.candidates[: settings.sliding_depth]
        texts = [self.texts.passage(candidate.paper_id, settings.passage_words) for candidate in top]
        order = self.llm.sliding(query, texts, settings.window, settings.window - settings.stride, full_answers=True)
        return reordered(candidates, [top[index] for index in order], self.name)


MIN_PASSAGE_WORDS = 10  # rerank.passage_words' own floor


def fine_order(
    llm: ListwiseLLM, texts: PaperTexts, settings: RerankSettings, query: str, shortlist: Sequence[Candidate]
) -> list[Candidate]:
    """The shortlist in one full-text listwise prompt (CoRank's fine stage and vanilla listwise). Passages are
    shortened evenly until the prompt fits the listwise LLM's `window_tokens`: twenty 120-word SciFact abstracts
    overflowed the 4096-token context in 64 of 100 queries, and an overflowing prompt keeps the prior order."""
    words = settings.passage_words
    while True:
        passages = [texts.passage(candidate.paper_id, words) for candidate in shortlist]
        total = sum(estimated_tokens(passage) for passage in passages)
        if total <= llm.window_tokens or words <= MIN_PASSAGE_WORDS:
            return [shortlist[index] for index in llm.order_window(query, passages)]
        words = max(MIN_PASSAGE_WORDS, int(words * llm.window_tokens / total))  # strictly fewer each time


Representation = Callable[[str, Sequence[Candidate]], list[str]]


class CoarseToFineReranker:
    """CoRank's shape: a coarse listwise pass over the top `pool` candidates in a compact representation (windows
    cut to the token budget, each window naming its best `fine_k`), then the best `fine_k` reranked on full text."""

    def __init__(
        self, name: str, llm: ListwiseLLM, texts: PaperTexts, settings: RerankSettings, compact: Representation
    ) -> None:
        self.name, self.llm, self.texts, self.settings, self.compact = name, llm, texts, settings, compact

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        pool = candidates.candidates[: self.settings.pool]
        fine_k = self.settings.fine_k
        compact = self.compact(query, pool)
        order = self.llm.sliding(query, compact, window=len(pool), carry=fine_k, full_answers=False)
        coarse = [pool[index] for index in order]
        head = fine_order(self.llm, self.texts, self.settings, query, coarse[:fine_k]) + coarse[fine_k:]
        return reordered(candidates, head, self.name)


def form4_representation(features: CompactFeatures, texts: PaperTexts, settings: RerankSettings) -> Representation:
    """CoRank: each candidate as its Form 4 (features extracted first where missing)."""

    def represent(query: str, pool: Sequence[Candidate]) -> list[str]:
        features.ensure(candidate.paper_id for candidate in pool)
        query_vector = features.embedder.embed_query(query)
        return [
            features.form4(query_vector, candidate.paper_id)
            # a failed extraction falls back to the title, so the candidate still takes part
            or texts.passage(candidate.paper_id, 0)
            for candidate in pool
        ]

    return represent


def truncated_representation(form4: Representation, texts: PaperTexts) -> Representation:
    """Control: each candidate's full text cut to as many words as its Form 4 has (token-equivalent, no IE)."""

    def represent(query: str, pool: Sequence[Candidate]) -> list[str]:
        lengths = [len(text.split()) for text in form4(query, pool)]
        return [truncated_words(texts.passage(c.paper_id, words), words) for c, words in zip(pool, lengths)]

    return represent


def truncated_words(text: str, words: int) -> str:
    return " ".join(text.split()[:words])


class RandomPoolReranker:
    """Control: `fine_k` candidates drawn at random (seeded by query and seed) from the top `pool`, reranked on
    full text; the pool's other candidates follow in first-stage order."""

    name = "random-pool"

    def __init__(self, llm: ListwiseLLM, texts: PaperTexts, settings: RerankSettings) -> None:
        self.llm, self.texts, self.settings = llm, texts, settings

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        pool = candidates.candidates[: self.settings.pool]
        seed = hashlib.sha256(f"{self.settings.random_seed}\n{query}".encode()).hexdigest()
        drawn = sorted(random.Random(seed).sample(range(len(pool)), min(self.settings.fine_k, len(pool))))
        head = fine_order(self.llm, self.texts, self.settings, query, [pool[index] for index in drawn])
        return reordered(candidates, head, self.name)
