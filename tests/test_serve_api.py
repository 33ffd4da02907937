"""The HTTP API against a real uvicorn server on 127.0.0.1 over a small real corpus (two LitQA2 PDFs)."""

from __future__ import annotations

import shutil
import threading
import time
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from serve_support import PDFS, QUESTION, UPLOAD_PDF, build_corpus, corpus_settings, fake_ask, sse_events

from strata.documents.model import Locator
from strata.read.model import StageEvent
from strata.serve.app import background_server, create_app
from strata.store import open_store


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_data: Path):
    """A running server over a private copy of the corpus (uploads change it) and its settings."""
    home = tmp_path_factory.mktemp("api") / "home"
    shutil.copytree(build_corpus(tmp_path_factory.getbasetemp(), shared_data), home)
    settings = corpus_settings(home)
    with background_server(create_app(settings, ask_fn=fake_ask)) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            yield client, settings


def test_health_counts_the_corpus(server) -> None:
    client, _ = server
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["auth"] is False
    assert health["corpus"]["papers"] >= len(PDFS) and health["corpus"]["chunks"] > 50


def test_search_ranks_the_right_paper_first_with_locators_that_resolve(server) -> None:
    client, settings = server
    response = client.get("/search", params={"q": "KCNJ11 loss-of-function mutation sulfonylurea diabetes", "k": 2})
    assert response.status_code == 200
    ranking = response.json()
    assert ranking["candidates"][0]["paper_id"] == "10.1007_s00125-024-06103-w"
    with open_store(settings) as store:
        for candidate in ranking["candidates"]:
            for hit in candidate["chunks"]:
                assert Locator.model_validate(hit["locator"]).resolve(store.paper_text(candidate["paper_id"])) \
                    == hit["text"]


def test_paper_view_carries_the_section_tree(server) -> None:
    client, settings = server
    view = client.get("/papers/10.1101_2024.02.13.580051").json()
    with open_store(settings) as store:
        paper = store.get_paper("10.1101_2024.02.13.580051")
    assert view["title"] == paper.title and view["chunks"] == len(paper.chunks)
    assert [s["title"] for s in view["sections"]] == [s.title for s in paper.sections]
    results = next(s for s in view["sections"] if s["title"] == "Results")
    assert results["children"] and results["children"][0]["path"][0] == "Results"
    assert client.get("/papers/no-such-paper").status_code == 404


def test_locate_returns_the_exact_span_with_its_context(server) -> None:
    client, settings = server
    with open_store(settings) as store:
        paper = store.get_paper("10.1007_s00125-024-06103-w")
    chunk = paper.chunks[5]
    located = client.get(f"/locate/{quote(str(chunk.locator), safe='')}", params={"context": 30}).json()
    assert located["text"] == paper.text[chunk.char_start : chunk.char_end]
    assert located["before"] == paper.text[chunk.char_start - 30 : chunk.char_start]
    assert located["after"] == paper.text[chunk.char_end : chunk.char_end + 30]
    assert tuple(located["section_path"]) == chunk.section_path and located["title"] == paper.title
    assert client.get("/locate/not-a-locator").status_code == 400
    assert client.get(f"/locate/{quote('10.1007_s00125-024-06103-w#0-99999999', safe='')}").status_code == 400
    assert client.get(f"/locate/{quote('nobody#0-1', safe='')}").status_code == 404


def test_toc_without_a_question_is_the_papers_section_tree(server) -> None:
    client, _ = server
    toc = client.get("/toc/10.1007_s00125-024-06103-w").json()
    assert toc["answer"] is None
    assert "Methods" in [section["title"] for section in toc["sections"]]


def test_a_toc_question_the_papers_toc_cannot_answer_is_a_clear_400(server, monkeypatch) -> None:
    import strata.toc.query as toc_query

    def no_leaves(settings, paper, question, k=None):
        raise ValueError(f"{paper.id}: its ToC has no leaves to answer with")

    monkeypatch.setattr(toc_query, "answer_from_toc", no_leaves)
    client, _ = server
    response = client.get("/toc/10.1007_s00125-024-06103-w", params={"q": "What was measured?"})
    assert response.status_code == 400 and "no leaves to answer with" in response.json()["detail"]


def test_ask_streams_stages_then_an_answer_whose_evidence_resolves(server) -> None:
    client, _ = server
    response = client.post("/ask", json={"question": QUESTION})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    names = [name for name, _ in events]
    assert names[-1] == "result" and set(names[:-1]) == {"stage"} and len(names) >= 4
    assert [data["stage"] for _, data in events[:2]] == ["retrieve", "retrieve"]
    answer = events[-1][1]["answer"]
    assert "[1]" in answer["text"] and answer["evidence"]
    for evidence in answer["evidence"]:
        located = client.get(f"/locate/{quote(evidence['locator'], safe='')}").json()
        assert located["text"] == evidence["text"] and evidence["quote"] in located["text"]


def test_openapi_and_the_page_are_served(server) -> None:
    client, _ = server
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/ask", "/ingest", "/papers/{paper_id}", "/locate/{locator}", "/toc/{paper_id}",
            "/health"} <= set(paths)
    page = client.get("/")
    assert page.status_code == 200 and 'id="question"' in page.text
    assert client.get("/static/app.js").status_code == 200


def test_uploaded_pdf_is_stored_inside_the_root_and_becomes_searchable(server, shared_data: Path) -> None:
    client, settings = server
    pdf = shared_data / "litqa2" / "pdfs" / UPLOAD_PDF
    with open_store(settings) as store:
        before = set(store.paper_ids())
    with pdf.open("rb") as handle:
        response = client.post("/ingest", files=[("files", ("upload.pdf", handle, "application/pdf"))])
    assert response.status_code == 200, response.text
    (outcome,) = response.json()["files"]
    assert outcome == {**outcome, "status": "ok", "path": "uploads/upload.pdf", "papers_added": 1}
    stored = Path(settings.store.home) / "files" / "uploads" / "upload.pdf"
    assert stored.read_bytes() == pdf.read_bytes()
    with open_store(settings) as store:
        (new_id,) = set(store.paper_ids()) - before
        title = store.get_paper(new_id).title
    ranking = client.get("/search", params={"q": title, "k": 1}).json()
    assert ranking["candidates"][0]["paper_id"] == new_id


def test_a_folder_inside_the_storage_root_is_ingested(server, shared_data: Path) -> None:
    client, settings = server
    folder = Path(settings.store.home) / "files" / "batch"
    folder.mkdir(parents=True)
    shutil.copy(shared_data / "litqa2" / "pdfs" / PDFS[0], folder / PDFS[0])
    papers = client.get("/health").json()["corpus"]["papers"]
    response = client.post("/ingest", data={"folder": "batch"})
    assert response.status_code == 200, response.text
    (outcome,) = response.json()["files"]
    assert outcome["path"] == f"batch/{PDFS[0]}" and outcome["status"] == "ok"
    assert client.get("/health").json()["corpus"]["papers"] == papers  # the same paper again: stored once
    assert client.post("/ingest", data={"folder": "missing"}).status_code == 404


def test_the_default_ask_opens_the_read_pipeline_once_and_closes_it_with_the_service(tmp_path, monkeypatch) -> None:
    from contextlib import contextmanager

    import strata.pipeline.ask
    from strata.serve.service import CorpusService

    opened: list[str] = []

    class Pipeline:
        def ask(self, question, *, options, answer_format, on_event):
            return question

    @contextmanager
    def open_pipeline(settings):
        opened.append("open")
        yield Pipeline()
        opened.append("closed")

    monkeypatch.setattr(strata.pipeline.ask, "open_pipeline", open_pipeline)
    service = CorpusService(corpus_settings(tmp_path / "home"))
    assert [service.ask("first?"), service.ask("second?")] == ["first?", "second?"]
    assert opened == ["open"]
    service.close()
    assert opened == ["open", "closed"]


def test_search_applies_rerank_method_unless_it_needs_the_llm(tmp_path_factory, shared_data: Path) -> None:
    from strata.encoders.embedder import resolve_model_path
    from strata.encoders.cross_encoder import BASE_MODEL
    from strata.serve.service import CorpusService

    home = build_corpus(tmp_path_factory.getbasetemp(), shared_data)
    query = "KCNJ11 loss-of-function mutation sulfonylurea diabetes"
    # An untrained head on the packaged MiniLM: the order may change, the papers may not.
    cross_encoder = corpus_settings(home, **{"rerank.method": "cross-encoder",
                                             "rerank.cross_encoder_model": str(resolve_model_path(BASE_MODEL))})
    with closing(CorpusService(cross_encoder)) as service:
        first_stage = service.corpus.searcher.search(query, k=3)
        reranked = service.search(query, 3)
    assert reranked.method == f"{first_stage.method}>cross-encoder"
    assert sorted(reranked.paper_ids) == sorted(first_stage.paper_ids) and len(reranked.paper_ids) >= 2
    with closing(CorpusService(corpus_settings(home, **{"rerank.method": "corank"}))) as service:
        assert service.search(query, 3).method == first_stage.method  # no LLM held per search: first-stage order


def test_an_abandoned_ask_stops_at_its_next_stage_instead_of_running_on(tmp_path_factory, shared_data: Path) -> None:
    stages, stopped = [], threading.Event()

    def slow_ask(question, settings, *, options=None, answer_format="text", on_event=None):
        try:
            for step in range(300):  # 30 s if nothing stops it
                on_event(StageEvent(stage="read", status="started", detail=f"paper {step}", elapsed_s=0.0))
                stages.append(step)
                time.sleep(0.1)
        finally:
            stopped.set()
        return fake_ask(question, settings, options=options, answer_format=answer_format)

    settings = corpus_settings(build_corpus(tmp_path_factory.getbasetemp(), shared_data))
    with background_server(create_app(settings, ask_fn=slow_ask)) as url, httpx.Client(base_url=url) as client:
        with client.stream("POST", "/ask", json={"question": QUESTION}) as response:
            assert next(response.iter_lines()).startswith("event: stage")  # the worker is running
        assert stopped.wait(10)
    assert 1 <= len(stages) < 100


def test_search_json_is_the_rankings_own_and_concurrent_searches_agree(server) -> None:
    """/search answers with the Ranking's JSON as the searcher builds it (no second validation on the way out), the
    OpenAPI schema still names the model, and searches sent together get the answers they get one by one."""
    from concurrent.futures import ThreadPoolExecutor

    from strata.corpus import Corpus

    client, settings = server
    queries = ["KCNJ11 sulfonylurea diabetes", "neonatal diabetes mutation", "potassium channel", "insulin secretion"]
    with Corpus.open(settings) as corpus:
        expected = [corpus.searcher.search(q, k=3, method="hybrid").model_dump(mode="json") for q in queries]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda q: client.get("/search", params={"q": q, "k": 3}), queries * 4))
    assert all(answer.status_code == 200 for answer in answers)
    assert [answer.json() for answer in answers] == expected * 4
    assert answers[0].headers["content-type"] == "application/json"
    schema = client.get("/openapi.json").json()["paths"]["/search"]["get"]["responses"]["200"]
    assert schema["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Ranking"}
    assert client.get("/search", params={"q": "x", "method": "dense"}).status_code == 400  # a BM25-only corpus


def test_searches_on_threads_answer_as_searches_in_the_event_loop(server) -> None:
    """`serve.search_in_event_loop` (the default) searches in the event loop; off, each search goes to one of
    `serve.search_threads` threads. The answers are the same, and faiss searches with one OpenMP thread."""
    import faiss

    client, settings = server
    assert settings.serve.search_in_event_loop
    threaded = settings.model_copy(update={"serve": settings.serve.model_copy(update={"search_in_event_loop": False})})
    queries = ["KCNJ11 sulfonylurea diabetes", "potassium channel", "insulin secretion"]
    with (
        background_server(create_app(threaded, ask_fn=fake_ask)) as url,
        httpx.Client(base_url=url, timeout=60) as other,
    ):
        for query in queries:
            assert other.get("/search", params={"q": query, "k": 3}).json() == \
                client.get("/search", params={"q": query, "k": 3}).json()
    assert faiss.omp_get_max_threads() == 1


def test_the_access_log_is_off_unless_asked_for(tmp_path: Path, monkeypatch) -> None:
    from strata.serve import app as app_module

    runs: list[dict] = []
    monkeypatch.setattr(app_module.uvicorn, "run", lambda app, **options: runs.append(options))
    monkeypatch.setattr(app_module, "create_app", lambda settings, ask_fn=None: None)
    app_module.serve(corpus_settings(tmp_path))
    app_module.serve(corpus_settings(tmp_path, **{"serve.access_log": "true"}))
    assert [run["access_log"] for run in runs] == [False, True]


CROWD = 50  # more requests queued for one lock than FastAPI's thread pool has threads (40)


class Arrivals:
    """The app, counting the requests to paths starting with `prefix` that reached it."""

    def __init__(self, app, prefix: str) -> None:
        self.app, self.prefix, self.count = app, prefix, 0
        self.changed = threading.Condition()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefix):
            with self.changed:
                self.count += 1
                self.changed.notify_all()
        await self.app(scope, receive, send)

    def wait_for(self, count: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.count >= count, timeout=60)


def _held_ingest(monkeypatch, running: threading.Event, release: threading.Event, home: Path) -> dict:
    import strata.pipeline.ingest
    from strata.pipeline.ingest import IngestReport

    def ingest(paths, settings, progress=None, features=False):
        running.set()
        release.wait(60)
        return IngestReport(files=[], parse_seconds=0, index_seconds=0, resolved_references=0)

    monkeypatch.setattr(strata.pipeline.ingest, "ingest", ingest)
    (home / "files" / "batch").mkdir(parents=True)
    return {"method": "POST", "url": "/ingest", "data": {"folder": "batch"}}


def _held_toc_question(monkeypatch, running: threading.Event, release: threading.Event, home: Path) -> dict:
    import strata.toc.query as toc_query
    from strata.documents.model import Paper

    def answer_from_toc(settings, paper, question, k=None):
        running.set()
        release.wait(60)
        raise ValueError("its ToC has no leaves to answer with")

    monkeypatch.setattr(toc_query, "answer_from_toc", answer_from_toc)
    with open_store(corpus_settings(home)) as store:
        store.put_paper(Paper(id="p1", title="A paper", source_format="test", text="Some text."), "sha")
    return {"method": "GET", "url": "/toc/p1", "params": {"q": "What was measured?"}}


@pytest.mark.parametrize("hold", [_held_ingest, _held_toc_question], ids=["ingest", "toc-question"])
def test_requests_queued_behind_a_held_lock_leave_the_threads_to_other_requests(tmp_path, monkeypatch, hold) -> None:
    """While one request holds the ingest lock or the LLM slot and many more of its kind queue for it, an unrelated
    /papers request is answered at once (45 queued ingests once held every pool thread: /papers waited 16 s)."""
    from concurrent.futures import ThreadPoolExecutor

    running, release = threading.Event(), threading.Event()
    home = tmp_path / "home"
    request = hold(monkeypatch, running, release, home)
    app = Arrivals(create_app(corpus_settings(home), ask_fn=fake_ask), request["url"])
    with (
        background_server(app) as url,
        httpx.Client(base_url=url, timeout=120, limits=httpx.Limits(max_connections=CROWD + 5)) as client,
        ThreadPoolExecutor(CROWD) as pool,
    ):
        replies = [pool.submit(client.request, **request) for _ in range(CROWD)]
        try:
            assert running.wait(60) and app.wait_for(CROWD)
            # Not answered until the lock is released: the old code's 40 pool threads all waited on it.
            assert client.get("/papers/missing", timeout=20).status_code == 404
        finally:
            release.set()
        assert {reply.result().status_code for reply in replies} == {200 if request["url"] == "/ingest" else 400}


def test_locate_reads_the_papers_text_once(tmp_path) -> None:
    """/locate cuts the span and its context from one read of the paper's text (it once read the text twice)."""
    import re

    from strata.documents.builder import PaperBuilder
    from strata.serve.service import CorpusService

    builder = PaperBuilder("p1", "test")
    builder.open_section("Results", level=1, page=2)
    builder.add_block("Before the span. The measured value was 42 mg. After the span.", page=2)
    settings = corpus_settings(tmp_path / "home")
    with open_store(settings) as store:
        store.put_paper(builder.build(title="A paper"), "sha")
    reads: list[str] = []
    with closing(CorpusService(settings)) as service:
        service.corpus.store._db.set_trace_callback(
            lambda sql: reads.append(sql) if re.search(r"^SELECT\b.*\btext\b.*\bFROM papers\b", sql, re.S) else None
        )
        paper_text = service.corpus.store.paper_text("p1")
        start = paper_text.index("The measured")
        reads.clear()
        located = service.locate(f"p1#{start}-{start + 29}", context=7)
    assert (located.text, located.before, located.after) == ("The measured value was 42 mg.", " span. ", " After ")
    assert located.section_path == ("Results",) and located.page == 2 and located.title == "A paper"
    assert len(reads) == 1, reads


def test_an_ingest_loads_the_new_indices_on_its_own_thread_not_the_next_searchs(tmp_path: Path) -> None:
    # The next search ran on the event loop and loaded them there, stalling every other request meanwhile.
    import io

    from strata.serve.service import CorpusService, Upload

    settings = corpus_settings(tmp_path / "home")
    body = b'{"_id": "a", "title": "Zinc study", "text": "Zinc lozenges shortened colds."}\n'
    with closing(CorpusService(settings)) as service:
        service.ingest_uploads([Upload(name="corpus.jsonl", content=io.BytesIO(body), size=len(body))])
        assert service.corpus.index.bm25._index is not None  # opened by the ingest, before any search
