"""What the HTTP API and the MCP server both offer over one open corpus: search, ask, papers, locators, ToC, ingest.

Errors a client caused are `ServiceError`s carrying an HTTP status; both front ends turn them into clear messages.
"""

from __future__ import annotations

import asyncio
import filecmp
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol, TypeVar

import anyio
import anyio.to_thread
import faiss
import numpy as np
from pydantic import BaseModel, Field

from strata.config import LLM_RERANKERS, Settings
from strata.corpus import Corpus
from strata.documents.model import Locator, Paper, Ranking, Section
from strata.pipeline.ask import MAX_OPTIONS, checked_format, requested_format
from strata.pipeline.ingest import IngestReport
from strata.read.model import AnswerFormat, AskResult, StageEvent
from strata.rerank.base import FirstStage, Reranker
from strata.retrieve.protocol import Method
from strata.retrieve.query_batch import QueryBatcher
from strata.store.sqlite import CorpusStats
from strata.toc.query import TocAnswer

if TYPE_CHECKING:
    from strata.pipeline.ask import Pipeline

UPLOADS = "uploads"  # sub-folder of the storage root that uploaded files are written to
MAX_NAME_BYTES = 255  # a file name's limit on common file systems (a longer one failed the write with a 500)
MAX_OPTION_CHARS = 1000  # options join the question in the search query, so each is bounded like a query
FAISS_THREADS = 1

T = TypeVar("T")


class AskFunction(Protocol):
    def __call__(
        self,
        question: str,
        settings: Settings,
        *,
        options: list[str] | None = None,
        answer_format: AnswerFormat = "text",
        on_event: Callable[[StageEvent], None] | None = None,
    ) -> AskResult: ...


class ServiceError(Exception):
    """A request the corpus cannot serve as asked; `status` is the HTTP status that says why."""

    status = 400


class NotFoundError(ServiceError):
    status = 404


class TooLargeError(ServiceError):
    status = 413


class ConflictError(ServiceError):
    status = 409


class UnavailableError(ServiceError):
    status = 501


@dataclass(frozen=True)
class Upload:
    """One uploaded file: the name the client sent, its content (an open file) and its size in bytes."""

    name: str
    content: BinaryIO
    size: int


class PaperView(BaseModel):
    """A paper's metadata and table of contents, without its full text."""

    id: str
    title: str
    authors: list[str]
    year: int | None
    venue: str | None
    doi: str | None
    arxiv_id: str | None
    abstract: str
    source_format: str
    sections: list[Section] = Field(description="The ToC tree: top-level sections with their children")
    chunks: int = Field(description="Retrieval chunks stored for the paper")
    references: int = Field(description="Entries of its reference list")
    text_chars: int = Field(description="Length of the full text that locators index into")


class LocatedText(BaseModel):
    """The exact text a locator names, where it sits in its paper, and the text around it."""

    locator: str
    paper_id: str
    title: str
    section_path: tuple[str, ...]
    page: int | None
    char_start: int
    char_end: int
    text: str = Field(description="paper.text[char_start:char_end]")
    before: str = Field(description="Up to `context` characters preceding the span")
    after: str = Field(description="Up to `context` characters following the span")


class SectionText(BaseModel):
    paper_id: str
    title: str
    section_path: tuple[str, ...]
    locator: str = Field(description="Span from the section's first chunk to its last")
    text: str
    truncated: bool = Field(description="The text was cut at serve.max_section_chars")


class TocView(BaseModel):
    paper_id: str
    title: str
    sections: list[Section] = Field(description="The paper's ToC tree")
    answer: TocAnswer | None = Field(default=None, description="Leaves answering the question, when one was asked")


class Health(BaseModel):
    status: str = "ok"
    auth: bool = Field(description="API requests need a bearer token")
    corpus: CorpusStats


class Gate:
    """Work that at most `slots` callers do at once (LLM answers, ingests). A worker thread takes a slot with `with
    gate:`. The event loop hands such work over with `await gate.run(work)`: the request waits for its turn in the loop
    and only then takes a thread, so requests queued for a long ingest or answer hold none (45 ingests queued on
    FastAPI's pool threads once held all 40 of them, and an unrelated /papers request waited 16 s)."""

    def __init__(self, slots: int) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        # At most `slots` threads of `run` at once: one of them waits on `_slots` only while a caller outside `run`
        # (an MCP tool's thread, a direct call) holds a slot.
        self._turns = anyio.CapacityLimiter(slots)

    def __enter__(self) -> None:
        self._slots.acquire()

    def __exit__(self, *exc: object) -> None:
        self._slots.release()

    async def run(self, work: Callable[[], T]) -> T:
        """`work` (which takes a slot with `with gate:` itself) on a worker thread, once it is its turn."""
        return await anyio.to_thread.run_sync(work, limiter=self._turns)


class ResidentPipeline:
    """The default ask function: one Read pipeline (store, LLM, reranker) opened on the first question and reused by
    the next ones, instead of loading the LLM again per question as `strata.pipeline.ask.ask` does."""

    def __init__(self) -> None:
        from strata.pipeline.ask import open_pipeline  # ImportError when the Read stage is missing

        self._open_pipeline = open_pipeline
        self._stack = ExitStack()
        self._pipeline: Pipeline | None = None
        self._opening = threading.Lock()  # concurrent first questions (serve.concurrent_asks > 1) open one pipeline

    def __call__(self, question: str, settings: Settings, *, options: list[str] | None = None,
                 answer_format: AnswerFormat = "text", on_event: Callable[[StageEvent], None] | None = None
                 ) -> AskResult:
        with self._opening:
            if self._pipeline is None:
                self._pipeline = self._stack.enter_context(self._open_pipeline(settings))
        return self._pipeline.ask(question, options=options, answer_format=answer_format, on_event=on_event)

    def close(self) -> None:
        self._stack.close()


class CorpusService:
    """One open corpus shared by every request; ingest and LLM work are bounded by gates."""

    def __init__(self, settings: Settings, ask_fn: AskFunction | None = None) -> None:
        self.settings = settings
        self.limits = settings.serve
        self.storage_root = Path(settings.serve.storage_root or Path(settings.store.home) / "files").resolve()
        self._ask_fn = ask_fn
        self._ask_fn_lock = threading.Lock()
        self.corpus = Corpus(settings)
        self._store = self.corpus.store
        self.reranker = self._search_reranker()
        # The embedded LLM serves one caller at a time; asks and ToC questions queue for a slot.
        self.llm_slots = Gate(settings.serve.concurrent_asks)
        self.ingest_slot = Gate(1)
        self._resident = ExitStack()  # what the default ask function keeps open between questions
        self._batcher: QueryBatcher | None = None
        self._batcher_lock = threading.Lock()
        self._search_limiter: anyio.CapacityLimiter | None = None  # made in the event loop, on the first search
        # A search's one query vector gains nothing from OpenMP threads, and on a busy machine their spin-waits made
        # faiss's flat search of 5,673 vectors take 8 ms instead of 0.5 ms (process-wide: ingest here builds HNSW
        # graphs with one thread too).
        faiss.omp_set_num_threads(FAISS_THREADS)

    def close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()
        self._resident.close()
        self.corpus.close()

    def _search_reranker(self) -> Reranker:
        """`rerank.method` for searches when it needs no LLM (the cross-encoder). A listwise LLM reranker would hold the
        one LLM slot for seconds per search, so searches keep the first-stage order then (the ranking's `method` says
        so) and answers apply it."""
        if self.settings.rerank.method in LLM_RERANKERS:
            return FirstStage()
        return self.corpus.reranker

    def warm_up(self) -> None:
        """Load the indices and the query encoder now, so that the first request does not wait for them."""
        self.search("warm up", k=1, method="hybrid")

    # reading the corpus

    def health(self) -> Health:
        return Health(auth=self.limits.token is not None, corpus=self._store.stats())

    def search(self, query: str, k: int | None = None, method: Method = "hybrid", prf: bool | None = None) -> Ranking:
        """A search from a worker thread (MCP, tests): the query is embedded by the shared batcher."""
        self.check_query(query)
        vector = self.query_batcher.embed_query(query) if self._needs_query_vector(method) else None
        return self.search_embedded(query, vector, k, method, prf)

    async def search_async(
        self, query: str, k: int | None = None, method: Method = "hybrid", prf: bool | None = None
    ) -> Ranking:
        """A search from the event loop: the query waits for its vector without holding a thread (so concurrent
        queries gather into one encoder batch), then searches right here (`serve.search_in_event_loop`) or on one of
        `serve.search_threads` threads."""
        self.check_query(query)
        vector = None
        if self._needs_query_vector(method):
            vector = await asyncio.wrap_future(self.query_batcher.submit(query))
        if self.limits.search_in_event_loop:
            return self.search_embedded(query, vector, k, method, prf)
        if self._search_limiter is None:
            self._search_limiter = anyio.CapacityLimiter(self.limits.search_threads)
        return await anyio.to_thread.run_sync(
            self.search_embedded, query, vector, k, method, prf, limiter=self._search_limiter
        )

    def search_embedded(
        self, query: str, vector: np.ndarray | None, k: int | None = None, method: Method = "hybrid",
        prf: bool | None = None,
    ) -> Ranking:
        """The search itself, given the query's vector (None: the searcher embeds it, or needs none)."""
        try:
            ranking = self.corpus.searcher.search(query, k=min(k or self.settings.search.k, self.limits.max_k),
                                                  method=method, prf=prf, query_vector=vector)
        except ValueError as error:  # e.g. dense search on a BM25-only corpus
            raise ServiceError(str(error)) from error
        return self.reranker.rank(query, ranking)

    def _needs_query_vector(self, method: Method) -> bool:
        try:
            return self.corpus.searcher.needs_query_vector(method)
        except ValueError as error:  # dense search on a BM25-only corpus, an unknown method
            raise ServiceError(str(error)) from error

    @property
    def query_batcher(self) -> QueryBatcher:
        """Embeds every request's query, batching concurrent ones (started on first use)."""
        with self._batcher_lock:
            if self._batcher is None:
                self._batcher = QueryBatcher(self.corpus.embedder, cache_size=self.limits.query_cache)
            return self._batcher

    def paper(self, paper_id: str) -> PaperView:
        paper = self._get_paper(paper_id)
        return PaperView(
            **paper.model_dump(include={"id", "title", "authors", "year", "venue", "doi", "arxiv_id", "abstract",
                                        "source_format"}),
            sections=paper.sections,
            chunks=len(paper.chunks),
            references=len(paper.references),
            text_chars=len(paper.text),
        )

    def locate(self, locator: str, context: int | None = None) -> LocatedText:
        try:
            wanted = Locator.parse(locator)
            paper_text = self._store.paper_text(wanted.paper_id)  # read once: the span and its context come from it
            text = wanted.resolve(paper_text)
            located = self._store.place(wanted)
        except KeyError as error:
            raise NotFoundError(error.args[0]) from error
        except ValueError as error:
            raise ServiceError(str(error)) from error
        around = self.limits.context_chars if context is None else context
        start, end = located.char_start, located.char_end
        return LocatedText(
            locator=str(located),
            paper_id=located.paper_id,
            title=self._store.paper_summaries([located.paper_id])[located.paper_id].title,
            section_path=located.section_path,
            page=located.page,
            char_start=start,
            char_end=end,
            text=text,
            before=paper_text[max(0, start - around) : start],
            after=paper_text[end : end + around],
        )

    def read_section(self, paper_id: str, section_path: Iterable[str]) -> SectionText:
        """The text of a section (with its sub-sections), from its first chunk to its last."""
        paper = self._get_paper(paper_id)
        path = tuple(section_path)
        chunks = [chunk for chunk in paper.chunks if path and chunk.section_path[: len(path)] == path]
        if not chunks:
            known = sorted({" > ".join(section.path) for section in paper.walk_sections()})
            raise NotFoundError(
                f"paper {paper_id!r} has no text under section {' > '.join(path)!r}; its sections: {'; '.join(known)}"
            )
        locator = Locator(paper_id=paper.id, char_start=min(c.char_start for c in chunks),
                          char_end=max(c.char_end for c in chunks))
        text = locator.resolve(paper.text)
        limit = self.limits.max_section_chars
        return SectionText(paper_id=paper.id, title=paper.title, section_path=path, locator=str(locator),
                           text=text[:limit], truncated=len(text) > limit)

    def toc(self, paper_id: str, question: str | None = None, k: int | None = None) -> TocView:
        """The paper's ToC; with a question, also the leaves that answer it (an LLM call, so it queues)."""
        paper = self._get_paper(paper_id)
        answer = None
        if question:
            self.check_query(question)
            from strata.toc.query import answer_from_toc

            with self.llm_slots:  # the paper is already read: no second store connection for it
                try:
                    answer = answer_from_toc(self.settings, paper, question, k=k)
                except ValueError as error:  # e.g. a ToC with no leaves: the request, not the server, is at fault
                    raise ServiceError(str(error)) from error
        return TocView(paper_id=paper.id, title=paper.title, sections=paper.sections, answer=answer)

    def _get_paper(self, paper_id: str) -> Paper:
        try:
            return self._store.get_paper(paper_id)
        except KeyError as error:
            raise NotFoundError(error.args[0]) from error

    def check_query(self, text: str) -> None:
        if not text.strip():
            raise ServiceError("the query is empty")
        if len(text) > self.limits.max_query_chars:
            raise ServiceError(f"the query has {len(text)} characters; at most {self.limits.max_query_chars} "
                               "(serve.max_query_chars)")

    # answering

    def answer_function(self) -> AskFunction:
        """The injected ask function, or the Read pipeline (imported on first use, then kept open)."""
        with self._ask_fn_lock:  # MCP tools and HTTP requests call this from several threads
            if self._ask_fn is None:
                try:
                    self._ask_fn = self._resident.enter_context(closing(ResidentPipeline()))
                except ImportError as error:
                    raise UnavailableError(f"the answer pipeline is not available: {error}") from error
            return self._ask_fn

    def ask(
        self,
        question: str,
        options: list[str] | None = None,
        answer_format: AnswerFormat | None = None,
        on_event: Callable[[StageEvent], None] | None = None,
    ) -> AskResult:
        """`answer_format` None: 'mc' with options, else 'text' (`requested_format`)."""
        self.check_query(question)
        answer_format = check_options(options or [], answer_format)
        ask_fn = self.answer_function()
        with self.llm_slots:
            return ask_fn(question, self.settings, options=options, answer_format=answer_format, on_event=on_event)

    # adding to the corpus

    def ingest_uploads(self, uploads: list[Upload]) -> IngestReport:
        """Write uploaded files under `{storage_root}/uploads` (plain names only) and ingest them."""
        if not uploads:
            raise ServiceError("no files were uploaded")
        if len(uploads) > self.limits.max_upload_files:
            raise TooLargeError(f"{len(uploads)} files uploaded; at most {self.limits.max_upload_files} per request "
                                "(serve.max_upload_files)")
        for upload in uploads:
            if upload.size > self.limits.max_upload_bytes:
                raise TooLargeError(f"{upload.name!r} has {upload.size} bytes; at most {self.limits.max_upload_bytes}"
                                    " per file (serve.max_upload_bytes)")
        targets = [self._upload_target(upload.name) for upload in uploads]
        if len(set(targets)) != len(targets):
            raise ServiceError("two uploaded files have the same name")
        with self.ingest_slot:
            staged = [self._stage(target, upload) for target, upload in zip(targets, uploads)]
            try:
                for target, temporary in zip(targets, staged):
                    if target.exists() and not filecmp.cmp(target, temporary, shallow=False):
                        raise ConflictError(f"another {target.name!r} was uploaded before; its paper stays: rename "
                                            "the new file to add it")
                for target, temporary in zip(targets, staged):
                    temporary.replace(target)
            finally:
                for temporary in staged:
                    temporary.unlink(missing_ok=True)
            return self._ingest(targets)

    @staticmethod
    def _stage(target: Path, upload: Upload) -> Path:
        """The upload written beside its target under a temporary name: nothing in the corpus folder changes until
        every file of the request is known to be acceptable."""
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=".upload-", suffix=".part")
        with os.fdopen(handle, "wb") as written:
            shutil.copyfileobj(upload.content, written)
        return Path(name)

    def ingest_folder(self, folder: str) -> IngestReport:
        """Ingest a folder (or file) that already lies inside the storage root, named relative to it; a file inside
        it that links out of the root is left out."""
        from strata.documents.parsers import discover

        try:
            path = (self.storage_root / folder).resolve()
        except (OSError, ValueError) as error:  # e.g. a NUL byte in the name
            raise ServiceError(f"folder {folder!r} is not a usable path: {error}") from error
        if not path.is_relative_to(self.storage_root):
            raise ServiceError(f"folder {folder!r} is outside the storage root; name a path inside it")
        if not path.exists():
            raise NotFoundError(f"no file or folder {folder!r} in the storage root")
        inside = [found for found in discover([path]) if found.resolve().is_relative_to(self.storage_root)]
        with self.ingest_slot:
            return self._ingest(inside)

    def _upload_target(self, name: str) -> Path:
        plain = Path(name).name
        if not name or plain != name or name in (".", "..") or "\\" in name or not name.isprintable():
            raise ServiceError(f"file name {name!r} is not a plain file name (no folders, '..' or control characters)")
        if len(name.encode()) > MAX_NAME_BYTES:
            raise ServiceError(f"file name {name[:40]!r}... has {len(name.encode())} bytes; at most {MAX_NAME_BYTES}")
        target = (self.storage_root / UPLOADS / name).resolve()
        if not target.is_relative_to(self.storage_root / UPLOADS):  # e.g. a symlink planted in the folder
            raise ServiceError(f"file name {name!r} resolves outside the storage root")
        return target

    def _ingest(self, paths: list[Path]) -> IngestReport:
        from strata.pipeline.ingest import ingest

        report = ingest(paths, self.settings)
        # A fresh view of the indices ingest just synced: searchable at once (other readers, such as the resident
        # pipeline, see the change within about a second, when tantivy reloads). Loaded here, on the ingest's
        # thread: the next search would otherwise load them on the event loop and stall every other request.
        self.corpus.refresh()
        self.warm_up()
        # Paths in the report are the server's own; clients see them relative to the storage root.
        for outcome in report.files:
            outcome.path = str(Path(outcome.path).relative_to(self.storage_root))
        return report


def check_options(options: list[str], answer_format: AnswerFormat | None) -> AnswerFormat:
    """The format asked for (`requested_format`), when the options meet the rules every client's multiple-choice
    options meet (the pipeline's, checked before it loads; HTTP's request model states the same ones), each option
    also bounded like a query."""
    if any(len(option) > MAX_OPTION_CHARS for option in options):
        raise ServiceError(f"every option needs 1 to {MAX_OPTION_CHARS} characters")
    try:
        return checked_format(options, requested_format(options, answer_format))
    except ValueError as error:
        raise ServiceError(str(error)) from error