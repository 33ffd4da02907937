"""ToC retrieval fused with hybrid search (beyond STAIR): BM25 + dense over leaf text propose the candidate leaves,
the STAIR adapter orders them, and the two orders are fused by weighted rank fusion at the weight the adapter's
dev questions chose (0 keeps the hybrid order, so on dev the adapter can only help).

The adapter orders the candidates by trie-constrained beam search restricted to them: every candidate's answer is
scored, renormalised over the candidates, with as many beams as candidates.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from strata.rerank.fusion import FusionChoice, choose_weight, fuse
from strata.toc.baselines import LeafHybrid
from strata.toc.decode import PrefixCache, rank_prompts
from strata.toc.encode import Mode, PromptEncoder
from strata.toc.model import DocumentToc, LeafRanking, TocEntry, TrainingQuestion
from strata.toc.trie import LabelTrie

METHOD = "stair-fused"


class AdapterOrder:
    """A trained adapter ordering candidate leaves of one document; the ToC's KV cache is computed once."""

    def __init__(self, model: Any, encoder: PromptEncoder, toc: DocumentToc, mode: Mode, adapt_toc: bool) -> None:
        self.model, self.encoder, self.toc, self.mode = model, encoder, toc, mode
        self.prefix = PrefixCache(model, encoder.query_prefix(mode, toc), base=not adapt_toc)

    def order(self, question: str, candidates: Sequence[TocEntry]) -> list[str]:
        """Leaf numbers of `candidates`, the adapter's likeliest answer first."""
        if len(candidates) < 2:
            return [entry.number for entry in candidates]
        labels = {entry.number: self.encoder.answer_ids(entry)[:-1] for entry in candidates}
        trie = LabelTrie(labels, self.encoder.end_token)
        prompt = self.encoder.prompt_ids(self.encoder.prompt(self.mode, self.toc, question))
        width = len(candidates)
        (ranked,) = rank_prompts(self.model, self.encoder, [prompt], trie, width, width, 1, self.prefix)
        return [number for number, _ in ranked]


class FusedTocRetriever:
    """Hybrid candidates ordered by the adapter, fused with the hybrid order at `weight`."""

    def __init__(self, hybrid: LeafHybrid, adapter: AdapterOrder, candidates: int, weight: float, k: int = 60):
        self.hybrid, self.adapter, self.candidates, self.weight, self.k = hybrid, adapter, candidates, weight, k

    def orders(self, question: str) -> tuple[LeafRanking, list[str]]:
        """The hybrid ranking of the candidates and the adapter's order of them."""
        first = self.hybrid.rank(question, self.candidates)
        by_number = {leaf.number: self.adapter.toc.entry(leaf.number) for leaf in first.leaves}
        return first, self.adapter.order(question, list(by_number.values()))

    def rank(self, question: str, k: int) -> LeafRanking:
        started = time.perf_counter()
        if self.weight == 0.0:  # dev chose the hybrid order: no need to run the adapter at all
            first = self.hybrid.rank(question, self.candidates)
            return fused_ranking(self.adapter.toc, first, [], 0.0, self.k, k, started)
        first, adapter_order = self.orders(question)
        return fused_ranking(self.adapter.toc, first, adapter_order, self.weight, self.k, k, started)


def fused_ranking(
    toc: DocumentToc,
    first: LeafRanking,
    adapter_order: Sequence[str],
    weight: float,
    rrf_k: int,
    k: int,
    started: float,
) -> LeafRanking:
    """The top-k of `first`'s leaves in fused order, scored by their fused rank (1 / rank)."""
    order = fuse([leaf.number for leaf in first.leaves], adapter_order, weight, rrf_k)[:k]
    return LeafRanking(
        query=first.query,
        method=METHOD,
        leaves=[toc.entry(number).scored(1.0 / rank) for rank, number in enumerate(order, start=1)],
        seconds=time.perf_counter() - started,
    )


def choose_fusion_weight(
    retriever: FusedTocRetriever, dev: Sequence[TrainingQuestion], max_p: float = 1.0
) -> FusionChoice:
    """The adapter's weight in the fusion that maximises dev R@1 (ties to the smaller weight: 0 when it never
    helps, and 0 when its gain's paired p-value exceeds `max_p`), from the dev questions' hybrid candidates and
    adapter orders."""
    first: dict[str, list[str]] = {}
    ordered: dict[str, list[str]] = {}
    for index, item in enumerate(dev):
        ranking, ordered[str(index)] = retriever.orders(item.question)
        first[str(index)] = [leaf.number for leaf in ranking.leaves]

    def r1(fused: Mapping[str, list[str]]) -> dict[str, float]:
        return {key: float(bool(order) and order[0] == dev[int(key)].leaf) for key, order in fused.items()}

    return choose_weight(first, ordered, r1, "dev R@1", k=retriever.k, max_p=max_p)
