"""Constrained decoding over a prefix trie of allowed answers (token ids), so the output is always a real leaf.

A label's log-probability is the sum, over its tokens, of the model's log-probability of that token renormalised
over the tokens the trie allows at that point. A token forced by the trie therefore costs nothing and needs no
model call; only branching points are evaluated.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

NextLogprobs = Callable[[Sequence[int]], np.ndarray]
"""Log-probabilities over the vocabulary of the next answer token, given the answer tokens so far."""


class _Node:
    __slots__ = ("children", "keys")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.keys: list[str] = []


class LabelTrie:
    """Token sequences of the allowed answers, each followed by the end-of-answer token."""

    def __init__(self, sequences: Mapping[str, Sequence[int]], end_token: int) -> None:
        if not sequences:
            raise ValueError("a label trie needs at least one allowed answer")
        self.end_token = end_token
        self.root = _Node()
        self.sequences = {key: (*tokens, end_token) for key, tokens in sequences.items()}
        for key, tokens in self.sequences.items():
            node = self.root
            node.keys.append(key)
            for token in tokens:
                node = node.children.setdefault(token, _Node())
                node.keys.append(key)
        duplicates = [key for key, tokens in self.sequences.items() if len(self._node(tokens).keys) > 1]
        if duplicates:
            raise ValueError(f"answers with identical tokens cannot be told apart: {sorted(duplicates)}")

    def _node(self, prefix: Sequence[int]) -> _Node:
        node = self.root
        for token in prefix:
            node = node.children[token]
        return node

    def allowed(self, prefix: Sequence[int]) -> list[int]:
        """Tokens that may follow `prefix`; only the end token once `prefix` has left the trie or ended."""
        try:
            children = self._node(prefix).children
        except KeyError:
            return [self.end_token]
        return list(children) or [self.end_token]


def best_first(
    trie: LabelTrie, next_logprobs: NextLogprobs, k: int, beam_width: int, max_calls: int
) -> list[tuple[str, float]]:
    """The `k` most probable answers under the trie constraint (approximately), best first, with log-probabilities.

    Best-first search with a bounded frontier: the most probable partial answer is expanded next, and since
    log-probabilities only fall, an answer is final when it is popped. Only the `beam_width` (at least k) best open
    partial answers are kept, which bounds the model calls on flat distributions. After `max_calls` calls the best
    open partial answers are completed without the model, at their partial score.
    """
    beam_width = max(beam_width, k)
    order = itertools.count()  # ties: first pushed first, which follows the trie's insertion (reading) order
    frontier: list[tuple[float, int, tuple[int, ...], _Node]] = [(0.0, next(order), *_forced((), trie.root))]
    found: list[tuple[str, float]] = []
    calls = 0
    while frontier and len(found) < k:
        cost, _, prefix, node = heapq.heappop(frontier)
        if len(node.keys) == 1:
            found.append((node.keys[0], -cost))
            continue
        if calls >= max_calls:
            heapq.heappush(frontier, (cost, next(order), prefix, node))
            break
        calls += 1
        for token, child_cost in _child_costs(node, next_logprobs(prefix)):
            child = _forced((*prefix, token), node.children[token])
            heapq.heappush(frontier, (cost + child_cost, next(order), *child))
        if len(frontier) > beam_width:
            frontier = heapq.nsmallest(beam_width, frontier)
            heapq.heapify(frontier)
    for cost, _, _, node in sorted(frontier):
        for key in node.keys:
            if len(found) >= k:
                return found
            found.append((key, -cost))
    return found


def _forced(prefix: tuple[int, ...], node: _Node) -> tuple[tuple[int, ...], _Node]:
    """Follow tokens the trie forces (a single way on), which need no model call."""
    while len(node.keys) > 1 and len(node.children) == 1:
        token, node = next(iter(node.children.items()))
        prefix = (*prefix, token)
    return prefix, node


def _child_costs(node: _Node, logprobs: np.ndarray) -> Iterator[tuple[int, float]]:
    tokens = list(node.children)
    allowed = logprobs[tokens].astype(np.float64)
    peak = allowed.max()
    normaliser = peak + np.log(np.exp(allowed - peak).sum())
    for token, value in zip(tokens, allowed):
        yield token, float(normaliser - value)
