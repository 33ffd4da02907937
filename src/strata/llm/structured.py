"""Turning a model's text into a validated pydantic object, repairing the usual wrapping first."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)

_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_CODE_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)(```|$)", re.DOTALL)


class StructuredOutputError(ValueError):
    """The text holds no JSON object, or the object does not validate; `reason` is short enough to show a model."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in `text`, after dropping <think> blocks and code fences; trailing text is ignored."""
    cleaned = _THINK_BLOCK.sub("", text)
    # Fenced blocks first (the model marked them as the answer), then the whole text.
    candidates = [match.group(1) for match in _CODE_FENCE.finditer(cleaned)] + [cleaned]
    for candidate in candidates:
        value = _first_object(candidate)
        if value is not None:
            return value
    raise StructuredOutputError("no complete JSON object found in the answer")


def _first_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    # raw_decode stops at the end of one complete value, which is exactly "the first balanced object".
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_structured(text: str, model: type[T]) -> T:
    """Validate the first JSON object in `text` against `model`."""
    value = extract_json_object(text)
    try:
        return model.model_validate(value)
    except ValidationError as error:
        raise StructuredOutputError(describe_validation_error(error)) from error


def describe_validation_error(error: ValidationError) -> str:
    problems = [f"{'.'.join(str(part) for part in item['loc']) or 'object'}: {item['msg']}" for item in error.errors()]
    return "; ".join(problems[:8])
