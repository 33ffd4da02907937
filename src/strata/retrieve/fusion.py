"""Reciprocal rank fusion (Cormack et al., 2009): the one way rankings are combined, for search and for Relate."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Key]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[Key, float]]:
    """Fuse rankings (each a list of ids, best first) into (id, score) pairs, best first.

    score(id) = Σ weight_i / (k + rank_i(id)) over the rankings holding it, with 1-based ranks; an id repeated
    within one ranking counts at its best rank only. Equal scores are ordered by id (ids must be mutually orderable),
    so ties never depend on dictionary or input order.
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    if k < 0:
        raise ValueError(f"the RRF constant k must be non-negative, got {k}")
    scores: dict[Key, float] = {}
    for ranking, weight in zip(rankings, weights):
        # Each id at its first (best) rank: a dict keeps first insertions, in order.
        best_rank = dict(zip(reversed(ranking), range(len(ranking), 0, -1)))
        for key, rank in best_rank.items():
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    # Sorting (-score, id) pairs compares in C, without a key function called per id (a search fuses ~2,000 ids).
    return [(key, -negative) for negative, key in sorted([(-score, key) for key, score in scores.items()])]
