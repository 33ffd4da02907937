"""POST /ask on a real uvicorn server running the real Read pipeline (no fake ask) with the tiny packaged model over
the two-PDF LitQA2 corpus. The model's judgement is not asserted (135M); the stream, the grounding and the trace are."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
from serve_support import MC_OPTIONS, MC_PAPER, MC_QUESTION, TINY_PIPELINE, build_corpus, corpus_settings, sse_events

from strata.documents.model import Locator
from strata.read.validate import normalized
from strata.serve.app import background_server, create_app
from strata.store import open_store

PIPELINE_STAGES = ["retrieve", "read", "synthesize", "validate"]


def test_ask_runs_the_real_pipeline_and_cites_only_stored_chunks(tmp_path_factory, shared_data: Path) -> None:
    settings = corpus_settings(build_corpus(tmp_path_factory.getbasetemp(), shared_data), **TINY_PIPELINE)
    with background_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=300) as client:
        response = client.post("/ask", json={"question": MC_QUESTION, "options": MC_OPTIONS, "format": "mc"})
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
        names = [name for name, _ in events]
        assert names[-1] == "result", events[-1]
        assert set(names[:-1]) == {"stage"}
        result = events[-1][1]
        assert not result["partial"], result["error"]

        # Streamed as they happened, and the same events the result records.
        stages = [data for _, data in events[:-1]]
        assert stages == result["events"]
        first_seen = list(dict.fromkeys(stage["stage"] for stage in stages))
        assert [stage for stage in first_seen if stage in PIPELINE_STAGES] == PIPELINE_STAGES
        for name in PIPELINE_STAGES:
            statuses = [stage["status"] for stage in stages if stage["stage"] == name]
            assert statuses[0] == "started" and statuses[-1] == "done", (name, statuses)
        assert stages[-1]["stage"] == "validate" and stages[-1]["status"] == "done"
        assert [stage["elapsed_s"] for stage in stages] == sorted(stage["elapsed_s"] for stage in stages)

        # The real LLM ran: one call per paper read at least, none served from a cache.
        calls = result["trace"]["calls"]
        assert len(calls) >= len(result["readings"]) >= 1 and not any(call["cache_hit"] for call in calls)
        assert 1 <= len(result["candidates"]["candidates"]) <= 2 and len(result["readings"]) <= 2

        answer = result["answer"]
        assert answer["format"] == "mc"
        if answer["answerable"] and answer["supported"]:
            assert answer["choice"] in MC_OPTIONS
        else:
            assert answer["choice"] is None
        # Every paper is accepted (TINY_PIPELINE), so there is evidence to check, and it is the gold paper's.
        assert answer["evidence"] and {item["paper_id"] for item in answer["evidence"]} == {MC_PAPER}
        cited = {number for claim in answer["claims"] for number in claim["citations"]}
        assert cited == {item["number"] for item in answer["evidence"]}

        with open_store(settings) as store:
            for item in answer["evidence"]:
                chunks = {str(chunk.locator): chunk for chunk in store.get_paper(item["paper_id"]).chunks}
                assert item["locator"] in chunks, f"{item['locator']} is not a stored chunk"
                assert store.locate(Locator.parse(item["locator"]))[1] == item["text"]
                located = client.get(f"/locate/{quote(item['locator'], safe='')}")
                assert located.status_code == 200 and located.json()["text"] == item["text"]
                assert item["quote"] and normalized(item["quote"]) in normalized(item["text"])


def test_two_first_questions_at_once_open_one_pipeline(monkeypatch) -> None:
    import threading
    import time
    from contextlib import contextmanager

    import strata.pipeline.ask as ask_module
    from strata.config import Settings
    from strata.serve.service import ResidentPipeline

    opened: list[int] = []

    class Answers:
        def ask(self, question, **_):
            return question

    @contextmanager
    def slow_open(settings):
        opened.append(1)
        time.sleep(0.3)  # loading a model: long enough for the second question to arrive meanwhile
        yield Answers()

    monkeypatch.setattr(ask_module, "open_pipeline", slow_open)
    resident = ResidentPipeline()
    answers: list[str] = []
    threads = [threading.Thread(target=lambda q=q: answers.append(resident(q, Settings()))) for q in ("a?", "b?")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    resident.close()
    assert len(opened) == 1 and sorted(answers) == ["a?", "b?"]
