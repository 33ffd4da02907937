"""Ray ingest against the local ingest on the LitQA2 PDFs: the same store (papers, chunk texts, vectors), and the time.

    python benchmarks/ray_ingest.py [--limit N] [--ray-address ADDRESS]

Both ingest the same PDFs (sorted by name; all 39 by default) into fresh homes under benchmarks/results/tmp/ray-ingest/
with the default settings, then `strata.experiments.stores.compare_stores` compares them. Writes
benchmarks/results/ray_ingest.json and prints a table.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from strata.config import Settings
from strata.eval.results import DatasetRef, Experiment, new_result, repo_relative, write_result
from strata.experiments.stores import compare_stores
from strata.pipeline.ingest import IngestReport, ingest
from strata.pipeline.ingest_ray import ingest_with_ray

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


def run(name: str, report: IngestReport, seconds: float) -> Experiment:
    return Experiment(
        name=name,
        method=name,
        dataset="litqa2-pdfs",
        metrics={"ok": report.count("ok"), "failed": report.count("failed"),
                 "chunks": sum(outcome.chunks for outcome in report.files)},
        cost={"seconds": seconds},
    )  # fmt: skip


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
    same_outcomes = [(o.path, o.status) for o in local_report.files] == [(o.path, o.status) for o in ray_report.files]
    results = new_result(
        "benchmarks/ray_ingest.py",
        [run("local", local_report, local_s), run("ray", ray_report, ray_s)],
        datasets=[DatasetRef(name="litqa2-pdfs", path=repo_relative(PDFS, ROOT.parent))],
        settings={"vector_tolerance": VECTOR_TOLERANCE},
        details={"pdfs": len(files), "same_outcomes": same_outcomes, "same_store": diff.same(VECTOR_TOLERANCE),
                 "diff": diff.model_dump()},
    )  # fmt: skip
    write_result(results, RESULTS / "ray_ingest.json")
    print("| ingest | PDFs ok / failed | chunks | seconds |\n|---|---|---|---|")
    for part in results.experiments:
        m = part.metrics
        print(f"| {part.name} | {m['ok']:.0f} / {m['failed']:.0f} | {m['chunks']:,.0f} | {part.cost['seconds']:.0f} |")
    print(
        f"same store: {results.details['same_store']} ({diff.papers} papers, {diff.chunks:,} chunks; max vector "
        f"difference {diff.max_vector_difference:.2e}; papers only local/only Ray/different chunks: "
        f"{len(diff.only_left)}/{len(diff.only_right)}/{len(diff.different_chunks)}); same file outcomes: "
        f"{same_outcomes}"
    )


if __name__ == "__main__":
    main()
