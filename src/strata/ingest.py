"""Ingest: files in, papers stored, references resolved, indices brought up to date.

Incremental and resumable: each paper is committed on its own, a file whose content hash is unchanged is skipped,
and a file that fails is recorded with its reason while the rest of the run goes on.
"""

from __future__ import annotations

import ctypes
import hashlib
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from strata.config import Settings
from strata.documents.parsers import ParseError, discover, iter_papers
from strata.index import CorpusIndex
from strata.rerank.factory import extract_features
from strata.rerank.features import ExtractionReport
from strata.store import CorpusStore, open_store

ProgressCallback = Callable[[Path, "FileOutcome"], None]


class FileOutcome(BaseModel):
    path: str
    status: str = Field(description="'ok', 'skipped' (unchanged since last ingest) or 'failed'")
    papers_added: int = 0
    papers_unchanged: int = 0
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


def ingest(
    paths: Iterable[Path | str], settings: Settings, progress: ProgressCallback | None = None, features: bool = False
) -> IngestReport:
    """Parse, store and index `paths`; with `features`, then extract CoRank features of papers lacking them."""
    files = discover(paths)
    started = time.perf_counter()
    with open_store(settings) as store:
        outcomes = [_ingest_file(store, path, settings, progress) for path in files]
        parse_seconds = time.perf_counter() - started
        resolved = store.resolve_references()
        index_started = time.perf_counter()
        CorpusIndex(store, settings).sync()
    return IngestReport(
        files=outcomes,
        parse_seconds=parse_seconds,
        index_seconds=time.perf_counter() - index_started,
        resolved_references=resolved,
        features=extract_features(settings) if features else None,
    )


def _ingest_file(
    store: CorpusStore, path: Path, settings: Settings, progress: ProgressCallback | None
) -> FileOutcome:
    started = time.perf_counter()
    key = str(path.resolve())
    digest = ""
    try:
        digest = content_hash(path)
        previous = store.file_record(key)
        if previous and previous.sha256 == digest and previous.status == "ok":
            outcome = FileOutcome(path=key, status="skipped")
        else:
            outcome = _store_papers(store, path, key, digest, settings)
            store.record_file(key, digest, "ok", paper_count=outcome.papers_added + outcome.papers_unchanged)
    except (ParseError, OSError, TimeoutError) as error:
        reason = error.reason if isinstance(error, ParseError) else f"{type(error).__name__}: {error}"
        outcome = FileOutcome(path=key, status="failed", error=reason)
        store.record_file(key, digest, "failed", error=reason)
    outcome.seconds = time.perf_counter() - started
    if progress:
        progress(path, outcome)
    return outcome


def _store_papers(store: CorpusStore, path: Path, key: str, digest: str, settings: Settings) -> FileOutcome:
    outcome = FileOutcome(path=key, status="ok")
    with parse_time_limit(settings.parsing.per_file_timeout_s):
        for paper in iter_papers(path, settings.parsing):
            # Papers committed before an interruption are kept; the rerun skips them.
            if store.has_paper(paper.id, digest):
                outcome.papers_unchanged += 1
                continue
            paper.source_path = paper.source_path or key
            store.put_paper(paper, digest)
            outcome.papers_added += 1
            outcome.chunks += len(paper.chunks)
            outcome.pages += max((chunk.page or 0 for chunk in paper.chunks), default=0)
    return outcome


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
def parse_time_limit(seconds: float) -> Iterator[None]:
    """Abort a parse that runs past `seconds` with a TimeoutError.

    On the main thread a SIGALRM raises it; elsewhere (the server's ingest thread, a Ray worker's task thread: no
    signal reaches them) a timer raises it in the parsing thread. Either lands between Python bytecodes, so one long
    C call (a single PyMuPDF page) finishes first.
    """
    message = f"parsing took longer than {seconds:.0f}s (parsing.per_file_timeout_s)"
    if threading.current_thread() is not threading.main_thread():
        with _thread_time_limit(seconds, message):
            yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(message)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _thread_time_limit(seconds: float, message: str) -> Iterator[None]:
    """Raise TimeoutError(message) in this thread after `seconds`, through CPython's asynchronous exceptions (no
    library wraps this for a context manager we can use here; `stopit` does the same)."""
    thread_id = ctypes.c_ulong(threading.get_ident())

    class ParseTimeout(TimeoutError):
        def __init__(self, *args: object) -> None:
            super().__init__(*(args or (message,)))

    guard = threading.Lock()
    active = True

    def expire() -> None:
        with guard:
            if active:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, ctypes.py_object(ParseTimeout))

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with guard:
            active = False
        timer.cancel()
        # An exception scheduled as the parse finished would surface later, outside this file: drop it.
        ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, None)
