"""Progress of long work, told as (task, done, total, detail): what the CLI draws as bars on a terminal. Stages take
an optional `Progress` and stay silent without one, so nothing below the CLI knows about terminals."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def __call__(self, task: str, done: int, total: int, detail: str = "") -> None:
        """`done` of `total` items of `task` (e.g. "queries") are finished; `detail` says what is under way."""


def tell(progress: Progress | None, task: str, done: int, total: int, detail: str = "") -> None:
    if progress is not None:
        progress(task, done, total, detail)
