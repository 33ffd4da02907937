"""Reliability benchmark: crash trials on ingest, parser fuzzing, failing LLM servers, at full size.

    nice -n 10 python benchmarks/reliability.py [--trials 20] [--dense-trials 4] [--kills 3] [--fuzz 2000]
        [--only crash,fuzz,llm] [--reuse-fuzz]

The harnesses live in tests/fuzz/ (the CI tests run them small). Writes benchmarks/results/reliability.json and prints
its table as benchmarks/RESULTS.md shows it; work files go to benchmarks/results/tmp/reliability/ (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "tests"))

from fuzz.crash import clean_ingest, run_trial, small_encoder  # noqa: E402
from fuzz.hostile import FuzzRun, mutations, named_cases, seeds  # noqa: E402

from strata.eval.results import DatasetRef, Experiment, merged, new_result, repo_relative, update_result  # noqa: E402

DATA = ROOT.parent.parent / "shared" / "data"
PDFS = DATA / "litqa2" / "pdfs"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp" / "reliability"
# The three quickest LitQA2 PDFs to parse; dense trials (slower: each run loads torch) use the first.
CRASH_PDFS = ["10.1038%2Fs41467-024-44806-1.pdf", "10.1101%2F2024.02.13.580051.pdf", "10.1101%2F2024.05.13.593936.pdf"]
FUZZ_TIMEOUT_S = 30.0
FUZZ_MEMORY_LIMIT = 6 * 1024**3


def crash_benchmark(trials: int, kills: int, seed: int, dense_trials: int, shards: int) -> dict:
    """`trials` crash trials, `dense_trials` of them with the dense index on, run as `shards` parallel processes
    (each its own folder, trials and seeds disjoint) so they finish on a machine shared with other work."""
    work = WORK / "crash"
    shutil.rmtree(work, ignore_errors=True)
    encoder = small_encoder(WORK / "minilm-1layer")
    plans = [("bm25", trials - dense_trials), ("dense", dense_trials)]
    jobs = []
    for name, count in plans:
        parts = min(shards, count)
        for part in range(parts):
            numbers = list(range(part, count, parts))
            if numbers:
                out = work / f"{name}-shard{part}.json"
                command = [sys.executable, __file__, "crash-shard", "--shard", name, "--trial-numbers",
                           ",".join(map(str, numbers)), "--kills", str(kills), "--seed", str(seed), "--out", str(out)]
                jobs.append((out, subprocess.Popen(command)))  # fmt: skip
    results = []
    for out, job in jobs:
        job.wait()
        results += json.loads(out.read_text()) if out.is_file() else []
    return crash_summary(results, encoder)


def crash_shard(name: str, numbers: list[int], kills: int, seed: int, out: Path) -> None:
    work = WORK / "crash" / name
    encoder = small_encoder(WORK / "minilm-1layer") if name == "dense" else None
    pdfs = CRASH_PDFS[:1] if encoder else CRASH_PDFS
    source = work / f"pdfs-{numbers[0]}"
    source.mkdir(parents=True)
    for pdf in pdfs:
        (source / pdf).symlink_to(PDFS / pdf)
    clean, seconds = clean_ingest(source, work / f"clean-{numbers[0]}", encoder, work / f"clean-{numbers[0]}.log")
    print(f"crash/{name}: clean ingest {seconds:.1f}s, {len(clean.papers)} papers, {clean.store_chunks} chunks",
          flush=True)  # fmt: skip
    results = []
    for trial in numbers:
        result = run_trial(trial, source, work / f"trial{trial}", encoder, clean, seconds, kills, seed,
                           work / f"trial{trial}.log")  # fmt: skip
        print(f"  {name} trial {trial}: {len(result.kills)} kills at {[k.after_s for k in result.kills]}s, "
              f"lost {result.papers_lost}, problems {result.problems or 'none'}", flush=True)
        results.append(result.model_dump())
        out.write_text(json.dumps(results))  # after each trial, so a stopped run keeps what it finished


def crash_summary(results: list[dict], encoder: Path) -> dict:
    return {
        "trials": len(results),
        "trials_with_a_kill": sum(bool(r["kills"]) for r in results),
        "kills": sum(len(r["kills"]) for r in results),
        "dense_trials": sum(r["dense"] for r in results),
        "dense_encoder": f"{repo_relative(encoder, ROOT.parent)} (all-MiniLM-L6-v2 cut to 1 layer, 64 tokens)",
        "papers_lost": sum(r["papers_lost"] for r in results),
        "failed_trials": sum(bool(r["problems"]) or r["final_returncode"] != 0 for r in results),
        "kills_by_phase": dict(Counter(_phase(k) for r in results for k in r["kills"])),
        "results": results,
    }


def _phase(kill: dict) -> str:
    if kill["papers_committed"] == 0:
        return "before the first paper was committed"
    if kill["bm25_chunks"] == 0:
        return "after papers were committed, before the BM25 commit"
    return "after the BM25 commit (dense sync or exit)"


def fuzz_benchmark(count: int, reuse: bool) -> dict:
    """Runs the fuzzer in a child process under a memory limit, so a crash or runaway allocation is seen, not felt.
    `reuse` reads the report of a worker run on its own (`fuzz-worker --out benchmarks/results/tmp/reliability/
    fuzz.json`) instead."""
    out = WORK / "fuzz.json"
    if reuse:
        return json.loads(out.read_text()) | {"worker_returncode": 0, "reused": str(out)}
    started = time.monotonic()
    child = subprocess.run(
        [sys.executable, __file__, "fuzz-worker", "--fuzz", str(count), "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads(out.read_text()) if out.is_file() else {"outcomes": {}, "failure": None}
    report["worker_returncode"] = child.returncode
    report["seconds"] = round(time.monotonic() - started, 1)
    if child.returncode != 0:
        report["worker_stderr"] = child.stderr[-3000:]
    return report


def fuzz_worker(count: int, out: Path) -> None:
    from hypothesis import HealthCheck, given, settings

    resource.setrlimit(resource.RLIMIT_AS, (FUZZ_MEMORY_LIMIT, FUZZ_MEMORY_LIMIT))
    shutil.rmtree(WORK / "fuzz", ignore_errors=True)
    run = FuzzRun(WORK / "fuzz", FUZZ_TIMEOUT_S)
    failure = None
    for case in named_cases(scale=5):
        outcome = run.run(case)
        if outcome.status not in ("parsed", "error"):
            failure = failure or outcome.model_dump()

    @settings(max_examples=count, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=mutations(seeds()))
    def mutated(case) -> None:
        outcome = run.run(case)
        assert outcome.status in ("parsed", "error"), outcome

    try:
        mutated()
    except AssertionError as error:
        failure = failure or str(error)[:2000]
    run.close()
    statuses = Counter(o.status for o in run.outcomes)
    out.write_text(json.dumps({
        "inputs": len(run.outcomes),
        "named_cases": len(named_cases(scale=5)),
        "outcomes": dict(statuses),
        "by_family": run.table(),
        "slowest_s": max(o.seconds for o in run.outcomes),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "memory_limit_mb": FUZZ_MEMORY_LIMIT // 1024**2,
        "per_file_timeout_s": FUZZ_TIMEOUT_S,
        "failure": failure,
    }, indent=1))  # fmt: skip


def llm_benchmark(repeats: int) -> dict:
    from test_reliability_llm import BOUND_S, complete

    from fuzz.llm_server import FAULTS, HostileLLMServer, refused_url
    from strata.llm import LLMError

    rows = []
    for fault in [f for f in FAULTS if f != "ok"] + ["refused"]:
        for _ in range(repeats):
            server = None if fault == "refused" else HostileLLMServer([fault])
            started = time.monotonic()
            try:
                complete(refused_url() if server is None else server.base_url)
                error = "none (answered)"
            except LLMError as raised:
                error = type(raised).__name__
            except AssertionError as raised:  # over the time bound
                error = f"UNBOUNDED: {raised}"
            finally:
                if server:
                    server.close()
            rows.append({"fault": fault, "error": error, "seconds": round(time.monotonic() - started, 2),
                         "requests": server.requests if server else None})  # fmt: skip
    clear = [r for r in rows if r["error"] in ("LLMUnavailableError", "LLMOutputError", "LLMError")]
    return {
        "calls": len(rows),
        "faults_injected": sum(r["requests"] or 3 for r in rows),
        "clear_errors": len(clear),
        "bound_s": round(BOUND_S, 1),
        "max_seconds": max(r["seconds"] for r in rows),
        "rows": rows,
    }


# Section -> (method, its numbers that are metrics, its numbers that are costs); the rest of a section is details.
SECTIONS = {
    "crash": ("SIGKILL during ingest, then rerun",
              ("trials", "trials_with_a_kill", "kills", "dense_trials", "papers_lost", "failed_trials"), ()),
    "fuzz": ("hostile parser inputs", ("inputs", "named_cases"), ("slowest_s", "peak_rss_mb", "seconds")),
    "llm": ("failing LLM servers", ("calls", "faults_injected", "clear_errors"), ("max_seconds",)),
}  # fmt: skip


def experiment(name: str, section: dict) -> Experiment:
    method, metric_names, cost_names = SECTIONS[name]
    metrics = {key: section[key] for key in metric_names if key in section} | section.get("outcomes", {})
    cost = {key: section[key] for key in cost_names if key in section}
    details = {key: value for key, value in section.items() if key not in {*metric_names, *cost_names, "outcomes"}}
    dataset = "litqa2-pdfs" if name == "crash" else None
    return Experiment(name=name, method=method, dataset=dataset, metrics=metrics, cost=cost, details=details)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="all", choices=["all", "fuzz-worker", "crash-shard"])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kills", type=int, default=3, help="kills per crash trial before the final rerun")
    parser.add_argument("--dense-trials", type=int, default=4, help="crash trials with the dense index on")
    parser.add_argument("--shards", type=int, default=3, help="parallel processes per kind of crash trial")
    parser.add_argument("--shard", choices=["bm25", "dense"], help=argparse.SUPPRESS)
    parser.add_argument("--trial-numbers", help=argparse.SUPPRESS)
    parser.add_argument("--fuzz", type=int, default=2000, help="hypothesis examples (named cases come on top)")
    parser.add_argument("--llm-repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--only", default="crash,fuzz,llm")
    parser.add_argument("--reuse-fuzz", action="store_true", help="report the last separate fuzz-worker run")
    parser.add_argument("--out", type=Path, default=RESULTS / "reliability.json")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.mode == "fuzz-worker":
        fuzz_worker(args.fuzz, args.out)
        return 0
    if args.mode == "crash-shard":
        crash_shard(args.shard, [int(n) for n in args.trial_numbers.split(",")], args.kills, args.seed, args.out)
        return 0
    only = set(args.only.split(","))
    sections = {}
    if "llm" in only:
        sections["llm"] = llm_benchmark(args.llm_repeats)
    if "fuzz" in only:
        sections["fuzz"] = fuzz_benchmark(args.fuzz, args.reuse_fuzz)
    if "crash" in only:
        sections["crash"] = crash_benchmark(args.trials, args.kills, args.seed, args.dense_trials, args.shards)
    this_run = new_result(
        "benchmarks/reliability.py",
        [experiment(name, section) for name, section in sections.items()],
        datasets=[DatasetRef(name="litqa2-pdfs", path=repo_relative(PDFS, ROOT.parent))] if "crash" in sections else [],
    )
    # Sections not run this time keep their last results, so parts can be rerun on their own.
    written = update_result(args.out, lambda earlier: merged(earlier, this_run))
    from report import reliability_section  # benchmarks/report.py, this folder being on sys.path

    print(reliability_section(args.out.name, written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
