"""benchmarks/load.py meters the CPU per request that the server's processes and the load generator spend."""

from __future__ import annotations

import subprocess
import sys

import psutil

from benchmark_support import load_benchmark

SPIN_S = 0.3
# A stand-in server: a child process that burns SPIN_S of CPU when told to, says so, and stays alive to be measured.
SERVER = f"""
import subprocess, sys
spin = "import sys, time\\nsys.stdin.readline()\\nend = time.process_time() + {SPIN_S}\\n" \\
       "while time.process_time() < end: pass\\nprint('done', flush=True)\\nsys.stdin.readline()"
subprocess.run([sys.executable, "-c", spin])
"""




def test_a_load_run_meters_the_cpu_per_request_of_the_server_tree_and_of_the_clients() -> None:
    load = load_benchmark("load")
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        process = psutil.Process(server.pid)
        while not process.children():  # the CPU is burnt in the server's child, as in a uvicorn worker
            pass

        def clients() -> dict:
            server.stdin.write("go\n")
            server.stdin.flush()
            assert server.stdout.readline().strip() == "done"
            return {"requests_ok": 100}

        outcome = load.metered(clients, process)
    finally:
        server.stdin.write("stop\n")
        server.stdin.close()
        server.wait(timeout=30)
    assert outcome["requests_ok"] == 100
    # /proc counts CPU in ticks of 10 ms: the metered spin may fall short of SPIN_S by a tick or two (2.9 vs 3.0 seen)
    assert outcome["server_cpu_ms_per_request"] >= 1000 * (SPIN_S - 0.02) / 100
    assert 0 <= outcome["client_cpu_ms_per_request"] < outcome["server_cpu_ms_per_request"]


def test_repeated_runs_report_the_median_throughput_and_latencies_and_every_error() -> None:
    load = load_benchmark("load")

    def run(rps: float, p95: float, errors: dict[str, int]) -> dict:
        return {"throughput_rps": rps, "requests_ok": int(rps * 20), "errors": sum(errors.values()),
                "error_kinds": errors, "latency_ms": {"p50": p95 / 2, "p95": p95, "p99": p95 + 10}}

    runs = [run(480.0, 300.0, {}), run(520.0, 150.0, {"timeout": 2}), run(505.0, 180.0, {"timeout": 1, "500": 1})]
    median = load.median_outcome(runs)
    assert median["throughput_rps"] == 505.0 and median["requests_ok"] == 10100  # the median run's own count
    assert median["latency_ms"] == {"p50": 90.0, "p95": 180.0, "p99": 190.0}  # medians over runs, not one run's
    assert median["errors"] == 4 and median["error_kinds"] == {"timeout": 3, "500": 1}
    assert [one["throughput_rps"] for one in map(load.run_summary, runs)] == [480.0, 520.0, 505.0]
