"""Query embeddings for concurrent searches: one encoder thread embeds what is waiting in batches, repeats are
embedded once, and recent queries come from a small cache.

A server's searches each need one short text embedded. One at a time, each pays the encoder's fixed cost per call
and they queue on the torch lock anyway; here every caller hands its text to one worker thread, which takes all that
is waiting at once and embeds it in as few calls as it can without changing a single vector:

- texts asked for by several callers at once are embedded once (a load test cycling a few questions, or users
  clicking the same example, mostly asks for texts already waiting);
- distinct texts are batched only with texts of the same token length: such a batch has no padding, so its vectors
  are the ones `Embedder.embed_query` gives one by one up to the BLAS's rounding (bit for bit on some CPUs; on others
  a batch of several rows is summed in another order than one row, ~1e-7 apart, as a padded batch always is);
- the last `cache_size` distinct texts keep their vectors (exact: the same ones), so a repeated query skips the
  encoder.

The worker waits for nothing: when the encoder is idle a lone query is embedded at once, and while it is busy the
next queries gather into the next batch by themselves. The embedder is wrapped from outside, through its public
`embed_queries`, with `query_threads` torch threads like `embed_query`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, InvalidStateError

import numpy as np

from strata.encoders.embedder import Embedder

logger = logging.getLogger(__name__)

MAX_BATCH = 64  # texts per encoder call at most


class QueryBatcher:
    """Embeds queries for many threads (or coroutines: `submit` returns a future) in exact batches."""

    def __init__(self, embedder: Embedder, cache_size: int = 4096, max_batch: int = MAX_BATCH) -> None:
        self.embedder = embedder
        self.cache_size = cache_size
        self.max_batch = max(1, max_batch)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._waiting: dict[str, Future[np.ndarray]] = {}  # text -> the future every caller of it shares
        self._embedding: dict[str, Future[np.ndarray]] = {}  # texts the worker has taken and not finished yet
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._worker: threading.Thread | None = None
        self.calls = 0  # encoder calls made (tests and diagnostics)
        self.embedded = 0  # texts embedded by them

    # asking

    def submit(self, text: str) -> Future[np.ndarray]:
        """A future of `text`'s query vector (already done when the vector is cached)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the query batcher is closed")
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                done: Future[np.ndarray] = Future()
                done.set_result(cached)
                return done
            future = self._waiting.get(text) or self._embedding.get(text)
            if future is None:
                future = self._waiting[text] = Future()
                self._start_worker()
                self._wake.notify()
            return future

    def embed_query(self, text: str) -> np.ndarray:
        """`text`'s vector, as `Embedder.embed_query` gives it; blocks until the worker has embedded it."""
        return self.submit(text).result()

    def close(self) -> None:
        """Stop the worker after what is waiting; later submits raise."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=30)

    # the worker

    def _start_worker(self) -> None:  # under the lock
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="query-batcher", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._closed:
                    self._wake.wait()
                if not self._waiting:  # closed and drained
                    return
                # Everything waiting now, oldest first; later arrivals gather for the next round.
                taken = list(self._waiting.items())
                self._embedding.update(self._waiting)
                self._waiting.clear()
            self._embed_all(taken)

    def _embed_all(self, taken: list[tuple[str, Future[np.ndarray]]]) -> None:
        texts = [text for text, _ in taken]
        try:
            groups = _groups(texts, self._batch_key_function())
        except Exception as error:  # e.g. the model failed to load: every waiting caller gets the error
            self._fail(texts, dict(taken), error)
            return
        futures = dict(taken)
        for group in groups:
            for start in range(0, len(group), self.max_batch):
                batch = group[start : start + self.max_batch]
                try:
                    vectors = list(self.embedder.embed_queries(batch))  # one row object per text, shared below
                except Exception as error:
                    self._fail(batch, futures, error)
                    continue
                self.calls += 1
                self.embedded += len(batch)
                with self._lock:
                    for text, vector in zip(batch, vectors):
                        vector.setflags(write=False)  # shared by every caller of the text and the cache
                        self._remember(text, vector)
                        del self._embedding[text]
                for text, vector in zip(batch, vectors):
                    _settle(futures[text], vector)

    def _fail(self, texts: Sequence[str], futures: dict[str, Future[np.ndarray]], error: Exception) -> None:
        with self._lock:
            for text in texts:
                self._embedding.pop(text, None)
        for text in texts:
            _settle(futures[text], error=error)

    def _remember(self, text: str, vector: np.ndarray) -> None:  # under the lock
        if self.cache_size <= 0:
            return
        self._cache[text] = vector
        self._cache.move_to_end(text)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _batch_key_function(self) -> Callable[[Sequence[str]], list[Hashable]]:
        """What texts must share to be embedded in one call with the vectors one-by-one calls give: the token length
        (no padding) for a transformer; each text alone for any other encoder (nothing is assumed about it)."""
        if getattr(self.embedder.settings, "backend", "sentence-transformers") != "sentence-transformers":
            return lambda texts: list(texts)
        model = self.embedder.query_model
        tokenizer = model.tokenizer
        limit = model.max_seq_length

        def token_lengths(texts: Sequence[str]) -> list[Hashable]:
            ids = tokenizer(list(texts), truncation=True, max_length=limit)["input_ids"]
            return [len(row) for row in ids]

        return token_lengths


def _groups(texts: list[str], keys_of: Callable[[Sequence[str]], list[Hashable]]) -> list[list[str]]:
    """`texts` grouped by key, groups in the order of their first text, texts in order within a group."""
    groups: dict[Hashable, list[str]] = {}
    for text, key in zip(texts, keys_of(texts)):
        groups.setdefault(key, []).append(text)
    return list(groups.values())


def _settle(future: Future[np.ndarray], vector: np.ndarray | None = None, error: Exception | None = None) -> None:
    """Give a shared future its vector or error, unless a caller cancelled it (an awaiting task cancelled through
    `asyncio.wrap_future` cancels the shared future): setting a cancelled one raises, which ended the worker and
    left every later search waiting."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(vector)  # type: ignore[arg-type]
    except InvalidStateError:
        pass  # cancelled: nobody waits for it, and the vector is cached all the same
