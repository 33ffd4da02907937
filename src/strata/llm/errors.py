"""Errors of the LLM layer; each names what went wrong and where, so a stage can report it and carry on."""

from __future__ import annotations


class LLMError(RuntimeError):
    """Base class of every LLM-layer error."""


class PromptError(LLMError):
    """A prompt file is malformed, or a prompt was rendered with the wrong fields."""


class ModelIntegrityError(LLMError):
    """A model file is missing, incomplete or not the file whose checksum is recorded; it is never loaded."""


class LLMUnavailableError(LLMError):
    """The backend could not be reached or kept failing after the bounded retries."""


class LLMRequestError(LLMError):
    """The server rejected a request (a 4xx other than 429); retrying the same request would not help."""

    def __init__(self, message: str, status_code: int, unsupported: bool = False) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.unsupported = unsupported  # the server named the feature it does not take (e.g. response_format)


class ScoringNotSupportedError(LLMError):
    """The backend cannot return log-probabilities of given continuations."""


class ContextOverflowError(LLMError):
    """A prompt does not fit the model's context window."""


class LLMOutputError(LLMError):
    """The model's answer could not be parsed into the expected schema, even after repair and a retry."""

    def __init__(self, prompt_name: str, raw_text: str, reason: str) -> None:
        preview = raw_text if len(raw_text) <= 300 else raw_text[:300] + "..."
        super().__init__(
            f"prompt {prompt_name!r}: answer does not match its schema ({reason}); raw answer: {preview!r}"
        )
        self.prompt_name = prompt_name
        self.raw_text = raw_text
        self.reason = reason
