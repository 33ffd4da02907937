"""`Corpus`: one handle on a store home, opened the same way by the CLI, the HTTP service, MCP, eval and benchmarks.

It owns the store (either backend), its BM25 and dense indices, the searcher over them and per-corpus caches, and
opens the LLM client and the reranker on first use. Stages never build this wiring themselves: they take the narrow
Protocols (`PaperStore`, `LexicalIndex`, `VectorIndex`, `Searcher`) or a `Corpus`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from strata.config import LLM_RERANKERS, Settings, StoreSettings
from strata.encoders.embedder import Embedder
from strata.index import CorpusIndex
from strata.index.protocol import VectorIndex
from strata.llm.packaged import deciding_model
from strata.retrieve.hybrid import HybridSearcher
from strata.retrieve.protocol import Searcher
from strata.store import local_store_path, open_store
from strata.store.protocol import PaperStore, WritableStore

if TYPE_CHECKING:
    from strata.llm import LLMClient
    from strata.rerank.base import Reranker

T = TypeVar("T")


class CorpusView(Protocol):
    """What Relate and Read take: the store, the searcher, the chunk vectors and the per-corpus cache."""

    @property
    def store(self) -> PaperStore: ...
    @property
    def searcher(self) -> Searcher: ...
    @property
    def vectors(self) -> VectorIndex: ...
    def cached(self, key: Hashable, make: Callable[[], T]) -> T: ...


class Corpus:
    """An open store home: `store`, `index`, `searcher`; `llm` and `reranker` open lazily; `cached` memoises
    per-corpus state (paper vectors, the reference graph) for as long as the corpus is open."""

    def __init__(self, settings: Settings, client: LLMClient | None = None) -> None:
        self.settings = settings
        self._stack = ExitStack()
        self.store: WritableStore = self._stack.enter_context(open_store(settings))
        self.index = CorpusIndex(self.store, settings)
        self.searcher = HybridSearcher(self.store, self.index, settings.search)
        self._client = client
        self._client_given = client is not None  # a given client (a test's, a benchmark's) answers every call
        self._decider: LLMClient | None = None
        self._reranker: Reranker | None = None
        self._cache: dict[Hashable, Any] = {}
        self._cache_lock = threading.Lock()  # questions asked at once (serve.concurrent_asks) make each once

    @classmethod
    @contextmanager
    def open(cls, settings: Settings, client: LLMClient | None = None) -> Iterator[Corpus]:
        """The corpus under `settings.store.home`, closed on exit; `client` replaces the configured LLM."""
        corpus = cls(settings, client)
        try:
            yield corpus
        finally:
            corpus.close()

    @property
    def vectors(self) -> VectorIndex:
        return self.index.dense

    @property
    def embedder(self) -> Embedder:
        """The dense encoder of this corpus's vectors (queries must be embedded by the same model)."""
        return self.index.dense.embedder

    @property
    def llm(self) -> LLMClient:
        """The configured LLM client, opened on first use (a search-only corpus never loads a model)."""
        if self._client is None:
            from strata.llm import make_client

            self._client = self._stack.enter_context(make_client(self.settings))
        return self._client

    @property
    def decider(self) -> LLMClient:
        """The client for the calls that decide an answer: `llm.decide_model`'s model (see `deciding_model`) when it
        differs and no client was given, else the one LLM client."""
        model = deciding_model(self.settings.llm.model, self.settings.llm.decide_model)
        if self._client_given or model == self.settings.llm.model:
            return self.llm
        if self._decider is None:
            from strata.llm import make_client

            llm = self.settings.llm.model_copy(update={"model": model})
            self._decider = self._stack.enter_context(make_client(llm))
        return self._decider

    @property
    def reranker(self) -> Reranker:
        """`rerank.method`'s reranker; the listwise LLM methods open the LLM client."""
        if self._reranker is None:
            from strata.rerank.factory import make_reranker

            needs_llm = self.settings.rerank.method in LLM_RERANKERS
            self._reranker = make_reranker(self.settings, self.store, self.llm if needs_llm else None)
        return self._reranker

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """`make()`, computed once per key while this corpus is open."""
        with self._cache_lock:
            if key not in self._cache:
                self._cache[key] = make()
            return cast(T, self._cache[key])

    def refresh(self) -> None:
        """See what another writer (an ingest) added: fresh index readers and a new searcher; caches are dropped."""
        self.index = CorpusIndex(self.store, self.settings)
        self.searcher = HybridSearcher(self.store, self.index, self.settings.search)
        self._cache.clear()

    def close(self) -> None:
        self._stack.close()


def require_corpus(store: StoreSettings) -> None:
    """Raise FileNotFoundError unless `store.home` holds a corpus. Opening a store creates it, so a command that only
    reads a corpus would otherwise make a new, empty one under a mistyped home and find nothing there, successfully."""
    if store.backend == "postgres" and store.postgres_url:
        return  # the corpus lives in the server the URL names
    if not local_store_path(store).exists():
        home = store.home.absolute()
        missing = "no such folder" if not home.is_dir() else f"no {local_store_path(store).name} in it"
        raise FileNotFoundError(f"no corpus at {home} ({missing}); `strata ingest PATH --store.home {home}` "
                                "makes one")
