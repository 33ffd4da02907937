"""Profile one `strata serve` process with py-spy while `benchmarks/load.py`'s clients load its /search.

    python benchmarks/profile_search.py --method bm25 --label before [--home .strata/litqa2] [--seconds 15]

Writes benchmarks/results/profiles/search-METHOD-LABEL.txt: the load's throughput, then the functions holding the
most samples, by self time and inclusive, as % of all samples (py-spy's raw collapsed stacks go to
benchmarks/results/tmp/, which git ignores). One worker, so that the profiled process serves every request.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import load
import uvloop

ROOT = Path(__file__).resolve().parent
PROFILES = ROOT / "results" / "profiles"
RAW = ROOT / "results" / "tmp"
LINE_NUMBER = re.compile(r":\d+\)$")


def summarise(collapsed: str, top: int) -> str:
    """Top functions of py-spy's collapsed stacks ("frame;frame;... count" lines), lines merged per function."""
    own: Counter[str] = Counter()
    within: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        frames = [LINE_NUMBER.sub(")", frame) for frame in stack.split(";")]
        total += samples
        own[frames[-1]] += samples
        within.update({frame: samples for frame in set(frames)})
    rows = [f"samples {total}", "", "== self (% of samples) =="]
    rows += [f"{100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    rows += ["", "== inclusive (% of samples) =="]
    rows += [f"{100 * n / total:5.1f}%  {frame}" for frame, n in within.most_common(top)]
    return "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=".strata/litqa2")
    parser.add_argument("--method", choices=["bm25", "dense", "hybrid"], default="bm25")
    parser.add_argument("--label", required=True, help="e.g. before, after")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--gil", action="store_true", help="sample only the thread holding the interpreter lock "
                        "(Python's own CPU time; native code that releases the lock is not seen)")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    queries = [json.loads(line)["question"] for line in load.QUESTIONS.read_text().splitlines() if line.strip()]
    port = load.free_port()
    url = f"http://127.0.0.1:{port}"
    name = f"search-{args.method}-{args.label}{'-gil' if args.gil else ''}"
    raw = RAW / f"prof-{name}.txt"
    raw.parent.mkdir(parents=True, exist_ok=True)
    server = load.start_server(Path(args.home), port)
    try:
        load.wait_until_healthy(url, server)
        command = ["py-spy", "record", "--pid", str(server.pid), "--duration", str(int(args.seconds)), "--rate", "200",
                   "--format", "raw", "--nonblocking", "-o", str(raw), *(["--gil"] if args.gil else [])]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # py-spy attaches
        outcome = uvloop.run(load.run_clients(url, queries, args.clients, args.seconds - 1, args.method, 10))
        spy.wait(timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=30)
    latency = outcome["latency_ms"]
    sampled = "the thread holding the GIL" if args.gil else "active threads"
    head = (f"# /search {args.method}, {args.label}: 1 worker, {args.clients} clients, py-spy --rate 200 ({sampled})\n"
            f"# {outcome['throughput_rps']} req/s, p50 {latency['p50']} ms, p95 {latency['p95']} ms, "
            f"errors {outcome['errors']} (under the profiler); load average before: {load_before:.2f}\n"
            f"# python benchmarks/profile_search.py --method {args.method} --label {args.label}"
            f"{' --gil' if args.gil else ''}\n")
    PROFILES.mkdir(parents=True, exist_ok=True)
    target = PROFILES / f"{name}.txt"
    target.write_text(head + summarise(raw.read_text(), args.top))
    print(target.read_text()[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
