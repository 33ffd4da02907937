"""The HTTP API (FastAPI) and the web page it serves; `serve` runs it with uvicorn.

Every API route needs `Authorization: Bearer TOKEN` when serve.token is set; the page, its static files, /health and
the OpenAPI schema stay open (they hold no corpus data). Binding beyond loopback without a token is refused.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, File, Form, HTTPException, Query, Request, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field, SecretStr, TypeAdapter, model_validator
from sse_starlette import EventSourceResponse, ServerSentEvent

from strata.config import Settings
from strata.documents.model import Ranking
from strata.pipeline.ingest import IngestReport
from strata.read.model import AnswerFormat, AskCancelled, AskResult, StageEvent
from strata.retrieve.hybrid import Method
from strata.serve.service import (
    MAX_OPTION_CHARS,
    MAX_OPTIONS,
    AskFunction,
    CorpusService,
    Health,
    LocatedText,
    PaperView,
    ServiceError,
    TocView,
    Upload,
    check_options,
)

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_JSON_BYTES = 1 << 20  # every body but an upload is a small JSON object
MULTIPART_SLACK_BYTES = 1 << 20  # multipart boundaries and headers around the uploaded files
MAX_CONTEXT_CHARS = 5000
# A search allocates thousands of small objects that die with its request: collect the youngest generation every
# 20,000 allocations rather than 700, and the older ones rarely (CPython's defaults are 700, 10, 10).
GC_THRESHOLDS = (20_000, 20, 20)
WORKER_SETTINGS_ENV = "_STRATA_SERVE_WORKER_SETTINGS"  # the settings `serve` hands its worker processes (JSON)
# A ranking's JSON as bytes, the response body itself (`model_dump_json` decodes them to a str, which the response
# would encode back: ~40 KB each way per search).
RANKING_JSON = TypeAdapter(Ranking)


class AskRequest(BaseModel):
    question: str = Field(min_length=1, description="The question; at most serve.max_query_chars characters")
    options: list[Annotated[str, Field(min_length=1, max_length=MAX_OPTION_CHARS)]] | None = Field(
        default=None, max_length=MAX_OPTIONS, description="Multiple choice: the options, verbatim"
    )
    format: AnswerFormat | None = Field(
        default=None, description="'text', 'mc' (needs options) or 'table'; default 'mc' with options, else 'text'"
    )

    @model_validator(mode="after")
    def _choices_need_options(self) -> AskRequest:
        if self.format == "mc" and len(self.options or []) < 2:
            raise ValueError("a multiple-choice question ('format': 'mc') needs at least two options")
        return self


class AskError(BaseModel):
    detail: str


def create_app(settings: Settings, ask_fn: AskFunction | None = None) -> FastAPI:
    """The API over the corpus under `settings.store.home`; `ask_fn` replaces the Read pipeline's `ask`."""
    service = CorpusService(settings, ask_fn)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(service.warm_up)
        # The models, indices and libraries loaded by now are ~500k objects the cyclic garbage collector would
        # otherwise walk again and again while requests allocate (it tripled the cost of building a search's hits).
        # They live as long as the server: take them out of its sight.
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        yield
        service.close()

    app = FastAPI(
        title="Strata",
        summary="Evidence-grounded search and question answering over scientific papers",
        version="0.1.0",
        lifespan=lifespan,
        max_body_size=MAX_JSON_BYTES,
    )

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, error: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=error.status)

    @app.get("/health", tags=["service"])
    def health() -> Health:
        return service.health()

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # Without a token there is nothing to check: no dependency, which FastAPI would solve (with the header it reads)
    # on every request for nothing; with RANKING_JSON this cut the framework's CPU per search by about a quarter.
    token = settings.serve.token
    guard = [Depends(_bearer_check(token.get_secret_value()))] if token else []
    app.include_router(_api(service), dependencies=guard)
    app.add_middleware(RequestGuard, token=token.get_secret_value() if token else None)
    return app


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class RequestGuard:
    """Checks made from the headers alone, before FastAPI reads a body: a browser request from another site that
    would change something is refused (any web page can post a form to a token-less server on loopback, adding
    files to its corpus), and with a token an upload without it is refused before it is read and spooled to disk
    (the router's token dependency runs only after the form is parsed). Plain ASGI, so searches pay nothing."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: dict, receive: Callable[..., Awaitable[dict]], send: Callable[..., Awaitable[None]]
                       ) -> None:  # fmt: skip
        refusal = self._refusal(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail = refusal
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        await JSONResponse({"detail": detail}, status_code=status, headers=headers)(scope, receive, send)

    def _refusal(self, scope: dict) -> tuple[int, str] | None:
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        origin = headers.get("origin")
        if scope["method"] not in SAFE_METHODS and origin is not None:
            if urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
                return 403, f"cross-origin request from {origin} refused"
        if self.token and scope["path"] == "/ingest":
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not _same_token(given.strip(), self.token):
                return 401, "missing or wrong bearer token (Authorization: Bearer ...)"
        return None


def _same_token(given: str, token: str) -> bool:
    return secrets.compare_digest(given.encode(), token.encode())  # in constant time


def _bearer_check(token: str) -> Callable[..., Awaitable[None]]:
    bearer = HTTPBearer(auto_error=False, description="serve.token")

    # Async: it does no I/O, and a sync dependency would cost every API request a trip through the thread pool.
    async def check(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if credentials is None or not _same_token(credentials.credentials, token):
            raise HTTPException(401, "missing or wrong bearer token (Authorization: Bearer ...)",
                                headers={"WWW-Authenticate": "Bearer"})

    return check


def _api(service: CorpusService) -> APIRouter:
    limits = service.limits
    api = APIRouter()

    # Async, answered with the ranking's own JSON: a sync endpoint would take a pool thread for the search and
    # another to validate the returned model against `response_model` again, field by field, before serialising it.
    @api.get("/search", tags=["corpus"], response_model=Ranking)
    async def search(
        q: Annotated[str, Query(description="The query")],
        # A default rather than an annotation: annotations are evaluated where `limits` is out of scope.
        k: int | None = Query(None, ge=1, description="Papers returned (at most serve.max_k: more is capped)"),
        method: Method = "hybrid",
        prf: bool | None = None,
    ) -> Response:
        """Hybrid (BM25 + dense) search: papers best first, each with its best chunks and their locators; reordered by
        `rerank.method` when that needs no LLM (the cross-encoder)."""
        ranking = await service.search_async(q, k, method, prf)
        return Response(RANKING_JSON.dump_json(ranking), media_type="application/json")

    @api.get("/papers/{paper_id}", tags=["corpus"])
    def paper(paper_id: str) -> PaperView:
        """A paper's metadata and its table of contents (the section tree)."""
        return service.paper(paper_id)

    @api.get("/locate/{locator}", tags=["corpus"])
    def locate(
        locator: str,
        context: Annotated[int | None, Query(ge=0, le=MAX_CONTEXT_CHARS, description="Characters around")] = None,
    ) -> LocatedText:
        """The text a locator (PAPER_ID#START-END; '#' sent as %23) names, with its section, page and context."""
        return service.locate(locator, context)

    @api.get("/toc/{paper_id}", tags=["corpus"])
    async def toc(
        paper_id: str,
        q: Annotated[str | None, Query(description="A question: also rank the ToC leaves that answer it")] = None,
        k: Annotated[int | None, Query(ge=1, le=20, description="Leaves returned")] = None,
    ) -> TocView:
        """The paper's ToC; with `q`, the leaves that answer the question (STAIR adapter or zero-shot LLM)."""
        work = partial(service.toc, paper_id, q, k)
        return await (service.llm_slots.run(work) if q else run_in_threadpool(work))

    @api.post("/ask", tags=["answers"], response_class=EventSourceResponse,
              responses={200: {"description": "Server-sent events: `stage` (StageEvent) events as the pipeline runs, "
                               "then one `result` (AskResult) or `error` ({detail}) event"}})
    async def ask(request: AskRequest) -> EventSourceResponse:
        """Answer a question from the corpus, streaming stage progress and then the answer with its evidence."""
        # A bad question or a missing pipeline is a plain 4xx/501, before any event is sent.
        service.check_query(request.question)
        check_options(request.options or [], request.format)
        service.answer_function()
        return EventSourceResponse(_ask_events(service, request), ping=15)

    @api.post(
        "/ingest",
        tags=["corpus"],
        max_body_size=limits.max_upload_bytes * limits.max_upload_files + MULTIPART_SLACK_BYTES,
        form_limits={"max_files": limits.max_upload_files, "max_fields": 8},
    )
    async def ingest(
        files: Annotated[list[UploadFile] | None, File(description="Files to add (PDF, TEI, JATS, ...)")] = None,
        folder: Annotated[str | None, Form(description="Or: a folder inside the storage root")] = None,
    ) -> IngestReport:
        """Add uploaded files, or a folder already inside the server's storage root, to the corpus. One ingest runs at a
        time; the others wait for their turn."""
        if bool(files) == bool(folder):
            raise ServiceError("send either files (multipart 'files') or a 'folder' inside the storage root")
        if folder:
            return await service.ingest_slot.run(partial(service.ingest_folder, folder))
        uploads = [Upload(name=file.filename or "", content=file.file, size=file.size or 0) for file in files or []]
        return await service.ingest_slot.run(partial(service.ingest_uploads, uploads))

    return api


async def _ask_events(service: CorpusService, request: AskRequest) -> AsyncIterator[ServerSentEvent]:
    """Run the question in a worker thread and relay its StageEvents, then its AskResult, as they happen.

    When the client disconnects, the worker stops at its next stage event (a thread cannot be interrupted mid-call),
    so an abandoned question frees its LLM slot instead of running to the end."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[StageEvent | AskResult | AskError] = asyncio.Queue()
    abandoned = threading.Event()

    def on_event(event: StageEvent) -> None:
        if abandoned.is_set():
            raise AskCancelled(f"the client of {request.question!r} went away")
        loop.call_soon_threadsafe(queue.put_nowait, event)

    def answer() -> AskResult | AskError:
        try:
            return service.ask(request.question, request.options, request.format, on_event)
        except ServiceError as error:
            return AskError(detail=str(error))
        except AskCancelled as cancelled:
            logger.info("%s: stopped", cancelled)
            return AskError(detail=str(cancelled))
        except Exception as error:  # the stream is open: report the failure as an event, log the traceback
            logger.exception("answering %r failed", request.question)
            return AskError(detail=f"answering failed: {type(error).__name__}: {error}")

    worker = asyncio.ensure_future(service.llm_slots.run(answer))  # waits for an LLM slot in the loop, not a thread
    worker.add_done_callback(lambda done: queue.put_nowait(done.result()))
    try:
        while True:
            item = await queue.get()
            if isinstance(item, StageEvent):
                yield ServerSentEvent(data=item.model_dump_json(), event="stage")
                continue
            name = "result" if isinstance(item, AskResult) else "error"
            yield ServerSentEvent(data=item.model_dump_json(), event=name)
            return
    finally:  # also when the client disconnects: the generator is closed or cancelled at its await
        abandoned.set()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse to serve beyond loopback without a token: anyone on the network could read and add to the corpus."""
    if settings.serve.token is None and not is_loopback(settings.serve.host):
        raise ValueError(
            f"refusing to serve on {settings.serve.host} without a token: set serve.token (STRATA_SERVE__TOKEN) or "
            "bind a loopback address such as 127.0.0.1"
        )


def serve(settings: Settings, ask_fn: AskFunction | None = None) -> None:
    """Run the API and web page on serve.host:serve.port until interrupted; with serve.workers > 1, that many worker
    processes share the port, each building the app from the settings handed down (`worker_app`)."""
    check_bind(settings)
    workers = settings.serve.workers
    if workers > 1 and ask_fn is not None:
        raise ValueError("serve.workers > 1 runs the app in fresh processes: an ask_fn cannot be handed to them")
    if workers > 1:
        os.environ[WORKER_SETTINGS_ENV] = settings_json(settings)
    app: FastAPI | str = f"{__name__}:worker_app" if workers > 1 else create_app(settings, ask_fn)
    uvicorn.run(app, factory=workers > 1, workers=workers, host=settings.serve.host, port=settings.serve.port,
                log_level="info", access_log=settings.serve.access_log,
                # uvicorn annotates int but hands the value to loop.call_later, which takes fractional seconds.
                timeout_keep_alive=settings.serve.keep_alive_s)  # type: ignore[arg-type]


def worker_app() -> FastAPI:
    """The app of one `serve.workers` process (a uvicorn factory): the parent's settings, read from the environment
    it passed down (and then removed from this process's, so nothing it starts inherits the token)."""
    return create_app(Settings.model_validate(json.loads(os.environ.pop(WORKER_SETTINGS_ENV))))


def settings_json(settings: Settings) -> str:
    """The settings as JSON a worker validates back into the same Settings, secrets included (a plain dump masks
    them)."""

    def plain(value: object) -> object:
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [plain(item) for item in value]
        return value

    return json.dumps(plain(settings.model_dump()), default=str)


@contextmanager
def background_server(app: FastAPI, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` with uvicorn on a free port of `host` in a thread; yields the base URL (tests, benchmarks)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the test server failed to start")
            threading.Event().wait(0.02)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
