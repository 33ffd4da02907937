"""Turning a model's text into a validated pydantic object, repairing the usual wrapping first."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
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
    for value in _objects(text):
        return value
    raise StructuredOutputError("no complete JSON object found in the answer")


def _objects(text: str) -> Iterator[dict[str, Any]]:
    """The complete top-level JSON objects of `text`: those of its fenced blocks first (the model marked them as the
    answer), then those of the whole text."""
    cleaned = _THINK_BLOCK.sub("", text)
    for candidate in [match.group(1) for match in _CODE_FENCE.finditer(cleaned)] + [cleaned]:
        yield from _top_level_objects(candidate)


def _top_level_objects(text: str) -> Iterator[dict[str, Any]]:
    """Objects in order; past one that does not decode but closes (a trailing comma), the search goes on after it,
    not inside it: its inner object is a part of a broken answer, not the answer."""
    decoder = json.JSONDecoder()
    at = 0
    while (start := text.find("{", at)) != -1:
        try:
            value, at = decoder.raw_decode(text, start)  # ends exactly at the end of one balanced value
        except json.JSONDecodeError:
            end = _after_braces(text, start)
            # A broken object that closes (a trailing comma) is skipped whole; one that never closes was abandoned,
            # and the object started inside it may be the model's second try.
            at = end if end <= len(text) else start + 1
            continue
        if isinstance(value, dict):
            yield value


def _after_braces(text: str, start: int) -> int:
    """The index after the brace closing the one at `start` (strings skipped), or len(text) + 1 when it never
    closes. Written by hand: json can only say that the object is broken, not where it ends."""
    depth, in_string, escaped = 0, False, False
    for at in range(start, len(text)):
        char = text[at]
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return at + 1
    return len(text) + 1


def parse_structured(text: str, model: type[T]) -> T:
    """The first non-empty JSON object in `text` that validates against `model` (an example object or a stray '{}'
    before the answer is passed over; '{}' itself when nothing else validates); the first object's errors when none
    does."""
    first_error: ValidationError | None = None
    empty: T | None = None  # '{}' says nothing: a later object is the answer when there is one
    for value in _objects(text):
        try:
            parsed = model.model_validate(value)
        except ValidationError as error:
            first_error = first_error or error
            continue
        if value:
            return parsed
        empty = empty or parsed
    if empty is not None:
        return empty
    if first_error is None:
        raise StructuredOutputError("no complete JSON object found in the answer")
    raise StructuredOutputError(describe_validation_error(first_error)) from first_error


def describe_validation_error(error: ValidationError) -> str:
    problems = [f"{'.'.join(str(part) for part in item['loc']) or 'object'}: {item['msg']}" for item in error.errors()]
    return "; ".join(problems[:8])
