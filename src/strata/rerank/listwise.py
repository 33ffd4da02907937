"""Listwise LLM reranking: one prompt orders a window of numbered candidates; windows slide from the bottom up
(RankGPT) so the best candidates bubble to the top, and each window is cut to fit the prompt's token budget."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cache
from pydantic import BaseModel, Field, create_model
from pydantic.json_schema import JsonDict

from strata.llm import LLMClient, LLMError, Prompt, calibrated_logprobs
from strata.rerank.base import nan_lowest
from strata.rerank.model import RankedIds, rerank_prompts
from strata.rerank.permutation import ParseErrors, parse_permutation

CHARS_PER_TOKEN = 3.6  # Qwen's tokenizer on scientific English is ~4; lower errs toward smaller windows
LINE_OVERHEAD_TOKENS = 6  # '[123] ' and the newline


@cache
def ranked_ids_schema(n: int, count: int) -> type[BaseModel]:
    """RankedIds whose JSON schema (hence the embedded model's grammar) admits exactly `count` numbers, each one of
    1..n, while validation stays loose (any integers): answers from an unconstrained backend reach the tolerant
    parser instead of failing. Duplicates cannot be excluded by a JSON-schema grammar; the parser drops them."""
    strict: JsonDict = {"items": {"type": "integer", "enum": list(range(1, n + 1))}, "minItems": count, "maxItems": count}
    return create_model(
        f"RankedIds{n}x{count}", __base__=RankedIds, ranking=(list[int], Field(json_schema_extra=strict))
    )


def estimated_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + LINE_OVERHEAD_TOKENS


class ListwiseLLM:
    """Orders candidate texts for a query with listwise prompts; parsing mistakes accumulate in `errors`."""

    def __init__(self, client: LLMClient, window_tokens: int, answer: str = "generate") -> None:
        self.client = client
        self.window_tokens = window_tokens
        self.answer = answer
        self.errors = ParseErrors()
        self._errors_lock = threading.Lock()  # the server may rank for several requests at once
        self._prompts = rerank_prompts()

    def order_window(self, query: str, texts: Sequence[str], count: int | None = None) -> list[int]:
        """0-based order of `texts`, best first: the model names its best `count` (default all), the rest keep
        their input order."""
        n = len(texts)
        if n <= 1:
            return list(range(n))
        count = min(count or n, n)
        documents = "\n".join(f"[{number}] {' '.join(text.split())}" for number, text in enumerate(texts, start=1))
        prompt = self._prompts.render("rerank_listwise", query=query, documents=documents, count=str(count))
        try:
            ids: list[int] | None = (
                self._first_token_ids(prompt, query, n, count)
                if self.answer == "first-token"
                else self._written_ids(prompt, n, count)
            )
        except LLMError:
            ids = None  # an unusable answer (or a prompt over n_ctx) keeps the prior order, and is counted
        order, errors = parse_permutation(ids, n, count)
        with self._errors_lock:
            self.errors = self.errors + errors
        return order

    def _written_ids(self, prompt: Prompt, n: int, count: int) -> list[int]:
        answer = self.client.complete(prompt, ranked_ids_schema(n, count), max_tokens=4 * count + 16)
        return list(answer.ranking)  # type: ignore[attr-defined]

    def _first_token_ids(self, prompt: Prompt, query: str, n: int, count: int) -> list[int]:
        """All n numbers, by the log-probability of each as the answer's first: '{"ranking": [7,' (the comma
        closes the number, so 1 is not a prefix of 12), minus the same log-probability when every document reads
        'N/A' (contextual calibration, Zhao et al. 2021): a small model favours the first numbers whatever they
        hold, and without the correction its ranking barely moved. Ties keep the input order; a NaN gain is last."""
        openings = [f'{{"ranking": [{number},' for number in range(1, n + 1)]
        scores = self.client.score(prompt, openings)
        blank = "\n".join(f"[{number}] N/A" for number in range(1, n + 1))
        empty = self._prompts.render("rerank_listwise", query=query, documents=blank, count=str(count))
        gain = calibrated_logprobs(scores, self.client.score(empty, openings))
        return sorted(range(1, n + 1), key=lambda number: (-nan_lowest(gain[number - 1]), number))

    def sliding(self, query: str, texts: Sequence[str], window: int, carry: int, full_answers: bool) -> list[int]:
        """0-based order of `texts` after windows slide from the bottom to the top.

        Each window holds at most `window` texts and `window_tokens` estimated tokens (at least carry + 1 texts, so
        it always moves); its best `carry` go on into the next window up. `full_answers` asks each window for a
        full order (RankGPT); otherwise only for its best `carry`, which is all the next window needs.
        """
        carry = min(carry, window - 1)  # a window must keep at least one new text, or it would never move
        order = list(range(len(texts)))
        end = len(order)
        while end > 0:
            start = self._window_start(texts, order, end, window, carry)
            span = order[start:end]
            ranked = self.order_window(query, [texts[index] for index in span], None if full_answers else carry)
            order[start:end] = [span[position] for position in ranked]
            if start == 0:
                break
            end = start + carry
        return order

    def _window_start(self, texts: Sequence[str], order: list[int], end: int, window: int, carry: int) -> int:
        start, budget = end, self.window_tokens
        while start > 0 and end - start < window:
            cost = estimated_tokens(texts[order[start - 1]])
            if cost > budget and end - start > carry:
                break
            budget -= cost
            start -= 1
        return start
