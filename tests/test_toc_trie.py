"""Trie-constrained best-first search: only real answers, exact on small tries, bounded model calls."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from strata.toc.trie import LabelTrie, best_first

VOCAB = 50
END = 0


def fake_model(seed: int):
    """Deterministic next-token log-probabilities that depend on the whole answer prefix; counts its calls."""
    calls: list[tuple[int, ...]] = []

    def next_logprobs(prefix) -> np.ndarray:
        calls.append(tuple(prefix))
        rng = np.random.default_rng([seed, *prefix])
        logits = rng.normal(size=VOCAB) * 3
        return logits - np.log(np.exp(logits).sum())

    return next_logprobs, calls


def exact_scores(trie: LabelTrie, next_logprobs) -> dict[str, float]:
    """Every answer's renormalised log-probability, by walking its tokens."""
    scores = {}
    for key, tokens in trie.sequences.items():
        total = 0.0
        for i, token in enumerate(tokens):
            allowed = trie.allowed(tokens[:i])
            if len(allowed) > 1:
                logprobs = next_logprobs(tokens[:i])
                total += logprobs[token] - np.log(np.exp(logprobs[allowed]).sum())
        scores[key] = total
    return scores


@pytest.fixture()
def trie() -> LabelTrie:
    # Shared prefixes of different lengths, one answer a prefix of another's tokens (told apart by the end token).
    sequences = {f"a{i}": (1 + i % 3, 4 + i % 5, 9 + i) for i in range(12)}
    sequences["short"] = (1, 4)
    return LabelTrie(sequences, END)


def test_allowed_follows_the_trie_and_ends_with_the_end_token(trie):
    assert sorted(trie.allowed(())) == [1, 2, 3]
    assert sorted(trie.allowed((1, 4))) == [END, 9]  # "short" may end here, "a0" goes on
    assert trie.allowed((7, 7)) == [END]  # outside the trie only the end token


def test_identical_answers_are_refused():
    with pytest.raises(ValueError, match="cannot be told apart"):
        LabelTrie({"x": (1, 2), "y": (1, 2)}, END)


@pytest.mark.parametrize("seed", range(5))
def test_with_a_wide_beam_the_search_returns_the_exact_top_k(trie, seed):
    next_logprobs, _ = fake_model(seed)
    exact = sorted(exact_scores(trie, next_logprobs).items(), key=lambda item: -item[1])
    found = best_first(trie, next_logprobs, k=4, beam_width=100, max_calls=1000)
    assert [key for key, _ in found] == [key for key, _ in exact[:4]]
    assert [score for _, score in found] == pytest.approx([score for _, score in exact[:4]])


def test_answers_are_always_real_distinct_and_best_first_even_with_a_tight_beam_or_no_calls(trie):
    for beam, calls in itertools.product([1, 2, 5], [0, 1, 3, 50]):
        next_logprobs, _ = fake_model(beam * 100 + calls)
        found = best_first(trie, next_logprobs, k=5, beam_width=beam, max_calls=calls)
        keys = [key for key, _ in found]
        assert len(keys) == 5 and len(set(keys)) == 5 and set(keys) <= set(trie.sequences)
        scores = [score for _, score in found]
        assert scores == sorted(scores, reverse=True)


def test_forced_tokens_cost_no_model_call():
    trie = LabelTrie({"x": (5, 6, 7, 8), "y": (5, 6, 9, 8)}, END)  # 5, 6 forced; one branching point
    next_logprobs, calls = fake_model(0)
    found = best_first(trie, next_logprobs, k=2, beam_width=2, max_calls=10)
    assert calls == [(5, 6)] and {key for key, _ in found} == {"x", "y"}
