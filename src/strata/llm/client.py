"""The one LLM client every stage uses: `complete(prompt, schema)` and `score(prompt, continuations)`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel

from strata.config import LLMSettings, Settings
from strata.llm.backend import Backend, ContinuationScore, Generation, GenerationOptions, Scoring, probabilities
from strata.llm.cache import ResponseCache
from strata.llm.errors import LLMOutputError
from strata.llm.templates import Prompt
from strata.llm.structured import StructuredOutputError, parse_structured
from strata.llm.trace import LLMCall, Trace, active_trace

T = TypeVar("T", bound=BaseModel)

RETRY_NOTE = (
    "\n\nYour previous answer could not be used: {reason}. "
    "Answer again with exactly one JSON object that fits the required schema."
)


_YES, _NO = ("yes", "Yes"), ("no", "No")  # the continuations a yes/no judgement is scored on (either case)


class LLMClient:
    """Backend plus response cache, structured-output repair and tracing.

    Each call sends one system message and one user message, never a conversation history.
    """

    def __init__(self, backend: Backend, settings: LLMSettings, cache: ResponseCache | None = None) -> None:
        self.backend = backend
        self.settings = settings
        self._cache = cache

    @property
    def model(self) -> str:
        return self.backend.model

    @overload
    def complete(
        self, prompt: Prompt, schema: type[T], *, trace: Trace | None = None, max_tokens: int | None = None
    ) -> T: ...

    # Without a schema the answer is an instance of the prompt's output model, which only the caller knows.
    @overload
    def complete(
        self, prompt: Prompt, schema: None = None, *, trace: Trace | None = None, max_tokens: int | None = None
    ) -> BaseModel: ...

    def complete(
        self,
        prompt: Prompt,
        schema: type[T] | None = None,
        *,
        trace: Trace | None = None,
        max_tokens: int | None = None,
    ) -> T | BaseModel:
        """The answer parsed into `schema` (default: the prompt's output model).

        An answer that does not parse is repaired (code fences, <think> blocks, trailing text), then re-asked up to
        `repair_retries` times with the validation error appended to the user message; then LLMOutputError.
        """
        model = schema or prompt.output_model
        if model is None:
            raise TypeError(f"prompt {prompt.name!r} has no output model; pass schema=")
        json_schema = model.model_json_schema()
        options = GenerationOptions(
            max_tokens=max_tokens or self.settings.max_tokens,
            temperature=self.settings.temperature,
            seed=self.settings.seed,
        )
        user = prompt.user
        for attempt in range(self.settings.repair_retries + 1):
            started = time.perf_counter()
            generation, hit = self._generate(prompt.system, user, json_schema, options)
            try:
                parsed = parse_structured(generation.text, model)
            except StructuredOutputError as error:
                self._record(trace, prompt, "complete", generation, started, attempt, hit, ok=False)
                reason = error.reason
                user = prompt.user + RETRY_NOTE.format(reason=reason)
                continue
            self._record(trace, prompt, "complete", generation, started, attempt, hit, ok=True)
            return parsed
        raise LLMOutputError(prompt.name, generation.text, reason)

    def complete_text(self, prompt: Prompt, *, trace: Trace | None = None, max_tokens: int | None = None) -> str:
        """The model's free-text answer, with no output schema: what it writes when nothing constrains it."""
        options = GenerationOptions(
            max_tokens=max_tokens or self.settings.max_tokens,
            temperature=self.settings.temperature,
            seed=self.settings.seed,
        )
        started = time.perf_counter()
        generation, hit = self._generate(prompt.system, prompt.user, None, options)
        self._record(trace, prompt, "complete", generation, started, 0, hit, ok=True)
        return generation.text

    def score(
        self, prompt: Prompt, continuations: Sequence[str], *, trace: Trace | None = None
    ) -> list[ContinuationScore]:
        """Log-probability of each continuation as the start of the answer to `prompt`, in the given order."""
        started = time.perf_counter()
        key = self._key(kind="score", system=prompt.system, user=prompt.user, continuations=list(continuations))
        cached = self._cache.get(key) if self._cache is not None else None
        if cached is not None:
            scoring, hit = Scoring.model_validate_json(cached), True
        else:
            scoring, hit = self.backend.score(prompt.system, prompt.user, continuations), False
            if self._cache is not None:
                self._cache.put(key, scoring.model_dump_json())
        generation = Generation(
            text="", tokens_in=scoring.tokens_in, tokens_out=0, transport_retries=scoring.transport_retries
        )
        self._record(trace, prompt, "score", generation, started, 0, hit, ok=True)
        return scoring.scores

    def p_yes(self, prompt: Prompt, *, trace: Trace | None = None) -> float:
        """P(yes) = p(yes) / (p(yes) + p(no)), 'yes' and 'no' in either case, as the start of the answer to
        `prompt`: a yes/no judgement scored, not written."""
        return sum(probabilities(self.score(prompt, [*_YES, *_NO], trace=trace))[: len(_YES)])

    def close(self) -> None:
        self.backend.close()
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _generate(
        self, system: str, user: str, schema: dict[str, Any] | None, options: GenerationOptions
    ) -> tuple[Generation, bool]:
        key = self._key(kind="complete", system=system, user=user, schema=schema, options=options.model_dump())
        cached = self._cache.get(key) if self._cache is not None else None
        if cached is not None:
            return Generation.model_validate_json(cached), True
        generation = self.backend.generate(system, user, schema, options)
        if self._cache is not None:
            self._cache.put(key, generation.model_dump_json())
        return generation, False

    def _key(self, **parts: Any) -> str:
        # How output is constrained changes answers, so it is part of the key along with backend and weights.
        return ResponseCache.key(
            backend=self.backend.name,
            model=self.backend.model,
            grammar=self.settings.grammar,
            response_format=self.settings.response_format,
            **parts,
        )

    def _record(
        self,
        trace: Trace | None,
        prompt: Prompt,
        kind: Literal["complete", "score"],
        generation: Generation,
        started: float,
        attempt: int,
        hit: bool,
        ok: bool,
    ) -> None:
        target = trace if trace is not None else active_trace()
        if target is None:
            return
        target.record(
            LLMCall(
                prompt=prompt.name,
                kind=kind,
                backend=self.backend.name,
                model=self.backend.model,
                tokens_in=generation.tokens_in,
                tokens_out=generation.tokens_out,
                latency_s=time.perf_counter() - started,
                attempt=attempt,
                transport_retries=0 if hit else generation.transport_retries,
                cache_hit=hit,
                ok=ok,
                timing=None if hit else generation.timing,
            )
        )


def make_client(settings: Settings | LLMSettings, *, cache: bool | None = None) -> LLMClient:
    """The configured client: embedded (default, offline) or OpenAI-compatible HTTP; `cache` overrides the setting."""
    llm = settings.llm if isinstance(settings, Settings) else settings
    backend: Backend
    if llm.backend == "embedded":
        from strata.llm.embedded import EmbeddedBackend

        backend = EmbeddedBackend(llm)
    else:
        from strata.llm.openai_http import OpenAIBackend

        backend = OpenAIBackend(llm)
    use_cache = llm.cache if cache is None else cache
    return LLMClient(backend, llm, ResponseCache(llm.cache_path) if use_cache else None)
