"""What the stages above Retrieve need of a searcher, as a Protocol (tests and other backends can stand in)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal, Protocol

from strata.config import SearchSettings
from strata.documents.model import Ranking

Method = Literal["bm25", "dense", "hybrid"]


class Searcher(Protocol):
    """Papers for a query, each with its best chunks and their locators."""

    settings: SearchSettings

    def search(
        self,
        query: str,
        k: int | None = None,
        method: Method = "hybrid",
        prf: bool | None = None,
        paper_ids: Collection[str] | None = None,
    ) -> Ranking: ...

    def with_settings(self, settings: SearchSettings) -> Searcher:
        """The same indices searched with other settings (e.g. more chunks per paper)."""
        ...
