"""The interface every reranker implements, and the identity reranker (keep the first-stage order)."""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

from strata.documents.model import Ranking


@runtime_checkable
class Reranker(Protocol):
    """Reorders a first-stage ranking for a query.

    The result holds the same papers (a reranker never invents or drops candidates), ranks renumbered from 1, and its
    `method` names the first stage and the reranker, e.g. 'hybrid>corank'. Ties keep the first-stage order.
    """

    name: str

    def rank(self, query: str, candidates: Ranking) -> Ranking: ...


@runtime_checkable
class ScoringReranker(Reranker, Protocol):
    """A reranker with a real score per paper (a cross-encoder's logit), so its scores, not only its order, can be
    fused with the first stage's."""

    def scores(self, query: str, candidates: Ranking) -> dict[str, float]:
        """The score of each candidate it rescored (the top of `candidates`; the rest keep the first-stage order)."""
        ...


class FirstStage:
    """Keeps the first-stage order: the 'no reranking' choice, and the baseline every reranker is measured against."""

    name = "first-stage"

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        return candidates


def nan_lowest(score: float) -> float:
    """`score`, or -inf for a NaN (a score the model could not give): NaN compares false with everything, so a max or
    a sort over scores holding one depends on where the NaN stands."""
    return -math.inf if math.isnan(score) else score
