"""The paired randomization test every comparison uses: benchmarks between methods, and validation deciding whether a
learned stage may change the first stage's order."""

from __future__ import annotations

import numpy as np
from scipy.stats import permutation_test

DEFAULT_PERMUTATIONS = 10_000
DEFAULT_SEED = 20261130


def paired_p_value(
    baseline: np.ndarray, system: np.ndarray, permutations: int = DEFAULT_PERMUTATIONS, seed: int = DEFAULT_SEED
) -> float:
    """Two-sided paired randomization test of the mean per-query difference (sign flips of the deltas)."""
    test = permutation_test(
        (system, baseline),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        n_resamples=permutations,
        alternative="two-sided",
        vectorized=True,
        random_state=np.random.default_rng(seed),
    )
    return float(test.pvalue)
