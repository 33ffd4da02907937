"""Ingest: files in, papers stored, references resolved, indices brought up to date.

The plan (`run`), the same whichever executor runs it: discover the files; skip each one whose content hash is
unchanged since it was last ingested whole (`unchanged`); parse it (`parse_file`, within
`parsing.per_file_timeout_s`); store its papers, each committed on its own, then its file record (`store_file`; a
file that fails is recorded with its reason, `record_failure`, while the rest of the run goes on); resolve references
and sync the indices, optionally with chunk vectors computed elsewhere; then, asked for, extract CoRank features.
An `Executor` says where the per-file steps, the vectors and the features run: `LocalExecutor` in this process, or
`strata.pipeline.ingest_ray.RayExecutor` on Ray Data workers. Incremental and resumable either way.
"""

from __future__ import annotations

import ctypes
import hashlib
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from strata.config import Settings
from strata.corpus import Corpus
from strata.documents.model import Paper
from strata.documents.parsers import ParseError, discover, iter_papers
from strata.index import CorpusIndex
from strata.index.state import ChunkVectors
from strata.rerank.factory import extract_features
from strata.rerank.features import ExtractionReport
from strata.store.protocol import WritableStore

ProgressCallback = Callable[[Path, "FileOutcome"], None]
# What a file may fail with while the run goes on: recorded as that file's failure.
FILE_ERRORS = (ParseError, OSError, TimeoutError)


class FileOutcome(BaseModel):
    path: str
    status: str = Field(description="'ok', 'skipped' (unchanged since last ingest) or 'failed'")
    papers_added: int = 0
    papers_unchanged: int = 0
    papers_removed: int = Field(default=0, description="Papers an earlier version of the file held and this one lacks")
    chunks: int = 0
    pages: int = 0
    seconds: float = 0.0
    error: str | None = None


class IngestReport(BaseModel):
    files: list[FileOutcome]
    parse_seconds: float
    index_seconds: float
    resolved_references: int
    features: ExtractionReport | None = Field(
        default=None, description="CoRank feature extraction, when ingest was asked for it"
    )

    def count(self, status: str) -> int:
        return sum(1 for outcome in self.files if outcome.status == status)

    @property
    def errors(self) -> list[FileOutcome]:
        return [outcome for outcome in self.files if outcome.status == "failed"]

    def summary(self) -> str:
        papers = sum(outcome.papers_added for outcome in self.files)
        chunks = sum(outcome.chunks for outcome in self.files)
        lines = [
            f"files: {self.count('ok')} ok, {self.count('failed')} failed, {self.count('skipped')} skipped "
            f"(unchanged); papers added: {papers}; chunks: {chunks}; references resolved in corpus: "
            f"{self.resolved_references}; parse {self.parse_seconds:.1f}s, index {self.index_seconds:.1f}s"
        ]
        lines += [f"FAILED {outcome.path}: {outcome.error}" for outcome in self.errors]
        if self.features is not None:
            lines.append(self.features.summary())
            lines += [f"FAILED features of {paper_id}" for paper_id in self.features.failed]
        return "\n".join(lines)


# the plan


class Executor(Protocol):
    """Where the per-file steps, the chunk vectors and the features run; `run` does the rest the same way."""

    def store_files(self, store: WritableStore, files: list[Path]) -> list[FileOutcome]:
        """Skip, parse and store each file; the outcomes in the order of `files`."""

    def vectors(self, index: CorpusIndex) -> ChunkVectors | None:
        """Vectors of the chunks just stored, for the index sync; None: the index embeds them itself."""

    def features(self, corpus: Corpus) -> ExtractionReport:
        """CoRank features of the stored papers lacking current ones."""


def run(paths: Iterable[Path | str], settings: Settings, executor: Executor, features: bool) -> IngestReport:
    """The plan: discover; skip, parse and store each file; resolve references; sync the indices; features."""
    files = discover(paths)
    started = time.perf_counter()
    with Corpus.open(settings) as corpus:
        outcomes = executor.store_files(corpus.store, files)
        parse_seconds = time.perf_counter() - started
        resolved = corpus.store.resolve_references()
        index_started = time.perf_counter()
        corpus.index.sync(vectors_of=executor.vectors(corpus.index))
        index_seconds = time.perf_counter() - index_started
        extraction = executor.features(corpus) if features else None
    return IngestReport(
        files=outcomes,
        parse_seconds=parse_seconds,
        index_seconds=index_seconds,
        resolved_references=resolved,
        features=extraction,
    )


def ingest(
    paths: Iterable[Path | str], settings: Settings, progress: ProgressCallback | None = None, features: bool = False
) -> IngestReport:
    """Parse, store and index `paths`; with `features`, then extract CoRank features of papers lacking them."""
    return run(paths, settings, LocalExecutor(settings, progress), features)


class LocalExecutor:
    """Every step in this process, file by file; the index embeds new chunks with its own encoder."""

    def __init__(self, settings: Settings, progress: ProgressCallback | None = None) -> None:
        self.settings = settings
        self.progress = progress

    def store_files(self, store: WritableStore, files: list[Path]) -> list[FileOutcome]:
        outcomes = []
        for path in files:
            outcome = ingest_file(store, path, self.settings)
            if self.progress:
                self.progress(path, outcome)
            outcomes.append(outcome)
        return outcomes

    def vectors(self, index: CorpusIndex) -> ChunkVectors | None:
        return None

    def features(self, corpus: Corpus) -> ExtractionReport:
        # `strata features` over the whole corpus: papers with current cached features cost no LLM call.
        return extract_features(self.settings, corpus.store, corpus.llm)


def ingest_file(store: WritableStore, path: Path, settings: Settings) -> FileOutcome:
    """Skip, parse and store one file, its papers stored as they are parsed; `FILE_ERRORS` become its failure."""
    started = time.perf_counter()
    key = str(path.resolve())
    digest = ""
    try:
        digest = content_hash(path)
        if unchanged(store, key, digest):
            outcome = FileOutcome(path=key, status="skipped")
        else:
            # Closed on the way out, so a store error mid-file leaves no time limit (its signal handler or watchdog
            # thread) behind it.
            with closing(parse_file(path, settings)) as papers:
                outcome = store_file(store, key, digest, papers)
    except FILE_ERRORS as error:
        outcome = record_failure(store, key, digest, failure_reason(error))
    outcome.seconds = time.perf_counter() - started
    return outcome


# the steps


def unchanged(store: WritableStore, key: str, digest: str) -> bool:
    """Whether the file `key` was last ingested whole from the content hashed `digest` (then it is skipped)."""
    previous = store.file_record(key)
    return previous is not None and previous.sha256 == digest and previous.status == "ok"


def parse_file(path: Path, settings: Settings) -> Generator[Paper, None, None]:
    """The papers of `path`, parsed as they are asked for, all within `parsing.per_file_timeout_s` of parsing. The
    clock stops while the caller has a paper: a limit firing inside its store write could leave a transaction open."""
    with parse_time_limit(settings.parsing.per_file_timeout_s) as limit:
        for paper in iter_papers(path, settings.parsing):
            with limit.paused():
                yield paper


def store_file(
    store: WritableStore, key: str, digest: str, papers: Iterable[Paper], added: list[Paper] | None = None
) -> FileOutcome:
    """Commit each of a file's papers on its own, drop the papers an earlier version of the file held and this one
    lacks, then record the file as ingested; papers written now are appended to `added` when given."""
    outcome = FileOutcome(path=key, status="ok")
    seen: set[str] = set()
    for paper in papers:
        seen.add(paper.id)
        # Papers committed before an interruption are kept; the rerun skips them.
        if store.has_paper(paper.id, digest):
            outcome.papers_unchanged += 1
            continue
        if (holder := _other_holder(store, paper.id, key)) is not None:
            return record_failure(store, key, digest, f"paper id {paper.id!r} is already held by {holder}, which "
                                  "still exists: rename one of them (a paper's id comes from its file name or "
                                  "record); the stored paper is kept")  # fmt: skip
        paper.source_path = key  # the file's key, so its next version can find the papers it no longer holds
        store.put_paper(paper, digest)
        if added is not None:
            added.append(paper)
        outcome.papers_added += 1
        outcome.chunks += len(paper.chunks)
        outcome.pages += max((chunk.page or 0 for chunk in paper.chunks), default=0)
    outcome.papers_removed = len(store.remove_papers_of_file(key, keep=seen))
    store.record_file(key, digest, "ok", paper_count=outcome.papers_added + outcome.papers_unchanged)
    return outcome


def _other_holder(store: WritableStore, paper_id: str, key: str) -> str | None:
    """The other file that `paper_id` is stored from, when that file is still there ('a b.pdf' and 'a_b.pdf', or
    two folders' 'paper.pdf', make one id): storing would silently replace its paper. A file that is gone was
    moved or deleted, and its paper may be replaced."""
    holder = store.paper_source(paper_id)
    return holder if holder and holder != key and Path(holder).exists() else None


def record_failure(store: WritableStore, key: str, digest: str, reason: str) -> FileOutcome:
    store.record_file(key, digest, "failed", error=reason)
    return FileOutcome(path=key, status="failed", error=reason)


def failure_reason(error: Exception) -> str:
    return error.reason if isinstance(error, ParseError) else f"{type(error).__name__}: {error}"


def content_hash(path: Path) -> str:
    """sha256 of a file, or of a folder's files (names and bytes, in sorted order) for folder formats."""
    digest = hashlib.sha256()
    for file in _files_of(path):
        digest.update(file.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _files_of(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.is_file())
    else:
        yield path


@contextmanager
def parse_time_limit(seconds: float) -> Iterator[_Alarm | _Watchdog]:
    """Abort a parse that runs past `seconds` with a TimeoutError; the clock stops inside the yielded limit's
    `paused()`.

    On the main thread a SIGALRM raises it; elsewhere (the server's ingest thread, a Ray worker's task thread: no
    signal reaches them) a watchdog thread raises it in the parsing thread. Either lands between Python bytecodes, so
    one long C call (a single PyMuPDF page) finishes first.
    """
    message = f"parsing took longer than {seconds:g}s (parsing.per_file_timeout_s)"
    on_main = threading.current_thread() is threading.main_thread()
    limit = _Alarm(seconds, message) if on_main else _Watchdog(seconds, message)
    try:
        yield limit
    finally:
        limit.stop()


class _Alarm:
    """The time limit on the main thread: a SIGALRM whose handler raises TimeoutError(message)."""

    def __init__(self, seconds: float, message: str) -> None:
        def expire(signum: int, frame: object) -> None:
            raise TimeoutError(message)

        self._previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)

    @contextmanager
    def paused(self) -> Iterator[None]:
        left, _ = signal.setitimer(signal.ITIMER_REAL, 0)  # an expired timer's handler raises before the yield
        yield
        signal.setitimer(signal.ITIMER_REAL, left)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous)


class _Watchdog:
    """The time limit off the main thread: a thread that raises TimeoutError(message) in the parsing thread once it
    has run `seconds` outside `paused()`, through CPython's asynchronous exceptions (no library wraps this for a
    context manager we can use here; `stopit` does the same). One thread per file, however many papers it holds."""

    def __init__(self, seconds: float, message: str) -> None:
        class ParseTimeout(TimeoutError):
            def __init__(self, *args: object) -> None:
                super().__init__(*(args or (message,)))

        self._timeout = ParseTimeout
        self._parser = ctypes.c_ulong(threading.get_ident())
        self._running, self._done = True, False
        self._deadline = time.monotonic() + seconds  # while running
        self._left = seconds  # while paused
        self._changed = threading.Condition()
        threading.Thread(target=self._watch, name="parse-time-limit", daemon=True).start()

    def _watch(self) -> None:
        with self._changed:
            while not self._done:
                if not self._running:
                    self._changed.wait()
                elif (left := self._deadline - time.monotonic()) > 0:
                    self._changed.wait(left)
                else:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(self._parser, ctypes.py_object(self._timeout))
                    return

    @contextmanager
    def paused(self) -> Iterator[None]:
        # The watchdog raises only while it holds `_changed`: an exception it raised surfaces in this thread once it
        # has taken `_changed` here (at its next call), never after the yield.
        with self._changed:
            self._left = self._deadline - time.monotonic()
            self._running = False
        yield
        with self._changed:
            self._deadline = time.monotonic() + self._left
            self._running = True
            self._changed.notify()

    def stop(self) -> None:
        with self._changed:
            self._done = True
            self._changed.notify()
        # An exception scheduled as the parse finished would surface later, outside this file: drop it.
        ctypes.pythonapi.PyThreadState_SetAsyncExc(self._parser, None)
