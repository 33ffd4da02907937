"""`serve.workers`: `strata serve` runs N uvicorn worker processes, each building the app from the parent's settings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from process_support import stop_process
from serve_support import QUESTION, build_corpus

from strata.config import Settings
from strata.serve.app import settings_json

STARTUP_TIMEOUT_S = 120


def test_worker_settings_round_trip_with_their_secrets() -> None:
    settings = Settings.load(overrides={"serve.token": "t" * 20, "serve.workers": "2", "llm.api_key": "k" * 8,
                                        "store.home": "/tmp/somewhere"})
    again = Settings.model_validate(json.loads(settings_json(settings)))
    assert again == settings
    assert again.serve.token is not None and again.serve.token.get_secret_value() == "t" * 20
    assert again.llm.api_key is not None and again.llm.api_key.get_secret_value() == "k" * 8


def test_two_workers_start_and_answer_search(tmp_path_factory, shared_data: Path) -> None:
    home = build_corpus(tmp_path_factory.getbasetemp(), shared_data)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "strata.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--store.home", str(home), "--index.dense", "false", "--parsing.pdf_tables", "false",
               "--serve.workers", "2"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    started = threading.Semaphore(0)

    def drain() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line)
            if "Application startup complete" in line:
                started.release()

    threading.Thread(target=drain, daemon=True).start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for _ in range(2):
            assert started.acquire(timeout=max(0.0, deadline - time.monotonic())), "".join(lines[-40:])
        pids = {line.rsplit("[", 1)[1].split("]")[0] for line in lines if "Started server process" in line}
        assert len(pids) == 2, "".join(lines)  # two processes, each with its app
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            rankings = [client.get("/search", params={"q": QUESTION, "k": 2, "method": "bm25"}) for _ in range(6)]
        assert all(response.status_code == 200 for response in rankings)
        assert len({tuple(c["paper_id"] for c in r.json()["candidates"]) for r in rankings}) == 1
        assert rankings[0].json()["candidates"]
    finally:
        stop_process(server, timeout=30)
