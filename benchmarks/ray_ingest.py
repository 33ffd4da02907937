"""Ray ingest against the local ingest on the LitQA2 PDFs: the same store (papers, chunk texts, vectors), and the time.

    python benchmarks/ray_ingest.py [--limit N] [--ray-address ADDRESS]

Both ingest the same PDFs (sorted by name; all 39 by default) into fresh homes under benchmarks/results/tmp/ray-ingest/
with the default settings, then `strata.eval.stores.compare_stores` compares them. Writes
benchmarks/results/ray_ingest.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from strata.config import Settings
from strata.eval.stores import compare_stores
from strata.ingest import IngestReport, ingest
from strata.ingest_ray import ingest_with_ray

ROOT = Path(__file__).resolve().parent
PDFS = ROOT.parent.parent / "shared" / "data" / "litqa2" / "pdfs"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp" / "ray-ingest"
VECTOR_TOLERANCE = 1e-4  # the encoder batches texts differently on the two paths


def fresh_settings(name: str) -> Settings:
    home = WORK / name
    shutil.rmtree(home, ignore_errors=True)
    return Settings.load(overrides={"store.home": str(home)})


def timed(run) -> tuple[IngestReport, float]:
    started = time.perf_counter()
    report = run()
    return report, time.perf_counter() - started


def summary(report: IngestReport, seconds: float) -> dict[str, object]:
    return {
        "seconds": seconds,
        "ok": report.count("ok"),
        "failed": report.count("failed"),
        "chunks": sum(outcome.chunks for outcome in report.files),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, help="only the first N PDFs by name")
    parser.add_argument("--ray-address", help="a Ray cluster (default: a local Ray instance)")
    args = parser.parse_args()
    files = sorted(PDFS.glob("*.pdf"))[: args.limit]
    local, distributed = fresh_settings("local"), fresh_settings("ray")
    local_report, local_s = timed(lambda: ingest(files, local))
    ray_report, ray_s = timed(lambda: ingest_with_ray(files, distributed, address=args.ray_address))
    diff = compare_stores(local, distributed)
    results = {
        "pdfs": len(files),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "command": " ".join(["python benchmarks/ray_ingest.py", *sys.argv[1:]]),
        "local": summary(local_report, local_s),
        "ray": summary(ray_report, ray_s),
        "same_outcomes": [(o.path, o.status) for o in local_report.files]
        == [(o.path, o.status) for o in ray_report.files],
        "diff": diff.model_dump(),
        "same_store": diff.same(VECTOR_TOLERANCE),
        "vector_tolerance": VECTOR_TOLERANCE,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ray_ingest.json").write_text(json.dumps(results, indent=2))
    print("| ingest | PDFs ok / failed | chunks | seconds |\n|---|---|---|---|")
    for name in ("local", "ray"):
        part = results[name]
        print(f"| {name} | {part['ok']} / {part['failed']} | {part['chunks']:,} | {part['seconds']:.0f} |")
    print(
        f"same store: {results['same_store']} ({diff.papers} papers, {diff.chunks:,} chunks; max vector difference "
        f"{diff.max_vector_difference:.2e}; papers only local/only Ray/different chunks: {len(diff.only_left)}/"
        f"{len(diff.only_right)}/{len(diff.different_chunks)}); same file outcomes: {results['same_outcomes']}"
    )


if __name__ == "__main__":
    main()
