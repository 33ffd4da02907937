"""What every backend provides; the client adds caching, repair, retries and tracing on top."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeGuard

import numpy as np
from pydantic import BaseModel, Field

from strata.llm.trace import EvalTiming


# Used only when a GGUF file carries no chat template; both packaged model families speak ChatML.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class GenerationOptions(BaseModel):
    max_tokens: int
    temperature: float
    seed: int


class Generation(BaseModel):
    """A backend's raw answer."""

    text: str
    tokens_in: int
    tokens_out: int
    transport_retries: int = 0
    timing: EvalTiming | None = None


class ContinuationScore(BaseModel):
    """Log-probability of one continuation after the prompt (natural log, summed over its tokens)."""

    continuation: str
    logprob: float
    n_tokens: int

    @property
    def mean_logprob(self) -> float:
        """Per-token average, which does not favour short continuations the way the sum does."""
        return self.logprob / max(self.n_tokens, 1)


class YesNo(BaseModel):
    """The answer a yes/no prompt declares; `LLMClient.p_yes` scores it."""

    answer: Literal["yes", "no"]


def probabilities(scores: Sequence[ContinuationScore]) -> list[float]:
    """Softmax of summed log-probabilities: the share of each continuation among those scored. When every one is
    impossible (-inf) the model prefers none: an even share each, where NaN would pass every `share < threshold`
    check (Read's relevance and sufficiency) and an LLMError would end the question (Read does not catch it)."""
    peak = max(score.logprob for score in scores)
    if peak == -math.inf:
        return [1 / len(scores)] * len(scores)
    weights = [math.exp(score.logprob - peak) for score in scores]
    total = sum(weights)
    return [weight / total for weight in weights]


def calibrated_logprobs(scores: Sequence[ContinuationScore], prior: Sequence[ContinuationScore]) -> list[float]:
    """Each continuation's log-probability minus its log-probability after a content-free version of the prompt
    (contextual calibration, Zhao et al. 2021; PMI, Holtzman et al. 2021): what the content adds, without the
    model's preference for a position, a length or a wording."""
    return [given.logprob - before.logprob for given, before in zip(scores, prior, strict=True)]


class Scoring(BaseModel):
    scores: list[ContinuationScore]
    tokens_in: int = Field(description="Tokens sent or evaluated for all continuations together")
    transport_retries: int = 0


class Backend(Protocol):
    name: str
    model: str
    """Identity of the model weights, part of every cache key."""
    load_seconds: float | None
    """Seconds spent verifying and loading weights in-process; None for remote backends."""

    def generate(
        self, system: str, user: str, schema: dict[str, Any] | None, options: GenerationOptions
    ) -> Generation: ...

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring: ...

    def close(self) -> None: ...


class TokenBackend(Backend, Protocol):
    """A backend that exposes its tokens (the embedded one), as decoding through a trie of allowed answers needs."""

    def tokenize_answer(self, text: str) -> list[int]: ...

    @property
    def end_of_answer_token(self) -> int: ...

    def next_token_logprobs(self, system: str, user: str, answer: Sequence[int]) -> np.ndarray: ...


def exposes_tokens(backend: Backend) -> TypeGuard[TokenBackend]:
    """Whether `backend` gives next-token log-probabilities (an HTTP server does not)."""
    return hasattr(backend, "next_token_logprobs")


def with_schema_instruction(system: str, schema: dict[str, Any]) -> str:
    """System text that spells the schema out, for backends that cannot enforce it while decoding."""
    return (
        f"{system}\n\nAnswer with one JSON object, and nothing else, matching this JSON schema:\n{json.dumps(schema)}"
    )
