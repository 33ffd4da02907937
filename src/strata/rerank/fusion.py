"""Fusion with the first stage, so that a reranker can only help: the final order interpolates the reranker's ranks
(or scores) with the first stage's, at a weight chosen on a validation split (0 keeps the first-stage order).

Ranks are fused by default: every reranker has ranks (a listwise LLM gives nothing else), and a rank-based
interpolation needs no per-query score normalisation. The reranker contributes weight / (k + rank) and the first
stage (1 - weight) / (k + rank), as weighted reciprocal rank fusion (Cormack et al., 2009) with the same `k` as the hybrid first stage. A reranker with real scores
(the cross-encoder) can also fuse min-max normalised scores (CombSUM of normalised scores, Lee 1997), which keeps how
far apart it puts two papers, not only their order; validation chooses between the two.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from strata.config import Settings
from strata.documents.model import Ranking
from strata.rerank.base import Reranker, ScoringReranker
from strata.rerank.rerankers import reordered
from strata.stats import paired_p_value

WEIGHTS: tuple[float, ...] = tuple(step / 10 for step in range(11))  # the grid a validation split chooses from


Order = Ranking | Sequence[str]  # a paper ranking, or any ids best first (ToC leaves)
FusionMode = Literal["rank", "score"]


def _ids(order: Order) -> Sequence[str]:
    return order.paper_ids if isinstance(order, Ranking) else order


def fuse(first: Order, reranked: Order, weight: float, k: int = 60) -> list[str]:
    """Ids of `first`, ordered by (1 - weight) / (k + first-stage rank) + weight / (k + reranked rank); ties keep
    the first-stage order. An id the reranker did not place counts at the reranker's last rank + 1."""
    reranked_rank = {paper_id: rank for rank, paper_id in enumerate(_ids(reranked), start=1)}
    missing = len(reranked_rank) + 1
    scored = [
        ((1 - weight) / (k + rank) + weight / (k + reranked_rank.get(paper_id, missing)), -rank, paper_id)
        for rank, paper_id in enumerate(_ids(first), start=1)
    ]
    return [paper_id for _, _, paper_id in sorted(scored, reverse=True)]


def min_max(values: Sequence[float]) -> list[float]:
    """`values` scaled to [0, 1] (all 0 when they are equal); see `_finite` for a model's inf or NaN."""
    finite = _finite(values)
    low, span = min(finite), max(finite) - min(finite)
    return [(value - low) / span if span else 0.0 for value in finite]


def _finite(values: Sequence[float]) -> list[float]:
    """`values` with +inf one step (the finite values' range, or 1) above the highest finite value, and -inf and NaN
    one step below the lowest: one non-finite score would otherwise make every scaled score NaN (inf - inf), and NaN
    compares false in any sort."""
    finite = [value for value in values if math.isfinite(value)] or [0.0]
    low, high = min(finite), max(finite)
    step = (high - low) or 1.0
    return [value if math.isfinite(value) else high + step if value == math.inf else low - step for value in values]


def fuse_scores(first: Ranking, scores: Mapping[str, float], weight: float) -> list[str]:
    """Ids of `first`: those the reranker scored (its top), ordered by (1 - weight) * first-stage score + weight *
    reranker score, each min-max normalised over them; then the rest in first-stage order. Ties keep the first-stage
    order, so weight 1 is the reranker's own order and weight 0 the first stage's (its scores never rise down its
    ranking, and the scored head is its top)."""
    head = [candidate for candidate in first.candidates if candidate.paper_id in scores]
    if not head:
        return first.paper_ids
    mixed = [(1 - weight) * own + weight * theirs for own, theirs in zip(
        min_max([candidate.score for candidate in head]), min_max([scores[c.paper_id] for c in head]))]
    order = sorted(range(len(head)), key=lambda index: (-mixed[index], index))
    rest = [paper_id for paper_id in first.paper_ids if paper_id not in scores]
    return [head[index].paper_id for index in order] + rest


def reordered_by_scores(candidates: Ranking, scores: Mapping[str, float], name: str) -> Ranking:
    """`candidates` reordered by a reranker's scores alone (those it did not score after, in first-stage order)."""
    by_id = {candidate.paper_id: candidate for candidate in candidates.candidates}
    return reordered(candidates, [by_id[paper_id] for paper_id in fuse_scores(candidates, scores, 1.0)], name)


class FusedReranker:
    """`inner`'s order (or, in mode 'score', its scores) fused with the first stage's at `weight` (see `fuse` and
    `fuse_scores`); weight 0 returns the first stage."""

    def __init__(self, inner: Reranker, weight: float, k: int = 60, mode: FusionMode = "rank") -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"fusion weight must be within [0, 1], got {weight}")
        if mode == "score" and not isinstance(inner, ScoringReranker):
            raise ValueError(f"{inner.name} gives no scores to fuse: fuse its ranks (mode 'rank')")
        self.inner, self.weight, self.k, self.mode = inner, weight, k, mode
        self.name = f"{inner.name}+{'score-' if mode == 'score' else ''}fusion({weight:g})"

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        if self.weight == 0.0 or not candidates.candidates:
            return candidates
        if isinstance(self.inner, ScoringReranker) and self.mode == "score":
            order = fuse_scores(candidates, self.inner.scores(query, candidates), self.weight)
        else:
            order = fuse(candidates, self.inner.rank(query, candidates), self.weight, self.k)
        by_id = {candidate.paper_id: candidate for candidate in candidates.candidates}
        return reordered(candidates, [by_id[paper_id] for paper_id in order], self.name)


class FusionChoice(BaseModel):
    """The weight a validation split chose, and the curve it was chosen from."""

    weight: float = Field(description="Reranker weight in the fusion; 0 = the reranker did not help on validation")
    mode: FusionMode = Field(default="rank", description="What is fused: ranks (weighted RRF) or min-max scores")
    metric: str = Field(description="The validation measure maximised")
    queries: int = Field(description="Validation queries")
    curve: dict[str, float] = Field(description="Validation score at each weight tried (keys as '%g')")
    best_weight: float | None = Field(
        default=None, description="The weight scoring best on validation, before the evidence its gain needs"
    )
    p_value: float | None = Field(
        default=None, description="Paired randomization p of the best weight's per-query gain over weight 0"
    )

    @property
    def gain(self) -> float:
        """Validation score at the chosen weight minus the first stage's (weight 0)."""
        return self.curve[f"{self.weight:g}"] - self.curve["0"]

    def verdict(self) -> str:
        """What the validation split decided, in words."""
        if self.weight:
            p_value = "" if self.p_value is None else f", p {self.p_value:.3f}"
            return f"{self.mode}s fused at weight {self.weight:g} ({self.metric} {self.gain:+.4f}{p_value})"
        if self.best_weight and self.p_value is not None:
            gain = self.curve[f"{self.best_weight:g}"] - self.curve["0"]
            return (f"its best weight {self.best_weight:g} gained {self.metric} {gain:+.4f} on {self.queries} "
                    f"validation queries, p {self.p_value:.3f}: too little evidence, the first-stage order is kept")
        return "it does not beat the first stage on validation: the first-stage order is kept"


def choose_weight(
    first: Mapping[str, Order],
    reranked: Mapping[str, Order],
    score: Callable[[Mapping[str, list[str]]], Mapping[str, float]],
    metric: str,
    weights: Sequence[float] = WEIGHTS,
    k: int = 60,
    max_p: float = 1.0,
) -> FusionChoice:
    """The weight whose rank-fused rankings score best on validation (`score` gives each query's value); ties go to
    the smaller weight (closer to the first stage), so a reranker that does not help gets weight 0 and changes
    nothing. The best weight is kept only when its per-query gain over weight 0 has a paired randomization p-value of
    at most `max_p`: a gain of a few validation queries is noise a small split cannot tell from a loss on new
    queries."""
    return _choose(lambda weight: {qid: fuse(first[qid], reranked[qid], weight, k) for qid in first},
                   score, metric, weights, max_p, "rank")  # fmt: skip


def choose_fusion(
    first: Mapping[str, Ranking],
    scores: Mapping[str, Mapping[str, float]],
    score: Callable[[Mapping[str, list[str]]], Mapping[str, float]],
    metric: str,
    k: int = 60,
    max_p: float = 1.0,
) -> FusionChoice:
    """For a reranker with scores: the mode (of `choose_by_mode`) whose chosen weight scores better on validation
    (ranks on a tie)."""
    return preferred(choose_by_mode(first, scores, score, metric, k, max_p))


def choose_by_mode(
    first: Mapping[str, Ranking],
    scores: Mapping[str, Mapping[str, float]],
    score: Callable[[Mapping[str, list[str]]], Mapping[str, float]],
    metric: str,
    k: int = 60,
    max_p: float = 1.0,
) -> dict[FusionMode, FusionChoice]:
    """`choose_weight` for fused ranks (the reranker's order by its scores) and for fused scores (`fuse_scores`)."""
    reranked = {qid: fuse_scores(first[qid], scores[qid], 1.0) for qid in first}
    return {"rank": choose_weight(first, reranked, score, metric, k=k, max_p=max_p),
            "score": _choose(lambda weight: {qid: fuse_scores(first[qid], scores[qid], weight) for qid in first},
                             score, metric, WEIGHTS, max_p, "score")}  # fmt: skip


def preferred(choices: Mapping[FusionMode, FusionChoice]) -> FusionChoice:
    """The choice whose chosen weight scores best on validation; ranks on a tie."""
    return max(choices.values(), key=lambda choice: (round(choice.curve[f"{choice.weight:g}"], 12),
                                                     choice.mode == "rank"))  # fmt: skip


def _choose(
    fused: Callable[[float], dict[str, list[str]]],
    score: Callable[[Mapping[str, list[str]]], Mapping[str, float]],
    metric: str,
    weights: Sequence[float],
    max_p: float,
    mode: FusionMode,
) -> FusionChoice:
    per_query = {f"{weight:g}": score(fused(weight)) for weight in weights}
    curve = {key: float(np.mean(list(values.values()))) if values else 0.0 for key, values in per_query.items()}
    best = max(weights, key=lambda weight: (round(curve[f"{weight:g}"], 12), -weight))
    p_value = None
    if best and per_query["0"]:
        ids = sorted(per_query["0"])
        p_value = paired_p_value(np.array([per_query["0"][q] for q in ids]),
                                 np.array([per_query[f"{best:g}"][q] for q in ids]))  # fmt: skip
    chosen = best if p_value is None or p_value <= max_p else 0.0
    return FusionChoice(weight=chosen, mode=mode, metric=metric, queries=len(per_query["0"]), curve=curve,
                        best_weight=best, p_value=p_value)  # fmt: skip


class TunedFusion(BaseModel):
    """What `strata tune-reranker` measured for an LLM reranker: the weight chosen and for which model."""

    method: str = Field(description="The reranker (rerank.method) measured")
    model: str = Field(description="The LLM it ran on (llm.model): a weight chosen on one model is not used on another")
    fusion: FusionChoice = Field(description="The weight chosen on the validation queries, with its curve")
    rerank: dict = Field(description="The rerank settings it was measured with (depths, passage words, ...)")
    reranker_validation: float = Field(description="Validation score of the reranker alone")
    written_queries: int = Field(description="LLM-written validation queries")
    failed_queries: int = Field(description="Query generations that failed")
    seconds: float = Field(description="Writing the queries and reranking them")

    def summary(self) -> str:
        fusion = self.fusion
        return (f"{self.method} on {self.model}, {fusion.queries} written validation queries: first stage "
                f"{fusion.metric} {fusion.curve['0']:.4f}, {self.method} alone {self.reranker_validation:.4f}; "
                f"{fusion.verdict()}; {self.seconds:.0f} s")  # fmt: skip


def tuned_fusion_file(settings: Settings, method: str) -> Path:
    return Path(settings.store.home) / "rerank" / f"fusion-{method}.json"


# The rerank settings a tuned weight depends on: at another value it would be another reranker's weight.
TUNED_CAPS = ("pool", "pointwise_depth", "listwise_depth", "passage_words", "window", "stride", "sliding_depth",
              "fine_k", "listwise_answer", "window_tokens", "keywords", "sections", "features_input_words",
              "random_seed")  # fmt: skip


def tuned_fusion(settings: Settings, method: str) -> TunedFusion | None:
    """What `strata tune-reranker` measured for this LLM reranker on the configured model at the configured
    TUNED_CAPS; None when it was never tuned, or tuned on another model or at other caps."""
    path = tuned_fusion_file(settings, method)
    if not path.is_file():
        return None
    tuned = TunedFusion.model_validate_json(path.read_text(encoding="utf-8"))
    ours = settings.rerank.model_dump(mode="json")
    if tuned.model != settings.llm.model or any(tuned.rerank.get(cap) != ours[cap] for cap in TUNED_CAPS):
        return None
    return tuned
