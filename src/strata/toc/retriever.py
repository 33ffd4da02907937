"""STAIR-style retrieval with the configured LLM client: the ToC in the prompt, the answer a real leaf.

With the embedded backend the answer is decoded through a trie of the choices' labels (a handful of model calls on
a KV cache that keeps the ToC between questions). A backend without next-token log-probabilities (an HTTP server)
scores every choice's label as a continuation instead. Unconstrained generation is kept to measure hallucination.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from strata.config import LLMSettings, Settings, TocSettings
from strata.llm import LLMClient, Prompt
from strata.llm.backend import TokenBackend, exposes_tokens
from strata.toc.model import DocumentToc, LeafRanking, TocEntry, toc_prompts
from strata.toc.tree import LEAF_MARK, TocView, finalist_views, plan_views
from strata.toc.trie import LabelTrie, best_first

SELECT_PROMPT = "toc_select"
GENERATION_TOKENS = 48


def toc_llm_settings(settings: Settings) -> LLMSettings:
    """The LLM settings with a context window large enough for ToC prompts."""
    return settings.llm.model_copy(update={"n_ctx": max(settings.llm.n_ctx, settings.toc.context_tokens)})


class TocRetriever:
    """Ranks a document's leaves for a question; views (and tries) are computed once per document and scope."""

    def __init__(self, client: LLMClient, settings: TocSettings) -> None:
        self.client = client
        self.settings = settings
        self.registry = toc_prompts()
        self._tokens = client.backend if exposes_tokens(client.backend) else None
        self._views: dict[tuple[str, str | None], list[TocView]] = {}
        self._tries: dict[tuple[tuple[str, str], ...], LabelTrie] = {}
        self.constrained_steps = 0  # next-token evaluations of the trie search (untraced: not client calls)

    def rank(self, toc: DocumentToc, query: str, k: int | None = None) -> LeafRanking:
        """Top-k leaves by constrained log-probability."""
        started = time.perf_counter()
        ranked = self._rank_scope(toc, query, None, k or self.settings.top_k)
        return LeafRanking(
            query=query,
            method="llm-constrained",
            leaves=[entry.scored(score) for entry, score in ranked],
            seconds=time.perf_counter() - started,
        )

    def generate(self, toc: DocumentToc, query: str) -> LeafRanking:
        """Free generation on the first view; a leaf only if the text names one (else counted as hallucination)."""
        started = time.perf_counter()
        prompt = self.prompt(toc, self.views(toc, None)[0], query)
        text = self.client.complete_text(prompt, max_tokens=GENERATION_TOKENS)
        leaf = match_generation(toc, text)
        return LeafRanking(
            query=query,
            method="llm-unconstrained",
            leaves=[leaf.scored(0.0)] if leaf else [],
            raw_output=text,
            hallucinated=leaf is None,
            seconds=time.perf_counter() - started,
        )

    def prompt(self, toc: DocumentToc, view: TocView, query: str) -> Prompt:
        return self.registry.render(SELECT_PROMPT, book=toc.title or toc.paper_id, toc=view.text, query=query)

    def views(self, toc: DocumentToc, scope: TocEntry | None) -> list[TocView]:
        key = (toc.paper_id, scope.number if scope else None)
        if key not in self._views:
            self._views[key] = plan_views(toc, scope, self._toc_budget(), self._count_tokens)
        return self._views[key]

    def _rank_scope(self, toc: DocumentToc, query: str, scope: TocEntry | None, k: int) -> list[tuple[TocEntry, float]]:
        results: list[tuple[TocEntry, float]] = []
        opened = 0
        for entry, score in self._tournament(toc, query, scope, k):
            if entry.is_leaf:
                results.append((entry, score))
            elif opened < self.settings.expand_collapsed:
                opened += 1
                results.extend((leaf, score + inner) for leaf, inner in self._rank_scope(toc, query, entry, k))
        results.sort(key=lambda item: -item[1])
        return results[:k]

    def _tournament(self, toc: DocumentToc, query: str, scope: TocEntry | None, k: int) -> list[tuple[TocEntry, float]]:
        """The best `k` choices of the views of `scope`, best first, all scored in one prompt.

        Scores are log-probabilities within a prompt (over its own choices, on the trie path), so those of different
        windows are not on one scale: a window of one choice scores log 1 = 0 whatever the question. Each window's
        best `k` therefore go on to another round, in one view when they fit it, until one prompt ranks them all.
        """
        views = self.views(toc, scope)
        knocked_out: list[TocEntry] = []  # those out of the running, the latest round's first
        while len(views) > 1:
            found = [self._decode(self.prompt(toc, view, query), view.choices, k) for view in views]
            field = sum(len(view.choices) for view in views)
            finalists = [entry for ranked in found for entry, _ in ranked]
            if len(finalists) == field:  # windows of k choices or fewer: only their winners go on, so the field shrinks
                finalists = [ranked[0][0] for ranked in found]
            if len(finalists) == field:  # a window per choice: no prompt holds two of them, so they cannot be compared
                return sorted((item for ranked in found for item in ranked), key=lambda item: -item[1])[:k]
            # Each window's runners-up by their place in it: a later round's ranked above an earlier round's.
            runners_up = [entry for place in range(1, k) for ranked in found if place < len(ranked)
                          for entry in [ranked[place][0]] if entry not in finalists]  # fmt: skip
            knocked_out = runners_up + knocked_out
            views = finalist_views(toc, scope, finalists, self._toc_budget(), self._count_tokens)
        final = self._decode(self.prompt(toc, views[0], query), views[0].choices, k)
        return final + self._below(final, knocked_out[: k - len(final)])

    @staticmethod
    def _below(ranked: list[tuple[TocEntry, float]], rest: list[TocEntry]) -> list[tuple[TocEntry, float]]:
        """`rest` in order, each scored a nat below the one before, under the last of `ranked`: windows shrunk to
        their winners would otherwise leave fewer than k."""
        floor = ranked[-1][1] if ranked else 0.0
        return [(entry, floor - place) for place, entry in enumerate(rest, start=1)]

    def _decode(self, prompt: Prompt, choices: Sequence[TocEntry], k: int) -> list[tuple[TocEntry, float]]:
        by_number = {entry.number: entry for entry in choices}
        if self._tokens is None:
            scores = self.client.score(prompt, [entry.label for entry in choices])
            ranked = sorted(zip(choices, (s.logprob for s in scores)), key=lambda item: -item[1])
            return ranked[:k]
        backend = self._tokens
        trie = self._trie(backend, choices)

        def next_token(answer: Sequence[int]) -> np.ndarray:
            self.constrained_steps += 1
            return backend.next_token_logprobs(prompt.system, prompt.user, answer)

        found = best_first(
            trie,
            next_token,
            k,
            self.settings.beam_width,
            self.settings.max_expansions,
        )
        return [(by_number[number], score) for number, score in found]

    def _trie(self, backend: TokenBackend, choices: Sequence[TocEntry]) -> LabelTrie:
        key = tuple((entry.number, entry.label) for entry in choices)  # one retriever may serve several books
        if key not in self._tries:
            self._tries[key] = LabelTrie(
                {entry.number: backend.tokenize_answer(entry.label) for entry in choices},
                backend.end_of_answer_token,
            )
        return self._tries[key]

    def _toc_budget(self) -> int:
        return self.settings.context_tokens - self.settings.answer_reserve_tokens

    def _count_tokens(self, text: str) -> int:
        if self._tokens is not None:
            return len(self._tokens.tokenize_answer(text))
        return len(text) // 3 + 1  # no tokenizer over HTTP: a conservative estimate for English text


def match_generation(toc: DocumentToc, text: str) -> TocEntry | None:
    """The leaf a free-text answer names: its first line equals a leaf's label, its adapter answer or its number
    (case and spacing aside), or exactly one leaf's title. Anything else, inner entries included, names no leaf
    (STAIR's hallucination)."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = _normalise(line.removeprefix(LEAF_MARK + " ").removeprefix(LEAF_MARK.capitalize() + " "))
    leaves = toc.leaves()
    for leaf in leaves:
        if line in (_normalise(leaf.label), _normalise(leaf.answer), leaf.number):
            return leaf
    titled = [leaf for leaf in leaves if _normalise(leaf.title) == line]
    return titled[0] if len(titled) == 1 else None


def _normalise(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".")
