"""The OpenAI-compatible backend against a real llama-cpp-python server (SmolLM2) and a scripted fake server."""

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from process_support import stop_process

from strata.config import LLMSettings
from strata.llm import (
    LLMError,
    LLMOutputError,
    LLMRequestError,
    LLMUnavailableError,
    Prompt,
    ScoringNotSupportedError,
    Trace,
    make_client,
)
from strata.llm.check import CHECK_PASSAGE, PaperFacts, check_prompts
from strata.llm.packaged import resolve_model

SMOL = "packaged:smollm2-135m"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(model_path: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "False",
    ]  # fmt: skip
    # Output goes to a file: an unread pipe fills up and blocks the server.
    with log.open("w") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return process, base_url
        except httpx.TransportError:
            time.sleep(0.3)
    process.kill()
    pytest.fail("llama_cpp.server did not answer within 120 s")


@pytest.fixture(scope="module")
def smol_path(tmp_path_factory) -> Path:
    return resolve_model(SMOL, tmp_path_factory.mktemp("models")).path


@pytest.fixture(scope="module")
def server(smol_path, tmp_path_factory):
    process, base_url = start_server(smol_path, tmp_path_factory.mktemp("server") / "server.log")
    yield base_url
    stop_process(process)


def http_settings(base_url: str, **changes) -> LLMSettings:
    values = {"backend": "openai", "base_url": base_url, "model": "smollm2", "cache": False, "max_retries": 2,
              "backoff_s": 0.2, "timeout_s": 60} | changes  # fmt: skip
    return LLMSettings(**values)


CHECK = check_prompts().render("check_extract", passage=CHECK_PASSAGE)


# A real server


def test_real_server_returns_json_valid_for_the_schema(server):
    trace = Trace()
    with make_client(http_settings(server)) as client:
        facts = client.complete(CHECK, trace=trace)
    assert isinstance(facts, PaperFacts)
    assert trace.calls[-1].ok and trace.calls[-1].tokens_in > 100 and trace.calls[-1].tokens_out > 5


def test_real_server_scores_continuations_like_the_embedded_backend(server, smol_path, tmp_path):
    toc = Prompt(name="toc", system="You pick sections.", user="Which section describes the datasets?")
    continuations = ["4 Experiments", "Datasets and collections", "zebra umbrella"]
    with make_client(http_settings(server)) as client:
        remote = client.score(toc, continuations)
    with make_client(LLMSettings(model=SMOL, model_dir=tmp_path, cache=False)) as client:
        local = client.score(toc, continuations)
    assert [score.n_tokens for score in remote] == [score.n_tokens for score in local]
    assert [score.logprob for score in remote] == pytest.approx([score.logprob for score in local], abs=1e-3)


def test_killing_the_server_mid_run_gives_a_clear_error_within_bounded_time(smol_path, tmp_path):
    process, base_url = start_server(smol_path, tmp_path / "server.log")
    settings = http_settings(base_url, max_retries=2, backoff_s=0.2, timeout_s=10)
    with make_client(settings) as client:
        client.complete(CHECK, max_tokens=60)
        threading.Timer(0.5, process.kill).start()
        started = time.monotonic()
        with pytest.raises(LLMUnavailableError, match="failed 3 times") as error:
            for _ in range(50):  # keeps asking; the kill lands during one of these requests
                client.complete(CHECK, max_tokens=60)
    process.wait()
    assert time.monotonic() - started < 30  # at most one in-flight request + 3 refused connects + 0.6 s backoff
    assert base_url in str(error.value)


# A scripted fake server: garbage, errors and format negotiation


class FakeServer:
    """Answers POSTs from a script of (status, body) or (status, body, headers), records what it was sent."""

    def __init__(self, script: list[tuple], delay_s: float = 0.0) -> None:
        self.script, self.requests, self.delay_s = list(script), [], delay_s
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, body, dict(self.headers)))
                time.sleep(fake.delay_s)
                status, answer, *headers = fake.script.pop(0) if fake.script else (500, "script exhausted")
                payload = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def fake_server():
    servers = []

    def start(script, delay_s=0.0):
        servers.append(FakeServer(script, delay_s))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def chat(content: str) -> dict:
    return {"choices": [{"message": {"content": content}}], "usage": {"prompt_tokens": 11, "completion_tokens": 5}}


GOOD = json.dumps({"title": "T", "year": 2022, "method": "M", "datasets": ["D"]})


def test_garbage_around_the_json_is_repaired_in_one_request(fake_server):
    server = fake_server([(200, chat(f"<think>hmm</think>Sure!\n```json\n{GOOD}\n```\nAnything else?"))])
    with make_client(http_settings(server.base_url)) as client:
        assert client.complete(CHECK).method == "M"
    assert len(server.requests) == 1


def test_unrepairable_garbage_is_re_asked_once_then_raises_with_the_raw_text(fake_server):
    server = fake_server([(200, chat("I am a teapot")), (200, chat('{"title": 3}'))])
    with make_client(http_settings(server.base_url)) as client, pytest.raises(LLMOutputError) as error:
        client.complete(CHECK)
    assert error.value.raw_text == '{"title": 3}' and "year: Field required" in str(error.value)
    retry_user = server.requests[1][1]["messages"][1]["content"]
    assert retry_user.startswith(CHECK.user) and "no complete JSON object" in retry_user
    assert [message["role"] for message in server.requests[1][1]["messages"]] == ["system", "user"]


def test_server_errors_are_retried_with_backoff_and_recorded(fake_server):
    server = fake_server([(503, "busy"), (429, "slow down"), (200, chat(GOOD))])
    trace = Trace()
    started = time.monotonic()
    with make_client(http_settings(server.base_url, backoff_s=0.2)) as client:
        client.complete(CHECK, trace=trace)
    assert time.monotonic() - started >= 0.6  # 0.2 + 0.4 s of backoff
    assert trace.calls[0].transport_retries == 2 and trace.summary().retries == 2


def test_exhausted_retries_name_the_url_and_the_last_problem(fake_server):
    server = fake_server([(502, "bad gateway")] * 3)
    with make_client(http_settings(server.base_url)) as client, pytest.raises(LLMUnavailableError) as error:
        client.complete(CHECK)
    assert "failed 3 times" in str(error.value) and "HTTP 502: bad gateway" in str(error.value)


def test_a_slow_server_times_out_within_bounded_time(fake_server):
    server = fake_server([(200, chat(GOOD))] * 3, delay_s=2.0)
    started = time.monotonic()
    settings = http_settings(server.base_url, timeout_s=0.3, max_retries=1)
    with make_client(settings) as client, pytest.raises(LLMUnavailableError, match="ReadTimeout"):
        client.complete(CHECK)
    assert time.monotonic() - started < 3


def test_client_errors_are_not_retried(fake_server):
    server = fake_server([(401, "bad key")])
    settings = http_settings(server.base_url, response_format="none")
    with make_client(settings) as client, pytest.raises(LLMRequestError, match="HTTP 401: bad key"):
        client.complete(CHECK)
    assert len(server.requests) == 1


def test_auto_response_format_falls_back_once_and_remembers(fake_server, monkeypatch):
    monkeypatch.setenv("STRATA_TEST_KEY", "sk-fake")
    server = fake_server([(422, "unknown type json_schema"), (200, chat(GOOD)), (200, chat(GOOD))])
    with make_client(http_settings(server.base_url, api_key_env="STRATA_TEST_KEY")) as client:
        client.complete(CHECK)
        client.complete(CHECK.model_copy(update={"user": "another passage"}))
    formats = [body["response_format"]["type"] for _, body, _ in server.requests]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert server.requests[1][1]["response_format"]["schema"] == PaperFacts.model_json_schema()
    assert server.requests[0][2]["Authorization"] == "Bearer sk-fake"


def test_a_schema_one_request_cannot_use_falls_back_for_that_request_alone(fake_server):
    # vLLM rejects some schemas its grammar engine cannot compile: that says nothing of the response_format itself.
    server = fake_server([(400, "features not supported by xgrammar"), (200, chat(GOOD)), (200, chat(GOOD))])
    with make_client(http_settings(server.base_url)) as client:
        client.complete(CHECK)
        client.complete(CHECK.model_copy(update={"user": "another passage"}))
    formats = [body["response_format"]["type"] for _, body, _ in server.requests]
    assert formats == ["json_schema", "json_object", "json_schema"]
    assert '"datasets"' in server.requests[1][1]["messages"][0]["content"]  # json_object: the schema in words too


def test_an_error_every_format_gets_leaves_the_response_format_for_later_requests(fake_server):
    too_long = (400, "This model's maximum context length is 2048 tokens")
    server = fake_server([too_long] * 3 + [(200, chat(GOOD))])
    with make_client(http_settings(server.base_url)) as client:
        with pytest.raises(LLMRequestError, match="maximum context length"):
            client.complete(CHECK)
        client.complete(CHECK.model_copy(update={"user": "a shorter passage"}))
    formats = [body.get("response_format", {}).get("type", "none") for _, body, _ in server.requests]
    assert formats == ["json_schema", "json_object", "none", "json_schema"]


def test_credentials_in_the_base_url_stay_out_of_errors_and_traces(fake_server):
    server = fake_server([(401, "bad key")])
    url = server.base_url.replace("http://", "http://user:sk-secret@")
    trace = Trace()
    with make_client(http_settings(url, response_format="none")) as client:
        with pytest.raises(LLMRequestError, match="HTTP 401") as error:
            client.complete(CHECK, trace=trace)
    assert "sk-secret" not in str(error.value) and "sk-secret" not in str(trace.calls[0].error)
    assert server.requests[0][2]["Authorization"].startswith("Basic ")  # the credentials still authenticate


def test_a_redirect_is_reported_at_once_with_its_target(fake_server):
    server = fake_server([(308, "", {"Location": "https://llm.example.org/v1/chat/completions"})] * 3)
    with make_client(http_settings(server.base_url)) as client:
        with pytest.raises(LLMRequestError, match="redirect.*https://llm.example.org/v1/chat/completions"):
            client.complete(CHECK)
    assert len(server.requests) == 1


def test_a_base_url_without_scheme_is_refused_before_any_request():
    with pytest.raises(LLMError, match="llm.base_url '127.0.0.1:8080/v1/' must start with http://"):
        make_client(http_settings("127.0.0.1:8080/v1"))


def test_without_response_format_the_schema_is_spelled_out_in_the_system_message(fake_server):
    server = fake_server([(200, chat(GOOD))])
    with make_client(http_settings(server.base_url, response_format="none")) as client:
        client.complete(CHECK)
    body = server.requests[0][1]
    assert "response_format" not in body and '"datasets"' in body["messages"][0]["content"]


def test_scoring_on_a_server_without_prompt_logprobs_is_not_supported(fake_server):
    server = fake_server([
        (200, {"choices": [{"text": "x", "logprobs": None}]}),
        (404, "no such route"),
        (500, "logprobs is not supported for models created with logits_all=False"),
    ])  # fmt: skip
    with make_client(http_settings(server.base_url)) as client:
        with pytest.raises(ScoringNotSupportedError, match="echo and logprobs"):
            client.score(CHECK, ["a"])
        with pytest.raises(ScoringNotSupportedError, match="HTTP 404"):
            client.score(CHECK, ["a"])
        with pytest.raises(ScoringNotSupportedError, match="logits_all=False"):
            client.score(CHECK, ["a"])
    assert len(server.requests) == 3  # none of these is retried
