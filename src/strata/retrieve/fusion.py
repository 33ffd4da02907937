"""Reciprocal rank fusion (Cormack et al., 2009): the one way rankings are combined, for search and for Relate."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

import numpy as np

Key = TypeVar("Key", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Key]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[Key, float]]:
    """Fuse rankings (each a list of ids, best first) into (id, score) pairs, best first.

    score(id) = Σ weight_i / (k + rank_i(id)) over the rankings holding it, with 1-based ranks; an id repeated
    within one ranking counts at its best rank only. Equal scores are ordered by id (ids must be mutually orderable),
    so ties never depend on dictionary or input order.
    """
    weights = _checked_weights(rankings, k, weights)
    scores: dict[Key, float] = {}
    for ranking, weight in zip(rankings, weights):
        # Each id at its first (best) rank: a dict keeps first insertions, in order.
        best_rank = dict(zip(reversed(ranking), range(len(ranking), 0, -1)))
        for key, rank in best_rank.items():
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    # Sorting (-score, id) pairs compares in C, without a key function called per id (a search fuses ~2,000 ids).
    return [(key, -negative) for negative, key in sorted([(-score, key) for key, score in scores.items()])]


def fuse_row_id_arrays(
    rankings: Sequence[Sequence[int] | np.ndarray], k: int = 60, weights: Sequence[float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`reciprocal_rank_fusion` of integer ids in numpy, as two arrays (ids and scores, best first), the same pairs bit
    for bit: each id's terms are added in ranking order, starting from 0.0, as there. A hybrid search fuses ~2,000
    chunk row ids per query, which cost ~1 ms in dictionaries; pairs are made only for what a caller reads."""
    weights = _checked_weights(rankings, k, weights)
    ids: list[np.ndarray] = []
    terms: list[np.ndarray] = []
    for ranking, weight in zip(rankings, weights):
        unique, first = np.unique(np.asarray(ranking, dtype=np.int64), return_index=True)  # first: the best rank
        ids.append(unique)
        terms.append(weight / (k + 1 + first))
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    fused, slot = np.unique(np.concatenate(ids), return_inverse=True)
    scores = np.zeros(fused.size)
    np.add.at(scores, slot, np.concatenate(terms))  # unbuffered, in the order given: ranking by ranking
    order = np.lexsort((fused, -scores))
    return fused[order], scores[order]


def fuse_score_arrays(
    rankings: Sequence[tuple[Sequence[int] | np.ndarray, Sequence[float] | np.ndarray]], weights: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Convex combination of min-max scaled scores (Bruch et al., 2023, "An analysis of fusion functions for hybrid
    retrieval"): each ranking's (ids, scores) scaled to [0, 1] over its own hits, an id it did not return counting 0
    there (its lowest), then weighted and summed; ids and scores best first, ties by id. An id repeated within one
    ranking counts at its best score."""
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    ids: list[np.ndarray] = []
    terms: list[np.ndarray] = []
    for (ranking, scores), weight in zip(rankings, weights):
        values = np.asarray(scores, dtype=np.float64)
        if not values.size:
            continue
        low, span = values.min(), values.max() - values.min()
        order = np.argsort(-values, kind="stable")
        unique, first = np.unique(np.asarray(ranking, dtype=np.int64)[order], return_index=True)
        ids.append(unique)
        terms.append(weight * ((values[order][first] - low) / span if span > 0 else np.ones(unique.size)))
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    fused, slot = np.unique(np.concatenate(ids), return_inverse=True)
    total = np.zeros(fused.size)
    np.add.at(total, slot, np.concatenate(terms))
    best = np.lexsort((fused, -total))
    return fused[best], total[best]


def _checked_weights(rankings: Sequence[object], k: int, weights: Sequence[float] | None) -> Sequence[float]:
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    if k < 0:
        raise ValueError(f"the RRF constant k must be non-negative, got {k}")
    return weights
