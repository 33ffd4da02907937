"""What the stages need of the corpus indices, as Protocols both backends satisfy (tantivy + faiss under the store
home, or PostgreSQL tables + pgvector)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

import numpy as np

from strata.encoders.embedder import Embedder
from strata.index.state import ChunkScore
from strata.store.base import StoredChunk


class LexicalIndex(Protocol):
    """BM25 over chunks: by text or by weighted terms (RM3 feedback), optionally within some papers."""

    def terms(self, text: str) -> list[str]: ...
    def search(
        self, text: str, depth: int, paper_ids: Collection[str] | None = None, title_tie_breaker: float = ...
    ) -> list[ChunkScore]: ...
    def search_terms(
        self,
        weights: Mapping[str, float],
        depth: int,
        paper_ids: Collection[str] | None = None,
        title_tie_breaker: float = ...,
    ) -> list[ChunkScore]: ...
    def rowids_of_papers(self, paper_ids: Collection[str]) -> list[int]: ...


class VectorIndex(Protocol):
    """Dense chunk vectors: search by text (embedded by `embedder`) or by vector, optionally among some chunks."""

    embedder: Embedder

    def __len__(self) -> int: ...
    def search_text(self, text: str, depth: int, rowids: Collection[int] | None = None) -> list[ChunkScore]: ...
    def search(self, vector: np.ndarray, depth: int, rowids: Collection[int] | None = None) -> list[ChunkScore]: ...
    def embedding_text(self, stored: StoredChunk) -> str: ...
