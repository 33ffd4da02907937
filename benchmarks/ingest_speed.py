"""Ingest speed: the 39 LitQA2 PDFs into a fresh store, parse + store and index seconds, chunks stored and indexed,
once with reference-list entries indexed (what ingest did before `index.reference_entries`) and once with the
defaults, in the same run.

    python benchmarks/ingest_speed.py [--only NAME ...]

Writes benchmarks/results/ingest.json (keeping the rows of earlier runs it did not repeat) and prints a table.
Stores go to benchmarks/results/tmp/ingest/ (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from strata.config import Settings
from strata.corpus import Corpus
from strata.eval.results import DatasetRef, Experiment, ResultFile, merged, new_result, repo_relative, update_result
from strata.pipeline.ingest import ingest

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
LITQA2_PDFS = REPO.parent / "shared" / "data" / "litqa2" / "pdfs"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp" / "ingest"
CONFIGURATIONS: dict[str, dict[str, object]] = {
    "with-reference-entries": {"index.reference_entries": True},
    "default": {},
}
BASELINE = "with-reference-entries"


def ingest_litqa2(home: Path, **overrides: object) -> dict[str, float]:
    """Throughput of the full pipeline on the LitQA2 PDFs into a fresh store at `home`: parse + store, then BM25 +
    dense indexing; how many chunks were stored and how many the dense index holds."""
    shutil.rmtree(home, ignore_errors=True)
    manifest = json.loads((LITQA2_PDFS.parent / "pdf_manifest.json").read_text())
    pages = sum(entry["pages"] for entry in manifest)
    settings = Settings.load(overrides={"store.home": str(home), **overrides})
    started = time.perf_counter()
    report = ingest([LITQA2_PDFS], settings)
    total = time.perf_counter() - started
    chunks = sum(outcome.chunks for outcome in report.files)
    with Corpus.open(settings) as corpus:
        indexed = len(corpus.index.dense)
    return {
        "pdfs": len(report.files),
        "failed": report.count("failed"),
        "pages": pages,
        "chunks": chunks,
        "chunks_indexed": indexed,
        "parse_store_seconds": report.parse_seconds,
        "index_seconds": report.index_seconds,
        "total_seconds": total,
        "parse_pages_per_second": pages / report.parse_seconds,
        "index_chunks_per_second": indexed / report.index_seconds if report.index_seconds else 0.0,
        "end_to_end_pages_per_second": pages / total,
        "end_to_end_chunks_per_second": chunks / total,
    }


def experiment(name: str, measured: dict[str, float], baseline: dict[str, float] | None) -> Experiment:
    cost = {key: measured[key] for key in ("parse_store_seconds", "index_seconds", "total_seconds")}
    if baseline:
        cost["total_seconds_ratio"] = measured["total_seconds"] / baseline["total_seconds"]
        cost["index_seconds_ratio"] = measured["index_seconds"] / baseline["index_seconds"]
    return Experiment(
        name=name,
        method="ingest",
        dataset="litqa2-pdfs",
        metrics={"chunks_indexed": measured["chunks_indexed"], "index_chunks_per_second": measured["index_chunks_per_second"]},
        cost=cost,
        details={**measured, "overrides": CONFIGURATIONS[name]},
    )


def format_table(result: ResultFile) -> str:
    lines = [f"{'ingest':<24} {'chunks':>7} {'indexed':>8} {'parse s':>8} {'index s':>8} {'total s':>8} {'x total':>8}"]
    for e in result.experiments:
        d = e.details
        ratio = e.cost.get("total_seconds_ratio")
        lines.append(
            f"{e.name:<24} {d['chunks']:>7.0f} {d['chunks_indexed']:>8.0f} {d['parse_store_seconds']:>8.1f} "
            f"{d['index_seconds']:>8.1f} {d['total_seconds']:>8.1f} {'-' if ratio is None else f'{ratio:.2f}':>8}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(CONFIGURATIONS), help="run only these configurations")
    args = parser.parse_args()
    names = args.only or list(CONFIGURATIONS)
    measured: dict[str, dict[str, float]] = {}
    for name in names:
        print(f"ingesting the LitQA2 PDFs: {name} ...", file=sys.stderr)
        measured[name] = ingest_litqa2(WORK / name, **CONFIGURATIONS[name])
    # Ratios only against a baseline measured in this same run.
    baseline = measured.get(BASELINE)
    experiments = [experiment(name, measured[name], baseline if name != BASELINE else None) for name in names]
    fresh = new_result(
        "benchmarks/ingest_speed.py",
        experiments,
        datasets=[DatasetRef(name="litqa2-pdfs", path=repo_relative(LITQA2_PDFS, REPO))],
    )
    result = update_result(RESULTS / "ingest.json", lambda earlier: merged(earlier, fresh))
    print(format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
