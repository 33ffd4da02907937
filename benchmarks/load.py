"""Load test of the HTTP API on loopback: N concurrent /search clients for a fixed time against `strata serve`.

    python benchmarks/load.py --home .strata/litqa2 [--clients 50] [--seconds 30] [--method hybrid] [--workers 2]

The server runs as its own process (`strata serve` on 127.0.0.1 and a free port), so that it and the clients do
not share one interpreter lock (`--workers N`: serve.workers, N server processes; the load is measured once all have
loaded). The clients run on the same machine, so they share its cores with the server: each run records the CPU
milliseconds per request that each spent, and the 1-minute load average (other jobs on the machine move req/s).
Queries are the LitQA2 questions, cycled (`--queries`: another JSON-lines file, e.g. SciFact's claims, which
repeat far less; `--set serve.query_cache=0` turns the server's query-vector cache off; `--warmup S`: S seconds
of load before the measured ones, so one-time costs such as first embeddings are not counted; the measured run starts
again at the first query; `--repeats N`: N measured runs, each with its own server, and the row holds their
median, since one run on 2 shared cores moves by a quarter). Bounded: the clients stop at the deadline,
the server is stopped at the end. Writes benchmarks/results/load.json (strata.eval.results; experiments of other
names already in the file are kept, so a `--name 'hybrid (before)'` run stays beside the current one) and prints
a table. The clients speak plain keep-alive HTTP/1.1 (`--client httpx` for the AsyncClient of the first runs, which
spent more CPU per request than the server did, so on 2 cores it measured itself).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlencode

import httpx
import numpy as np
import psutil
import uvloop

from strata.eval.results import DatasetRef, Experiment, merged, new_result, repo_relative, update_result

ROOT = Path(__file__).resolve().parent
QUESTIONS = ROOT.parent.parent / "shared" / "data" / "litqa2" / "questions.jsonl"
STARTUP_TIMEOUT_S = 300  # the server loads the query encoder before it answers


def read_queries(path: Path) -> list[str]:
    """The query texts of a JSON-lines file: LitQA2's `question`, or a BEIR queries file's `text`."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    texts = [row.get("question") or row.get("text") for row in rows]
    if not texts or not all(isinstance(text, str) and text for text in texts):
        raise SystemExit(f"{path}: expected JSON lines each with a 'question' or 'text' string")
    return texts  # checked above: all str


def setting(text: str) -> str:
    """A `--set` value: KEY=VALUE."""
    if "=" not in text or not text.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. serve.query_cache=0), got {text!r}")
    return text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(home: Path, port: int, workers: int = 1, settings: Sequence[str] = ()) -> subprocess.Popen:
    """`strata serve` with these extra `KEY=VALUE` settings (`--KEY VALUE` on its command line)."""
    command = [sys.executable, "-m", "strata.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--store.home", str(home), "--serve.workers", str(workers)]
    for setting in settings:
        key, _, value = setting.partition("=")
        command += [f"--{key}", value]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_until_healthy(url: str, server: subprocess.Popen) -> dict:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}: {server.stderr.read()[-2000:]}")
        try:
            return httpx.get(f"{url}/health", timeout=5).json()
        except httpx.TransportError:
            time.sleep(0.5)
    raise TimeoutError(f"the server at {url} was not healthy within {STARTUP_TIMEOUT_S}s")


def wait_for_workers(server: subprocess.Popen, workers: int) -> None:
    """Block until each of the server's `workers` processes has logged that its app started (uvicorn's line), then
    keep draining its log so that the pipe never fills."""
    started = threading.Semaphore(0)

    def drain() -> None:
        for line in server.stderr:
            if "Application startup complete" in line:
                started.release()

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    for _ in range(workers):
        if not started.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"not all {workers} workers started within {STARTUP_TIMEOUT_S}s")


async def run_clients(url: str, queries: list[str], clients: int, seconds: float, method: str, k: int,
                      client: str = "raw") -> dict:
    if client == "raw":
        return await run_raw_clients(url, queries, clients, seconds, method, k)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    methods: set[str] = set()
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client_loop(worker: int, http: httpx.AsyncClient) -> None:
        turn = worker
        while time.monotonic() < deadline:
            query = queries[turn % len(queries)]
            turn += clients
            started = time.perf_counter()
            try:
                response = await http.get("/search", params={"q": query, "k": k, "method": method})
                if response.status_code != 200:
                    errors[f"HTTP {response.status_code}"] = errors.get(f"HTTP {response.status_code}", 0) + 1
                    continue
                methods.add(response.json()["method"])
            except httpx.HTTPError as error:
                errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
                continue
            latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        await asyncio.gather(*(client_loop(worker, http) for worker in range(clients)))
    elapsed = time.monotonic() - started
    return summary(latencies, errors, methods, elapsed)


async def run_raw_clients(url: str, queries: list[str], clients: int, seconds: float, method: str, k: int) -> dict:
    """The same loop as the httpx clients, over plain keep-alive HTTP/1.1 connections (one per client): httpx
    spent ~10x the server's CPU per request, so on 2 cores it, not the server, set the measured throughput."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    methods: set[str] = set()
    deadline = time.monotonic() + seconds
    requests = [
        f"GET /search?{urlencode({'q': query, 'k': k, 'method': method})} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        for query in queries
    ]

    def failed(kind: str) -> None:
        errors[kind] = errors.get(kind, 0) + 1

    async def client_loop(worker: int) -> None:
        turn = worker
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while time.monotonic() < deadline:
            request = requests[turn % len(requests)]
            turn += clients
            started = time.perf_counter()
            try:
                if connection is None:
                    connection = await asyncio.open_connection(host, int(port))
                reader, writer = connection
                writer.write(request)
                status, body = await asyncio.wait_for(read_response(reader), timeout=60)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as error:
                failed(type(error).__name__)
                if connection is not None:
                    connection[1].close()
                connection = None
                continue
            if status != 200:
                failed(f"HTTP {status}")
                continue
            # Every 50th body is parsed whole (a JSON ranking); the others give their method by a string search.
            methods.add(json.loads(body)["method"] if len(latencies) % 50 == 0 else _method_of(body))
            latencies.append(time.perf_counter() - started)
        if connection is not None:
            connection[1].close()

    started = time.monotonic()
    await asyncio.gather(*(client_loop(worker) for worker in range(clients)))
    elapsed = time.monotonic() - started
    return summary(latencies, errors, methods, elapsed)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 response with a Content-Length (what uvicorn sends for a JSON body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    length = next((int(value) for name, value in headers.items() if name.strip().lower() == "content-length"), None)
    if length is None:
        raise ValueError("a response without Content-Length")
    return status, await reader.readexactly(length)


def _method_of(body: bytes) -> str:
    start = body.index(b'"method":"') + len(b'"method":"')
    return body[start : body.index(b'"', start)].decode()


def cpu_seconds(process: psutil.Process, children: bool = False) -> float:
    """CPU time (user + system) `process`, and with `children` its live child processes, have used so far."""
    processes = [process, *(process.children(recursive=True) if children else [])]
    return sum(sum(p.cpu_times()[:2]) for p in processes)  # user + system


def metered(clients: Callable[[], dict], server: psutil.Process | None) -> dict:
    """`clients()`'s outcome, with the CPU milliseconds per answered request that the server's processes and this
    load generator spent meanwhile."""
    me = psutil.Process()
    server_before = cpu_seconds(server, children=True) if server else 0.0
    client_before = cpu_seconds(me)
    outcome = clients()
    requests = max(outcome["requests_ok"], 1)
    if server:
        server_spent = cpu_seconds(server, children=True) - server_before
        outcome["server_cpu_ms_per_request"] = round(1000 * server_spent / requests, 3)
    outcome["client_cpu_ms_per_request"] = round(1000 * (cpu_seconds(me) - client_before) / requests, 3)
    return outcome


def run_load(url: str, queries: list[str], args: argparse.Namespace, server: psutil.Process | None) -> dict:
    """The clients' outcome, metered, on uvloop (the server's loop too): on asyncio's own loop they spent ~30% more
    CPU per request, of the cores the server shares."""
    if args.warmup > 0:  # first requests load lazily what later ones reuse: not the steady state measured
        uvloop.run(run_clients(url, queries, args.clients, args.warmup, args.method, args.k, args.client))
    clients = run_clients(url, queries, args.clients, args.seconds, args.method, args.k, args.client)
    return metered(lambda: uvloop.run(clients), server)


def summary(latencies: list[float], errors: dict[str, int], methods: set[str], elapsed: float) -> dict:
    ms = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return {
        "requests_ok": len(latencies),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "elapsed_s": round(elapsed, 2),
        "throughput_rps": round(len(latencies) / elapsed, 2),
        "latency_ms": {name: round(float(np.percentile(ms, q)), 1) for name, q in
                       (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))},
        "search_methods_served": sorted(methods),
    }


def measure(args: argparse.Namespace, queries: list[str]) -> tuple[dict, dict]:
    """One measured run (a fresh server unless --url) and the server's /health."""
    if args.url:
        health = httpx.get(f"{args.url}/health", timeout=30).json()
        return run_load(args.url, queries, args, None), health
    url = f"http://127.0.0.1:{free_port()}"
    server = start_server(Path(args.home), int(url.rsplit(":", 1)[1]), args.workers, args.set)
    try:
        health = wait_until_healthy(url, server)
        if args.workers > 1:  # /health answered from one worker: wait until every worker has loaded
            wait_for_workers(server, args.workers)
        outcome = run_load(url, queries, args, psutil.Process(server.pid))
    finally:
        server.terminate()
        server.wait(timeout=30)
    outcome["load_average_1m"] = round(os.getloadavg()[0], 2)
    return outcome, health


def median_outcome(outcomes: list[dict]) -> dict:
    """The run of median throughput, its latencies replaced by the medians over all runs, errors summed over all:
    one run on a shared 2-core machine moves by a quarter, so a target is read on the median of several."""
    ranked = sorted(outcomes, key=lambda outcome: outcome["throughput_rps"])
    middle = dict(ranked[len(ranked) // 2])
    middle["throughput_rps"] = round(float(np.median([o["throughput_rps"] for o in outcomes])), 2)
    middle["latency_ms"] = {name: round(float(np.median([o["latency_ms"][name] for o in outcomes])), 1)
                            for name in middle["latency_ms"]}
    middle["errors"] = sum(o["errors"] for o in outcomes)
    middle["error_kinds"] = dict(sum((Counter(o["error_kinds"]) for o in outcomes), Counter()))
    return middle


def run_summary(outcome: dict) -> dict:
    """What the table shows of one of several runs."""
    return {"throughput_rps": outcome["throughput_rps"], "errors": outcome["errors"],
            **{f"latency_{name}_ms": value for name, value in outcome["latency_ms"].items()},
            "load_average_1m": outcome.get("load_average_1m")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=".strata/litqa2", help="store home to serve")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--method", choices=["bm25", "dense", "hybrid"], default="hybrid")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--output", default=str(ROOT / "results" / "load.json"))
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw",
                        help="raw: plain keep-alive HTTP/1.1 connections; httpx: the AsyncClient the first runs used "
                        "(it costs the machine more CPU than the server)")
    parser.add_argument("--name", help="experiment name (default: the method); a file keeps the experiments of "
                        "other names that earlier runs wrote, e.g. 'bm25 (before #22)' beside 'bm25'")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes (serve.workers)")
    parser.add_argument("--queries", default=str(QUESTIONS),
                        help="JSON-lines queries, cycled (LitQA2's 23 questions by default; a BEIR queries.jsonl, "
                        "e.g. SciFact's 1,109 claims, repeats far less)")
    parser.add_argument("--warmup", type=float, default=0.0,
                        help="seconds of the same load before the measured --seconds (not counted)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=setting,
                        help="a setting of the started server (repeatable), e.g. serve.query_cache=0 (every query "
                        "embedded: the questions repeat, so by default all but the first are cache hits) or "
                        "index.embedding.query_int8=true")
    parser.add_argument("--repeats", type=int, default=1,
                        help="measured runs, each with its own server; the row holds the median req/s and latencies "
                        "and every run's numbers")
    parser.add_argument("--url", help="load this already running server (e.g. one under a profiler) instead of "
                        "starting one; nothing is written unless --output is given explicitly")
    args = parser.parse_args()

    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.url and args.set:
        parser.error("--set configures the server load.py starts; it cannot change one already running (--url)")
    query_file = Path(args.queries).resolve()
    queries = read_queries(query_file)
    # LitQA2's folder holds questions.jsonl; a BEIR dataset's queries.jsonl sits in DATASET/beir/.
    dataset = query_file.parent.parent.name if query_file.parent.name == "beir" else query_file.parent.name
    runs = [measure(args, queries) for _ in range(args.repeats)]
    health = runs[-1][1]
    outcome = median_outcome([outcome for outcome, _ in runs])
    latency = outcome["latency_ms"]
    run = Experiment(
        name=args.name or args.method, method=args.method, dataset=dataset, queries=len(queries),
        metrics={name: outcome[name] for name in ("requests_ok", "errors", "throughput_rps")},
        cost={"elapsed_s": outcome["elapsed_s"], **{f"latency_{name}_ms": value for name, value in latency.items()},
              **{name: value for name, value in outcome.items() if name.endswith("_cpu_ms_per_request")}},
        details={**{name: outcome[name] for name in ("error_kinds", "search_methods_served")},
                 "load_average_1m": round(os.getloadavg()[0], 2), "workers": args.workers,
                 "warmup_s": args.warmup, "settings": args.set, "repeats": args.repeats,
                 "runs": [run_summary(one) for one, _ in runs]},
    )  # fmt: skip
    result = new_result(
        "benchmarks/load.py",
        [run],
        datasets=[DatasetRef(name=dataset, path=repo_relative(query_file, ROOT.parent))],
        settings={"clients": args.clients, "seconds": args.seconds, "k": args.k, "client": args.client,
                  "workers": args.workers, "load_generator": "same machine (shares its cores with the server)"},
        details={"corpus": {"papers": health["corpus"]["papers"], "chunks": health["corpus"]["chunks"]}},
    )
    update_result(Path(args.output), lambda earlier: merged(earlier, result))
    header = ("run", "clients", "seconds", "errors", "req/s", "p50 ms", "p95 ms", "p99 ms")
    print(" ".join(f"{name:>8}" for name in header))
    labelled = [(str(number), one) for number, (one, _) in enumerate(runs, 1)] if args.repeats > 1 else []
    for label, one in [*labelled, ("median" if labelled else "1", outcome)]:
        ms = one["latency_ms"]
        print(f"{label:>8} {args.clients:>8} {args.seconds:>8.0f} {one['errors']:>8} {one['throughput_rps']:>8.1f} "
              f"{ms['p50']:>8.1f} {ms['p95']:>8.1f} {ms['p99']:>8.1f}")
    cpu = ", ".join(f"{name.removesuffix('_cpu_ms_per_request')} {value:.2f}" for name, value in outcome.items()
                    if name.endswith("_cpu_ms_per_request"))
    print(f"CPU ms per request: {cpu}; 1-minute load {os.getloadavg()[0]:.2f}")
    print(f"served: {', '.join(outcome['search_methods_served'])} over {health['corpus']['papers']} papers; "
          f"written to {args.output}")
    return 1 if outcome["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
