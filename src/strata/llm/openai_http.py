"""Backend for any OpenAI-compatible HTTP server: vLLM, Ollama, llama.cpp / llama-cpp-python servers, hosted APIs."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import httpx

from strata.config import LLMSettings
from strata.llm.backend import ContinuationScore, Generation, GenerationOptions, Scoring, with_schema_instruction
from strata.llm.errors import LLMError, LLMRequestError, LLMUnavailableError, ScoringNotSupportedError

_RESPONSE_FORMATS = {"auto": ["json_schema", "json_object", "none"]}
_MAX_BACKOFF_S = 30.0
_MAX_ANSWER_BYTES = 16 * 1024 * 1024


class OpenAIBackend:
    name = "openai"

    def __init__(self, settings: LLMSettings) -> None:
        self.model = settings.model
        self.load_seconds: float | None = None
        self._settings = settings
        base_url = httpx.URL(settings.base_url.rstrip("/") + "/")
        # The address as errors and traces show it: credentials written into it (user:key@host) stay out of them.
        self._shown_url = str(base_url.copy_with(username=None, password=None))
        if base_url.scheme not in ("http", "https"):  # else every request fails, and would be retried as an outage
            raise LLMError(f"llm.base_url {self._shown_url!r} must start with http:// or https://")
        key = settings.api_key.get_secret_value() if settings.api_key else os.environ.get(settings.api_key_env)
        self._client = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {key}"} if key else {},
            timeout=httpx.Timeout(settings.timeout_s),
        )
        # Formats still worth trying; 'auto' drops those the server rejected before it accepted a later one.
        self._formats = list(_RESPONSE_FORMATS.get(settings.response_format, [settings.response_format]))

    def generate(self, system: str, user: str, schema: dict[str, Any] | None, options: GenerationOptions) -> Generation:
        """The answer; a response_format the server rejects gives way to the next one, and that is remembered only
        once a later one is accepted: an error every format gets (a prompt over the context) keeps them all."""
        modes = list(self._formats) if schema is not None else ["none"]
        # Remembered only when every format given up was refused as such: another 400 (a schema one server's
        # grammar engine cannot compile) falls back for this request alone, not for every later one.
        remember = True
        while True:
            mode = modes[0]
            # Without json_schema the schema can only be asked for in words (json_object only asks for some JSON).
            system_text = system if schema is None or mode == "json_schema" else with_schema_instruction(system, schema)
            body: dict[str, Any] = {
                "model": self.model,
                "messages": [{"role": "system", "content": system_text}, {"role": "user", "content": user}],
                "max_tokens": options.max_tokens,
                "temperature": options.temperature,
                "seed": options.seed,
            }
            if mode == "json_schema":
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
            elif mode == "json_object":
                body["response_format"] = {"type": "json_object", "schema": schema}
            try:
                data, retries = self._post("chat/completions", body, unsupported_marker="response_format")
            except LLMRequestError as error:
                if len(modes) > 1 and error.status_code in (400, 422, 500):
                    modes.pop(0)  # perhaps this server does not take that response_format: try the next one
                    remember = remember and (error.unsupported or mode in str(error))
                    continue
                raise
            if schema is not None and remember:
                self._formats = modes  # those rejected before this accepted one are not asked again
            return Generation(
                text=_message_text(data, self._shown_url),
                tokens_in=_usage(data, "prompt_tokens"),
                tokens_out=_usage(data, "completion_tokens"),
                transport_retries=retries,
            )

    @property
    def scoring_identity(self) -> str:
        """What besides the prompt decides a score here: a completion template other than the default (cached
        scores taken with another template are other scores)."""
        template = self._settings.completion_template
        return "" if template == type(self._settings).model_fields["completion_template"].default else template

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        """Log-probabilities from /v1/completions with echo and logprobs, on a prompt formatted by
        `completion_template` (the chat template is applied here because /completions takes raw text)."""
        prefix = self._settings.completion_template.format(system=system, user=user)
        scores, tokens_in, retries = [], 0, 0
        for continuation in continuations:
            body = {
                "model": self.model,
                "prompt": prefix + continuation,
                "max_tokens": 1,
                "temperature": 0,
                "echo": True,
                "logprobs": 1,
            }
            try:
                data, attempt_retries = self._post("completions", body, unsupported_marker="logprobs")
            except LLMRequestError as error:
                raise ScoringNotSupportedError(self._no_scoring(str(error))) from error
            scores.append(self._continuation_score(data, continuation))
            tokens_in += _usage(data, "prompt_tokens")
            retries += attempt_retries
        return Scoring(scores=scores, tokens_in=tokens_in, transport_retries=retries)

    def close(self) -> None:
        self._client.close()

    def _continuation_score(self, data: dict[str, Any], continuation: str) -> ContinuationScore:
        try:
            logprobs = data["choices"][0]["logprobs"]
            tokens, values = logprobs["tokens"], logprobs["token_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise ScoringNotSupportedError(self._no_scoring("the answer carries no echoed prompt logprobs")) from None
        # Servers disagree on text offsets around special tokens, so count from the end instead: drop the generated
        # token(s), then take prompt tokens backwards until they cover the continuation's characters.
        echoed = list(zip(tokens, values, strict=False))[: len(tokens) - _usage(data, "completion_tokens", default=1)]
        selected, covered = [], 0
        for token, value in reversed(echoed):
            if covered >= len(continuation):
                break
            selected.append(value)
            covered += len(token)
        if covered < len(continuation) or any(value is None for value in selected):
            raise ScoringNotSupportedError(self._no_scoring("the echoed prompt tokens have no logprobs"))
        return ContinuationScore(continuation=continuation, logprob=float(sum(selected)), n_tokens=len(selected))

    def _no_scoring(self, detail: str) -> str:
        return (
            f"{self._shown_url} cannot score continuations ({detail}); scoring needs /v1/completions with echo and "
            "logprobs (vLLM, or llama-cpp-python's server with logits_all)"
        )

    def _post(self, path: str, body: dict[str, Any], unsupported_marker: str) -> tuple[dict[str, Any], int]:
        """POST with bounded retries and exponential backoff; returns the JSON answer and the retries used.

        An error answer naming `unsupported_marker` (the request feature this server may lack) is not retried: it
        raises LLMRequestError at once, which callers turn into a fallback or a clear "not supported".
        """
        settings = self._settings
        started = time.monotonic()
        last_problem = ""
        for attempt in range(settings.max_retries + 1):
            if attempt:
                time.sleep(min(settings.backoff_s * 2 ** (attempt - 1), _MAX_BACKOFF_S))
            try:
                response = self._send(path, body)
            except httpx.TransportError as error:
                last_problem = f"{type(error).__name__}: {error}"
                continue
            if _rejects_feature(response, unsupported_marker):
                raise LLMRequestError(
                    f"{self._shown_url}{path} does not support {unsupported_marker} here: HTTP "
                    f"{response.status_code}: {response.text[:300]}",
                    response.status_code,
                    unsupported=True,
                )
            if response.status_code == 429 or response.status_code >= 500:
                last_problem = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code >= 300:
                raise LLMRequestError(self._refusal(path, response), response.status_code)
            try:
                return response.json(), attempt
            except ValueError:
                last_problem = f"answer is not JSON: {response.text[:200]!r}"
        raise LLMUnavailableError(
            f"{self._shown_url}{path} failed {settings.max_retries + 1} times in {time.monotonic() - started:.1f}s; "
            f"last problem: {last_problem}"
        )

    def _refusal(self, path: str, response: httpx.Response) -> str:
        """Why the server would not answer; a redirect (a POST is not followed) names where llm.base_url should be."""
        where, status = f"{self._shown_url}{path}", response.status_code
        if status < 400:
            target = response.headers.get("location")
            return f"{where} redirects (HTTP {status}) to {target}; llm.base_url should name where it redirects"
        return f"{where} rejected the request: HTTP {status}: {response.text[:500]}"

    def _send(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """One POST whose answer must arrive whole within `timeout_s` and `_MAX_ANSWER_BYTES`.

        httpx's timeout bounds each read, not the answer: a server that keeps sending (an endless generation, a
        trickle of bytes) would hold the call forever, so the deadline and size are checked while reading.
        """
        timeout_s = self._settings.timeout_s
        deadline = time.monotonic() + timeout_s
        with self._client.stream("POST", path, json=body) as streamed:
            content = bytearray()
            for chunk in streamed.iter_bytes():
                content += chunk
                if time.monotonic() > deadline:
                    raise _CutOff(f"the answer did not finish within {timeout_s:.0f}s (llm.timeout_s)")
                if len(content) > _MAX_ANSWER_BYTES:
                    raise _CutOff(f"the answer grew past {_MAX_ANSWER_BYTES} bytes")
            # Only the content type (and a redirect's target) carry over: the content is already decoded.
            headers = {"content-type": streamed.headers.get("content-type", "application/json")}
            if "location" in streamed.headers:
                headers["location"] = streamed.headers["location"]
            return httpx.Response(
                streamed.status_code, headers=headers, content=bytes(content), request=streamed.request
            )


class _CutOff(httpx.TransportError):
    """An answer abandoned while it was still arriving."""


def _rejects_feature(response: httpx.Response, marker: str) -> bool:
    """An error answer about `marker`; llama-cpp-python's server reports request-validation errors as HTTP 500."""
    return response.status_code in (400, 422, 500) and marker in response.text


def _message_text(data: dict[str, Any], url: str) -> str:
    try:
        content = data["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise LLMError(f"{url}chat/completions answered without choices[0].message: {str(data)[:300]}") from None
    return content or ""


def _usage(data: dict[str, Any], field: str, default: int = 0) -> int:
    usage = data.get("usage") or {}
    value = usage.get(field)
    return default if value is None else int(value)
