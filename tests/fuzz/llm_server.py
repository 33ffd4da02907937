"""A misbehaving OpenAI-compatible server on 127.0.0.1: each request gets the next fault of a script."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = (
    "ok", "hang", "http-500", "http-503", "truncated-body", "not-json", "no-choices",
    "truncated-answer", "wrong-schema", "endless", "huge",
)  # fmt: skip
GOOD_ANSWER = json.dumps({"title": "T", "year": 2022, "method": "M", "datasets": ["D"]})


def chat(content: str) -> bytes:
    answer = {"choices": [{"message": {"content": content}}], "usage": {"prompt_tokens": 11, "completion_tokens": 5}}
    return json.dumps(answer).encode()


class HostileLLMServer:
    """Serves `script` in order (the last fault repeats); counts requests."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.requests = 0
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                fault = server.script[min(server.requests, len(server.script) - 1)]
                server.requests += 1
                server.answer(self, fault)

            def log_message(self, *args) -> None:
                pass

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, handler: BaseHTTPRequestHandler, fault: str) -> None:
        if fault == "hang":
            self._stop.wait(60)
            return
        if fault in ("endless", "huge"):
            self._stream(handler, delay_s=0.05 if fault == "endless" else 0.0)
            return
        status, body = {
            "ok": (200, chat(GOOD_ANSWER)),
            "http-500": (500, b"internal error"),
            "http-503": (503, b"overloaded"),
            "not-json": (200, b'{"choices": [{"message": {"content": "{\\"ti'),
            "no-choices": (200, b'{"error": "model crashed"}'),
            "truncated-answer": (200, chat('{"title": "T", "year": 20')),
            "wrong-schema": (200, chat('{"answer": "yes", "confidence": 0.9}')),
            "truncated-body": (200, chat(GOOD_ANSWER)),
        }[fault]
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        # truncated-body announces more than it sends, then hangs up mid-answer.
        handler.send_header("Content-Length", str(len(body) * (2 if fault == "truncated-body" else 1)))
        handler.end_headers()
        handler.wfile.write(body)
        if fault == "truncated-body":
            handler.wfile.flush()
            handler.connection.shutdown(socket.SHUT_RDWR)

    def _stream(self, handler: BaseHTTPRequestHandler, delay_s: float) -> None:
        """A chunked answer that never ends: the start of a chat answer, then the same tokens forever."""
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        piece = b' "and so on and so on' * (1 if delay_s else 5000)
        try:
            handler.wfile.write(b"%x\r\n%s\r\n" % (40, b'{"choices": [{"message": {"content": "x'.ljust(40)))
            while not self._stop.is_set():
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                handler.wfile.flush()
                time.sleep(delay_s)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # clients hanging up on a hostile answer is the expected outcome, not worth a traceback


def refused_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
