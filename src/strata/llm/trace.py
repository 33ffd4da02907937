"""Per-request record of every LLM call: what was asked of which model, what it cost, what came from the cache.

A `Trace` is either passed explicitly to the client or made active for a block of code with `tracing()`; the
client records into the explicit one, else the active one (a contextvar, so concurrent requests keep theirs apart).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

from pydantic import BaseModel, Field


class EvalTiming(BaseModel):
    """Where the time of one local generation went (embedded backend only)."""

    prompt_tokens: int = Field(
        description="Prompt tokens actually evaluated (fewer than sent when a prefix was cached)"
    )
    prompt_s: float = Field(description="Seconds spent reading those prompt tokens")
    generated_tokens: int = Field(description="Tokens generated")
    generation_s: float = Field(description="Seconds spent generating, sampling and grammar checks included")

    @property
    def prompt_tokens_per_s(self) -> float | None:
        return self.prompt_tokens / self.prompt_s if self.prompt_s > 0 and self.prompt_tokens else None

    @property
    def generation_tokens_per_s(self) -> float | None:
        return self.generated_tokens / self.generation_s if self.generation_s > 0 and self.generated_tokens else None


class LLMCall(BaseModel):
    """One request to a backend, or one answer served from the cache instead."""

    prompt: str = Field(description="Name of the prompt template")
    kind: Literal["complete", "score"]
    backend: str
    model: str
    tokens_in: int
    tokens_out: int
    latency_s: float = Field(description="Wall-clock seconds; near zero for cache hits")
    attempt: int = Field(default=0, description="0 for the first ask, 1.. for re-asks after an invalid answer")
    transport_retries: int = Field(default=0, description="HTTP retries after connection errors, 429 or 5xx")
    cache_hit: bool = False
    ok: bool = Field(default=True, description="False when the answer did not parse or the backend call failed")
    error: str | None = Field(
        default=None, description="Why the backend call failed ('ErrorClass: message'); None when it answered"
    )
    timing: EvalTiming | None = None


class TraceSummary(BaseModel):
    """Totals over calls; summable across requests (e.g. cost per question in the eval harness)."""

    calls: int = 0
    cache_hits: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    retries: int = Field(default=0, description="Re-asks after invalid answers plus HTTP retries")
    failures: int = Field(default=0, description="Calls whose answer did not parse or whose backend call failed")

    def __add__(self, other: TraceSummary) -> TraceSummary:
        return TraceSummary(**{name: getattr(self, name) + getattr(other, name) for name in TraceSummary.model_fields})

    @classmethod
    def total(cls, summaries: Iterable[TraceSummary]) -> TraceSummary:
        result = cls()
        for summary in summaries:
            result = result + summary
        return result


class Trace(BaseModel):
    calls: list[LLMCall] = Field(default_factory=list)

    def record(self, call: LLMCall) -> None:
        self.calls.append(call)

    def summary(self) -> TraceSummary:
        return TraceSummary(
            calls=len(self.calls),
            cache_hits=sum(call.cache_hit for call in self.calls),
            tokens_in=sum(call.tokens_in for call in self.calls),
            tokens_out=sum(call.tokens_out for call in self.calls),
            latency_s=sum(call.latency_s for call in self.calls),
            retries=sum((call.attempt > 0) + call.transport_retries for call in self.calls),
            failures=sum(not call.ok for call in self.calls),
        )

    def format(self) -> str:
        """A plain-text table, one line per call and a total line, for the CLI."""
        header = f"{'prompt':<24} {'kind':<8} {'model':<28} {'in':>6} {'out':>5} {'sec':>7}  notes"
        lines = [header, "-" * len(header)]
        for call in self.calls:
            notes = ", ".join(
                note
                for note, present in (
                    ("cache hit", call.cache_hit),
                    (f"re-ask {call.attempt}", call.attempt > 0),
                    (f"{call.transport_retries} http retries", call.transport_retries > 0),
                    ("invalid", not call.ok and call.error is None),
                    (f"failed: {(call.error or '').split(':')[0]}", call.error is not None),
                )
                if present
            )
            lines.append(
                f"{call.prompt[:24]:<24} {call.kind:<8} {call.model[:28]:<28} {call.tokens_in:>6} "
                f"{call.tokens_out:>5} {call.latency_s:>7.2f}  {notes}"
            )
        total = self.summary()
        lines.append(
            f"{'total':<24} {total.calls:<8} {f'{total.cache_hits} cache hits':<28} {total.tokens_in:>6} "
            f"{total.tokens_out:>5} {total.latency_s:>7.2f}"
        )
        return "\n".join(lines)


_ACTIVE_TRACE: ContextVar[Trace | None] = ContextVar("strata_llm_trace", default=None)


@contextmanager
def tracing(trace: Trace | None = None) -> Iterator[Trace]:
    """Make `trace` (or a new one) the active trace inside the block."""
    active = trace if trace is not None else Trace()
    token = _ACTIVE_TRACE.set(active)
    try:
        yield active
    finally:
        _ACTIVE_TRACE.reset(token)


def active_trace() -> Trace | None:
    return _ACTIVE_TRACE.get()
