"""Tolerant reading of a listwise answer: whatever the model wrote becomes a full permutation, and each kind of
mistake is counted."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field


class ParseErrors(BaseModel):
    """Mistakes found in listwise answers, summed over calls."""

    answers: int = Field(default=0, description="Answers read")
    unusable: int = Field(default=0, description="Answers with no usable list (the prior order was kept)")
    duplicates: int = Field(default=0, description="Ids repeated after their first mention (dropped)")
    unknown: int = Field(default=0, description="Ids outside 1..n (dropped)")
    missing: int = Field(
        default=0, description="Requested ids not named (all unnamed ids are appended in their prior order)"
    )
    incomplete_answers: int = Field(default=0, description="Answers that needed any repair")
    unchanged: int = Field(
        default=0,
        description="Usable answers that kept the prior order exactly: a model that always echoes its input "
        "reranks nothing (the embedded 0.5B model did this on SciFact)",
    )

    def __add__(self, other: ParseErrors) -> ParseErrors:
        return ParseErrors(**{name: getattr(self, name) + getattr(other, name) for name in ParseErrors.model_fields})


def parse_permutation(ids: Sequence[int] | None, n: int, requested: int | None = None) -> tuple[list[int], ParseErrors]:
    """0-based order of `n` items from the model's 1-based ids, best first.

    The model was asked for its best `requested` (default all n). Duplicates and unknown ids are dropped, unnamed
    ids are appended in their prior (input) order; `ids=None` means the answer was unusable and the prior order is
    kept.
    """
    requested = n if requested is None else requested
    if ids is None:
        return list(range(n)), ParseErrors(answers=1, unusable=1, missing=requested, incomplete_answers=1)
    seen: set[int] = set()
    order: list[int] = []
    duplicates = unknown = 0
    for item in ids:
        if not 1 <= item <= n:
            unknown += 1
        elif item - 1 in seen:
            duplicates += 1
        else:
            seen.add(item - 1)
            order.append(item - 1)
    missing = max(requested - len(order), 0)
    permutation = order + [index for index in range(n) if index not in seen]
    errors = ParseErrors(
        answers=1,
        unchanged=int(permutation == list(range(n))),
        duplicates=duplicates,
        unknown=unknown,
        missing=missing,
        incomplete_answers=int(bool(duplicates or unknown or missing)),
    )
    return permutation, errors
