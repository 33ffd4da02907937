"""Retrieval benchmark: SciFact (BEIR test) quality and speed per method, index build times, PDF ingest throughput.

    python benchmarks/retrieval.py [--reuse] [--skip-ingest]

Writes benchmarks/results/retrieval.json and prints a table. Stores and runs go to benchmarks/results/tmp/ (ignored
by git). `--reuse` keeps a SciFact store built by an earlier run (embedding 5,183 abstracts takes minutes on 2 cores);
build times are then those recorded by the run that built it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from strata.config import Settings
from strata.corpus import Corpus
from strata.eval.results import DatasetRef, ResultFile, new_result, repo_relative, write_result
from strata.eval.retrieval import RetrievalEvalResult, retrieval_experiment, run_retrieval_eval
from strata.pipeline.ingest import ingest

from ingest_speed import ingest_litqa2  # benchmarks/ is on the path of a script run from it

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
DATA = REPO.parent / "shared" / "data"
SCIFACT = DATA / "scifact" / "beir"
LITQA2_PDFS = DATA / "litqa2" / "pdfs"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp"
RUNS = [("bm25", False), ("dense", False), ("hybrid", False), ("hybrid", True)]
PUBLISHED = {"bm25": 0.665, "dense": 0.645}  # BEIR BM25 (Thakur et al., 2021); all-MiniLM-L6-v2 (SBERT/MTEB)


def settings_for(home: Path, **overrides: object) -> Settings:
    return Settings.load(overrides={"store.home": str(home), **overrides})


def build_scifact(home: Path) -> dict[str, float]:
    """Ingest SciFact into a fresh store, then build BM25 and dense separately to time each."""
    shutil.rmtree(home, ignore_errors=True)
    report = ingest([SCIFACT / "corpus.jsonl"], settings_for(home, **{"index.dense": False}))
    settings = settings_for(home)
    with Corpus.open(settings) as corpus:
        chunks = corpus.store.stats().chunks
        dense = corpus.index.sync()
    build = {
        "papers": sum(outcome.papers_added for outcome in report.files),
        "chunks": chunks,
        "parse_store_seconds": report.parse_seconds,
        "bm25_index_seconds": report.index_seconds,
        "dense_index_seconds": dense.dense_seconds,
        "dense_chunks_per_second": chunks / dense.dense_seconds if dense.dense_seconds else 0.0,
    }
    (home / "build.json").write_text(json.dumps(build, indent=2))
    return build


def evaluate_scifact(home: Path) -> list[RetrievalEvalResult]:
    results = []
    for method, prf in RUNS:
        result = run_retrieval_eval(
            settings_for(home), SCIFACT, method=method, prf=prf, output_dir=WORK / "runs", store_home=home
        )
        print(f"  {result.method}: nDCG@10 {result.metrics['nDCG@10']:.4f}", file=sys.stderr)
        results.append(result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reuse", action="store_true", help="reuse the SciFact store of an earlier run")
    parser.add_argument("--skip-ingest", action="store_true", help="skip the LitQA2 PDF ingest throughput run")
    args = parser.parse_args()

    scifact_home = WORK / "scifact-store"
    if args.reuse and (scifact_home / "build.json").is_file():
        build = json.loads((scifact_home / "build.json").read_text())
    else:
        print("building the SciFact store and indices ...", file=sys.stderr)
        build = build_scifact(scifact_home)
    print("evaluating ...", file=sys.stderr)
    results = evaluate_scifact(scifact_home)
    litqa2 = None
    if not args.skip_ingest:
        print("ingesting the LitQA2 PDFs ...", file=sys.stderr)
        litqa2 = ingest_litqa2(WORK / "litqa2-store")

    experiments = [
        retrieval_experiment(r, r.method).model_copy(
            update={"details": {"published_nDCG@10": PUBLISHED[r.method]} if r.method in PUBLISHED else {}}
        )
        for r in results
    ]
    fingerprint = results[0].dataset_fingerprint
    datasets = [DatasetRef(name="scifact", path=repo_relative(SCIFACT, REPO), fingerprint=fingerprint, split="test")]
    if litqa2:
        datasets.append(DatasetRef(name="litqa2-pdfs", path=repo_relative(LITQA2_PDFS, REPO)))
    summary = new_result(
        "benchmarks/retrieval.py",
        experiments,
        datasets=datasets,
        settings={name: getattr(results[0], name).model_dump(mode="json") for name in ("search", "index", "chunking")},
        details={"scifact_build": build, "litqa2_ingest": litqa2},
    )
    write_result(summary, RESULTS / "retrieval.json")
    print(format_table(summary))
    return 0


def format_table(summary: ResultFile) -> str:
    lines = [f"SciFact BEIR test ({summary.experiments[0].queries} queries), results = papers, k=100",
             f"{'method':<12} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7} {'MRR@10':>7} {'p50 ms':>8} {'p95 ms':>8}"]
    for row in summary.experiments:
        m = row.metrics
        lines.append(f"{row.method:<12} {m['nDCG@10']:>8.4f} {m['R@10']:>7.4f} {m['R@100']:>7.4f} "
                     f"{m['MRR@10']:>7.4f} {row.cost['latency_p50_ms']:>8.1f} {row.cost['latency_p95_ms']:>8.1f}")
    build = summary.details["scifact_build"]
    lines.append(f"index build: {build['papers']} papers, {build['chunks']} chunks; parse+store "
                 f"{build['parse_store_seconds']:.1f}s, BM25 {build['bm25_index_seconds']:.1f}s, dense "
                 f"{build['dense_index_seconds']:.1f}s ({build['dense_chunks_per_second']:.1f} chunks/s)")
    if summary.details["litqa2_ingest"]:
        lit = summary.details["litqa2_ingest"]
        lines.append(f"LitQA2 ingest: {lit['pdfs']} PDFs ({lit['failed']} failed), {lit['pages']} pages, "
                     f"{lit['chunks']} chunks; parse+store {lit['parse_store_seconds']:.1f}s "
                     f"({lit['parse_pages_per_second']:.2f} pages/s), index {lit['index_seconds']:.1f}s "
                     f"({lit['index_chunks_per_second']:.1f} chunks/s); end to end "
                     f"{lit['end_to_end_pages_per_second']:.2f} pages/s, {lit['end_to_end_chunks_per_second']:.1f} "
                     f"chunks/s")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
