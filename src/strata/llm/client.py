"""The one LLM client every stage uses: `complete(prompt, schema)` and `score(prompt, continuations)`."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Literal, TypeVar, cast, overload

from pydantic import BaseModel

from strata.config import LLMSettings, Settings
from strata.llm.backend import Backend, ContinuationScore, Generation, GenerationOptions, Scoring, probabilities
from strata.llm.cache import ResponseCache
from strata.llm.errors import LLMError, LLMOutputError
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
        answer = self.complete_many([(prompt, schema)], trace=trace, max_tokens=max_tokens)[0]
        if isinstance(answer, LLMError):
            raise answer
        return answer

    def complete_many(
        self,
        requests: Sequence[tuple[Prompt, type[BaseModel] | None]],
        *,
        trace: Trace | None = None,
        max_tokens: int | None = None,
    ) -> list[BaseModel | LLMError]:
        """`complete` for many (prompt, schema) pairs at once: a backend that batches (transformers) decodes the
        uncached ones together, each round of re-asks too; the others answer one at a time. Each failed request
        gets its error in its place."""
        models = [schema or prompt.output_model for prompt, schema in requests]
        for (prompt, _), model in zip(requests, models, strict=True):
            if model is None:
                raise TypeError(f"prompt {prompt.name!r} has no output model; pass schema=")
        options = GenerationOptions(
            max_tokens=max_tokens or self.settings.max_tokens,
            temperature=self.settings.temperature,
            seed=self.settings.seed,
        )
        answers: list[BaseModel | LLMError | None] = [None] * len(requests)
        users = [prompt.user for prompt, _ in requests]
        pending = list(range(len(requests)))
        for attempt in range(self.settings.repair_retries + 1):
            started = time.perf_counter()
            schemas = [models[i].model_json_schema() for i in pending]  # type: ignore[union-attr]  # checked above
            asked = [(requests[i][0].system, users[i], schema) for i, schema in zip(pending, schemas, strict=True)]
            results = self._generate_many(asked, options)
            latencies = shared_latencies(results, time.perf_counter() - started)
            retry = []
            for index, (generation, hit), latency in zip(pending, results, latencies, strict=True):
                prompt = requests[index][0]
                if isinstance(generation, LLMError):
                    self._record(trace, prompt, "complete", generation, latency, attempt)
                    answers[index] = generation
                    continue
                try:
                    answers[index] = parse_structured(generation.text, models[index])  # type: ignore[arg-type]
                except StructuredOutputError as error:
                    self._record(trace, prompt, "complete", generation, latency, attempt, hit, ok=False)
                    answers[index] = LLMOutputError(prompt.name, generation.text, error.reason)
                    users[index] = prompt.user + RETRY_NOTE.format(reason=error.reason)
                    retry.append(index)
                    continue
                self._record(trace, prompt, "complete", generation, latency, attempt, hit, ok=True)
            pending = retry
        # Every request was asked at least once (repair_retries >= 0), so none is left None.
        return cast(list[BaseModel | LLMError], answers)

    def complete_text(self, prompt: Prompt, *, trace: Trace | None = None, max_tokens: int | None = None) -> str:
        """The model's free-text answer, with no output schema: what it writes when nothing constrains it."""
        options = GenerationOptions(
            max_tokens=max_tokens or self.settings.max_tokens,
            temperature=self.settings.temperature,
            seed=self.settings.seed,
        )
        started = time.perf_counter()
        generation, hit = self._generate_many([(prompt.system, prompt.user, None)], options)[0]
        if isinstance(generation, LLMError):
            self._record(trace, prompt, "complete", generation, time.perf_counter() - started, 0)
            raise generation
        self._record(trace, prompt, "complete", generation, time.perf_counter() - started, 0, hit, ok=True)
        return generation.text

    def score(
        self, prompt: Prompt, continuations: Sequence[str], *, trace: Trace | None = None
    ) -> list[ContinuationScore]:
        """Log-probability of each continuation as the start of the answer to `prompt`, in the given order."""
        started = time.perf_counter()
        # A backend's own scoring setup (a non-default completion template) when it has one; none keeps old keys.
        setup = {"scoring": identity} if (identity := getattr(self.backend, "scoring_identity", "")) else {}
        key = self._key(kind="score", system=prompt.system, user=prompt.user, continuations=list(continuations),
                        **setup)
        cached = self._cache.get(key) if self._cache is not None else None
        if cached is not None:
            scoring, hit = Scoring.model_validate_json(cached), True
        else:
            try:
                scoring, hit = self.backend.score(prompt.system, prompt.user, continuations), False
            except LLMError as error:
                self._record(trace, prompt, "score", error, time.perf_counter() - started, 0)
                raise
            if self._cache is not None:
                self._cache.put(key, scoring.model_dump_json())
        generation = Generation(
            text="", tokens_in=scoring.tokens_in, tokens_out=0, transport_retries=scoring.transport_retries
        )
        self._record(trace, prompt, "score", generation, time.perf_counter() - started, 0, hit, ok=True)
        return scoring.scores

    def p_yes(self, prompt: Prompt, *, trace: Trace | None = None) -> float:
        """P(yes) = p(yes) / (p(yes) + p(no)), 'yes' and 'no' in either case, as the start of the answer to
        `prompt`: a yes/no judgement scored, not written. 0 when neither can be written (every score -inf): an even
        share would be exactly 0.5, which passes Read's default threshold and ranks a paper mid-list."""
        scores = self.score(prompt, [*_YES, *_NO], trace=trace)
        if all(score.logprob == -math.inf for score in scores):
            return 0.0
        return sum(probabilities(scores)[: len(_YES)])

    def close(self) -> None:
        self.backend.close()
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _generate_many(
        self, requests: Sequence[tuple[str, str, dict[str, Any] | None]], options: GenerationOptions
    ) -> list[tuple[Generation | LLMError, bool]]:
        """(answer, from the cache) per (system, user, schema); the uncached ones asked in one batch where the
        backend takes batches."""
        keys = [
            self._key(kind="complete", system=system, user=user, schema=schema, options=options.model_dump())
            for system, user, schema in requests
        ]
        cached = [self._cache.get(key) if self._cache is not None else None for key in keys]
        missing = [index for index, text in enumerate(cached) if text is None]
        fresh = dict(zip(missing, self._ask([requests[i] for i in missing], options), strict=True))
        answers: list[tuple[Generation | LLMError, bool]] = []
        for index, (key, text) in enumerate(zip(keys, cached, strict=True)):
            if text is not None:
                answers.append((Generation.model_validate_json(text), True))
                continue
            generation = fresh[index]
            if self._cache is not None and isinstance(generation, Generation):
                self._cache.put(key, generation.model_dump_json())
            answers.append((generation, False))
        return answers

    def _ask(
        self, requests: Sequence[tuple[str, str, dict[str, Any] | None]], options: GenerationOptions
    ) -> list[Generation | LLMError]:
        """The backend's answers: in one batch where it takes batches, else one at a time, an LLMError in the
        place of a request that failed."""
        batched = getattr(self.backend, "generate_batch", None)
        if batched is not None and requests:
            try:
                return list(batched(requests, options))
            except LLMError as error:  # a batch that failed as a whole failed each of its requests
                return [error] * len(requests)
        answers: list[Generation | LLMError] = []
        for system, user, schema in requests:
            try:
                answers.append(self.backend.generate(system, user, schema, options))
            except LLMError as error:
                answers.append(error)
        return answers

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
        answer: Generation | LLMError,
        latency_s: float,
        attempt: int,
        hit: bool = False,
        ok: bool = True,
    ) -> None:
        """Trace one call; a failed backend call (dead server, context overflow, ...) too, with no tokens and its
        error, so a trace counts every call, not only the answered ones."""
        target = trace if trace is not None else active_trace()
        if target is None:
            return
        generation = answer if isinstance(answer, Generation) else None
        fresh = generation if not hit else None  # a cache hit cost no retries and no evaluation time
        target.record(
            LLMCall(
                prompt=prompt.name,
                kind=kind,
                backend=self.backend.name,
                model=self.backend.model,
                tokens_in=generation.tokens_in if generation else 0,
                tokens_out=generation.tokens_out if generation else 0,
                latency_s=latency_s,
                attempt=attempt,
                transport_retries=fresh.transport_retries if fresh else 0,
                cache_hit=hit,
                ok=ok and generation is not None,
                error=None if generation else f"{type(answer).__name__}: {answer}",
                timing=fresh.timing if fresh else None,
            )
        )


def shared_latencies(results: Sequence[tuple[Generation | LLMError, bool]], elapsed: float) -> list[float]:
    """Each answer's part of a round that took `elapsed` seconds: the fresh answers share it (one batch answered them
    together); cache hits and failures cost ~0, except in a round of hits only, which share its time."""
    fresh = [not hit and isinstance(generation, Generation) for generation, hit in results]
    if not any(fresh):
        return [elapsed / max(1, len(results))] * len(results)
    return [elapsed / sum(fresh) if new else 0.0 for new in fresh]


def make_client(settings: Settings | LLMSettings, *, cache: bool | None = None) -> LLMClient:
    """The configured client: embedded (default, offline), transformers or OpenAI-compatible HTTP; `cache` overrides
    the setting."""
    llm = settings.llm if isinstance(settings, Settings) else settings
    backend = _open_backend(llm)
    try:
        use_cache = llm.cache if cache is None else cache
        return LLMClient(backend, llm, ResponseCache(llm.cache_path, llm.cache_journal) if use_cache else None)
    except BaseException:
        backend.close()  # a loaded model would otherwise stay in memory with no client to close it
        raise


def _open_backend(llm: LLMSettings) -> Backend:
    if llm.backend == "embedded":
        from strata.llm.embedded import EmbeddedBackend

        return EmbeddedBackend(llm)
    if llm.backend == "transformers":
        from strata.llm.transformers_backend import TransformersBackend

        return TransformersBackend(llm)
    from strata.llm.openai_http import OpenAIBackend

    return OpenAIBackend(llm)
