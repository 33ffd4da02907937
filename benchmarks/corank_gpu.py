"""The LLM rerankers of benchmarks/corank.py on a lent GPU: the same 100 SciFact test queries, the same first stage and
settings, the embedded 0.5B's weights run by the transformers backend (dequantised from the packaged GGUF, bfloat16,
CoRank's features extracted in batches). On this 2-core CPU CoRank's features alone (~5,000 documents, ~10 s each)
would take about a day; on an H200 the whole comparison fits one call.

    python benchmarks/corank_gpu.py prepare          # here: .corank_gpu/ (job, papers, model and encoder parts, wheels)
    bash benchmarks/corank_gpu.sh stage|run          # on the device (see that script)
    python benchmarks/corank_gpu.py collect --runs DIR   # here: scores the rankings -> results/corank-gpu.json

`run` needs only strata's rerank and llm layers (no index, no store): the first stage's rankings and the papers they
name travel in the job.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
sys.path.insert(0, str(REPO / "src"))  # the device machine runs from a bare copy of the tree

FOLDER = REPO / ".corank_gpu"
METHODS = ("listwise", "corank", "corank-truncated", "random-pool", "sliding-window", "pointwise")
# The caps of benchmarks/corank.py's 100-query comparison: pool 100 -> 20, vanilla listwise on the top 20.
CAPS = ["--queries", "100", "--pool", "100", "--fine-k", "20", "--listwise-depth", "20", "--sliding-depth", "100",
        "--no-train"]  # fmt: skip
OUTPUT = ROOT / "results" / "corank-gpu.json"
GRAMMAR_WHEEL = "llguidance==1.9.1"  # the transformers backend's JSON-schema constraint; not in the device image
SMOKE = {"rerank.pool": 6, "rerank.fine_k": 3, "rerank.listwise_depth": 4, "rerank.pointwise_depth": 2,
         "rerank.sliding_depth": 6, "rerank.window": 4, "rerank.stride": 2}  # fmt: skip


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- here


def prepare(args: argparse.Namespace) -> None:
    """The job (settings, queries with their first-stage rankings, the papers in them), the 0.5B and the embedding
    model in parts under the device's per-call limit, and the wheels its image lacks."""
    import corank
    from stair import GPU_WHEELS, download_wheels, split_file

    from strata.corpus import Corpus
    from strata.encoders.embedder import resolve_model_path
    from strata.llm.packaged import resolve_model

    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    bench_args = corank.arguments(CAPS)
    settings = corank.bench_settings(bench_args)
    dataset = corank.load_beir(corank.SCIFACT)
    depth = corank.first_stage_depth(bench_args)
    queries = dataset.queries[: bench_args.queries]
    with Corpus.open(settings) as corpus:
        rankings = [corpus.searcher.search(query.text, k=depth) for query in queries]
        wanted = sorted({candidate.paper_id for ranking in rankings for candidate in ranking.candidates})
        with gzip.open(folder / "papers.jsonl.gz", "wt") as handle:
            for paper_id in wanted:
                handle.write(corpus.store.get_paper(paper_id).model_dump_json() + "\n")
    job = {
        "caps": CAPS,
        "methods": list(args.methods),
        "rerank": settings.rerank.model_dump(mode="json", exclude={"features_path", "cross_encoder_dir"}),
        "llm": {"model": settings.llm.model, "n_ctx": settings.llm.n_ctx},
        "queries": [
            {"id": query.id, "text": query.text, "ranking": ranking.model_dump(mode="json")}
            for query, ranking in zip(queries, rankings, strict=True)
        ],
    }
    with gzip.open(folder / "job.json.gz", "wt") as handle:
        json.dump(job, handle)
    split_file(resolve_model(settings.llm.model, settings.llm.model_dir).path, folder, "model.gguf")
    encoder = folder / "encoder.tar"
    with tarfile.open(encoder, "w") as tar:
        tar.add(resolve_model_path(settings.index.embedding.model), arcname="encoder")
    split_file(encoder, folder, "encoder.tar")
    encoder.unlink()
    download_wheels(folder / "wheels", (*GPU_WHEELS, GRAMMAR_WHEEL))
    sizes = {p.name: p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}
    log(f"prepared {folder}: {len(queries)} queries, {len(wanted)} papers; "
        + ", ".join(f"{n} {s / 2**20:.1f} MiB" for n, s in sizes.items()))  # fmt: skip


def collect(args: argparse.Namespace) -> None:
    """Scores the device's rankings as benchmarks/corank.py scores its own rows (against the first stage, fused at
    the weight fixed in advance), adds CoRank against vanilla listwise and against its truncated control, and writes
    the result file."""
    import corank
    import numpy as np

    from strata.documents.model import Ranking
    from strata.llm import TraceSummary
    from strata.rerank.fusion import FusedReranker
    from strata.stats import paired_p_value

    runs = json.loads((Path(args.runs) / "runs.json").read_text())
    job = read_job(Path(args.folder))
    bench_args = corank.arguments([*job["caps"], "--output", str(args.output)])
    bench = corank.Bench(bench_args)
    bench.caps |= {"engine": "transformers on a GPU"}
    first = {q["id"]: Ranking.model_validate(q["ranking"]) for q in job["queries"]}
    bench.row("hybrid (first stage)", first, len(first), "llm")
    for method, run in runs["methods"].items():
        if len(run["rankings"]) < len(first):
            log(f"{method}: {len(run['rankings'])} of {len(first)} queries ranked before the deadline; no row")
            continue
        rankings = {qid: Ranking.model_validate(ranking) for qid, ranking in run["rankings"].items()}
        total = TraceSummary.model_validate(run["llm"])
        n = len(rankings)
        cost = {
            "llm_calls_per_query": round(total.calls / n, 2),
            "tokens_in_per_query": round(total.tokens_in / n, 1),
            "tokens_out_per_query": round(total.tokens_out / n, 1),
            "seconds_per_query": round(run["seconds"] / n, 3),
            "cache_hits": total.cache_hits,
        }
        bench.row(f"hybrid > {method}", rankings, n, "llm", against="hybrid (first stage)",
                  parse_errors=run["parse_errors"], **cost)  # fmt: skip
        fusion = FusedReranker(corank.Rescored(rankings, method), corank.LLM_FUSION_WEIGHT, bench.settings.search.rrf_k)
        fused = {qid: fusion.rank(ranking.query, ranking) for qid, ranking in first.items()}
        bench.row(f"hybrid > {method}+fusion", fused, n, "llm", against="hybrid (first stage)",
                  fusion_weight=corank.LLM_FUSION_WEIGHT, **cost)  # fmt: skip
    comparisons = []
    for system, baseline in (("corank", "listwise"), ("corank", "corank-truncated"), ("listwise", "sliding-window")):
        ours, theirs = bench.ndcg.get(f"llm: hybrid > {system}"), bench.ndcg.get(f"llm: hybrid > {baseline}")
        if ours is None or theirs is None:
            continue
        ids = sorted(ours)
        p = paired_p_value(np.array([theirs[q] for q in ids]), np.array([ours[q] for q in ids]))
        comparisons.append({"system": f"hybrid > {system}", "baseline": f"hybrid > {baseline}", "metric": "nDCG@10",
                            "p_value": p, "queries": len(ids)})  # fmt: skip
        log(f"{system} vs {baseline}: p {p:.4f} (n {len(ids)})")
    bench.details |= {
        "parts": {"llm": {"comparisons": comparisons}},
        "device": runs["device"],
        "model": runs["model"],
        "model_load_seconds": runs["model_load_seconds"],
        "feature_extraction": runs.get("features"),
    }
    bench.save()
    corank.print_table(bench.result())


def read_job(folder: Path) -> dict:
    with gzip.open(folder / "job.json.gz", "rt") as handle:
        return json.load(handle)


# --- on the device


class JobStore:
    """The papers the job's rankings name, read from the job's file: all `PaperTexts` asks of a store."""

    def __init__(self, path: Path) -> None:
        from strata.documents.model import Paper

        with gzip.open(path, "rt") as handle:
            papers = [Paper.model_validate_json(line) for line in handle]
        self._papers = {paper.id: paper for paper in papers}

    def get_paper(self, paper_id: str):
        return self._papers[paper_id]


def run(args: argparse.Namespace) -> None:
    """Features for every pooled paper (batched), then each method over the queries, one at a time, writing
    runs.json after each method; no method starts after --deadline-s (one cut short keeps the queries it ranked)."""
    from strata.config import Settings
    from strata.llm import make_client

    started = time.perf_counter()
    folder, out = Path(args.folder), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    job = read_job(folder)
    overrides = {f"rerank.{name}": value for name, value in job["rerank"].items()} | {
        "llm.backend": "transformers",
        "llm.model": str(args.model),
        "llm.n_ctx": job["llm"]["n_ctx"],
        "llm.batch_size": args.batch_size,
        "llm.cache_path": str(Path(args.work) / "llm-cache.sqlite"),
        "rerank.features_path": str(Path(args.work) / "features.sqlite3"),
        "index.embedding.model": str(args.encoder),
        "index.embedding.threads": args.cpu_threads,
        "index.embedding.query_threads": args.cpu_threads,
        "store.home": str(Path(args.work) / "store"),
    }
    queries = job["queries"]
    if args.smoke:  # the whole path in seconds on a CPU: two queries, small pools
        overrides |= SMOKE
        queries = queries[:2]
    settings = Settings.load(overrides=overrides)
    store = JobStore(folder / "papers.jsonl.gz")
    client = make_client(settings)
    runs: dict = {"device": args.device_name, "model": client.model, "model_load_seconds": client.backend.load_seconds,
                  "methods": {}}  # fmt: skip
    log(f"loaded {client.model} ({client.backend.name}) in {client.backend.load_seconds or 0:.0f}s")

    def save() -> None:
        (out / "runs.json").write_text(json.dumps(runs))

    if {"corank", "corank-truncated"} & set(job["methods"]):
        try:  # CoRank falls back to titles for papers without features; the other methods need none
            runs["features"] = extract_features(settings, store, client, queries, started + args.features_deadline_s)
        except Exception as error:  # noqa: BLE001 (reported in runs.json and the log)
            runs.setdefault("errors", {})["features"] = traceback.format_exc()
            log(f"features failed: {error!r}")
        save()
    for method in job["methods"]:
        if time.perf_counter() - started > args.deadline_s:
            log(f"deadline passed: {method} not started")
            continue
        try:  # one method failing on this machine must not cost the others
            runs["methods"][method] = rank_all(settings, store, client, method, queries, started + args.deadline_s)
        except Exception as error:  # noqa: BLE001 (reported in runs.json and the log, then the next method)
            runs.setdefault("errors", {})[method] = traceback.format_exc()
            log(f"{method} failed: {error!r}")
        save()
    client.close()


def extract_features(settings, store: JobStore, client, queries: list[dict], deadline: float) -> dict:
    """Features of every paper in the queries' pools, `llm.batch_size` papers per decoding pass, none started after
    perf_counter() passes `deadline` (a paper left without features shows as its title in CoRank's coarse pass, so
    the cost and the count of such papers are reported)."""
    from strata.llm import tracing
    from strata.rerank.factory import compact_features
    from strata.rerank.texts import PaperTexts

    depth = settings.rerank.pool
    pool = list(dict.fromkeys(c["paper_id"] for query in queries for c in query["ranking"]["candidates"][:depth]))
    features = compact_features(settings, PaperTexts(store), client)  # type: ignore[arg-type]
    step = settings.llm.batch_size
    reports = []
    with tracing() as trace:
        for start in range(0, len(pool), step):
            if time.perf_counter() > deadline:
                log(f"features deadline passed after {start} of {len(pool)} papers")
                break
            reports.append(features.ensure(pool[start : start + step]))
            log(reports[-1].summary())
    done = sum(report.documents for report in reports)
    return {"documents": len(pool), "attempted": done, "extracted": sum(report.extracted for report in reports),
            "failed": sum(len(report.failed) for report in reports), "seconds": sum(r.seconds for r in reports),
            "llm": trace.summary().model_dump()}  # fmt: skip


def rank_all(settings, store: JobStore, client, method: str, queries: list[dict], deadline: float) -> dict:
    """`method`'s rankings of the queries, one at a time, until perf_counter() passes `deadline`, with the LLM
    calls of its ranking prompts (features were extracted before) and its answers' parse errors."""
    from strata.documents.model import Ranking
    from strata.llm import TraceSummary, tracing
    from strata.rerank.factory import make_reranker
    from strata.rerank.model import ranking_calls

    reranker = make_reranker(settings, store, client, method=method)  # type: ignore[arg-type]
    rankings, summaries = {}, []
    began = time.perf_counter()
    for query in queries:
        if time.perf_counter() > deadline:
            log(f"deadline passed: {method} stopped after {len(rankings)} queries")
            break
        with tracing() as trace:
            ranked = reranker.rank(query["text"], Ranking.model_validate(query["ranking"]))
        rankings[query["id"]] = ranked.model_dump(mode="json")
        summaries.append(ranking_calls(trace).summary())
    seconds = time.perf_counter() - began
    log(f"{method}: {len(rankings)} queries in {seconds:.0f}s")
    llm = getattr(reranker, "llm", None)  # the listwise ones parse written lists; pointwise scores, parses nothing
    return {"rankings": rankings, "seconds": seconds, "llm": TraceSummary.total(summaries).model_dump(),
            "parse_errors": llm.errors.model_dump() if llm is not None else {}}  # fmt: skip


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    ready = commands.add_parser("prepare", help="write the job and the parts the device needs")
    ready.add_argument("--folder", type=Path, default=FOLDER)
    ready.add_argument("--methods", nargs="*", default=list(METHODS))
    device = commands.add_parser("run", help="on the device: rank with every method")
    device.add_argument("--folder", type=Path, default=FOLDER)
    device.add_argument("--model", type=Path, required=True, help="the assembled GGUF")
    device.add_argument("--encoder", type=Path, required=True, help="the unpacked embedding model folder")
    device.add_argument("--out", type=Path, required=True)
    device.add_argument("--work", type=Path, default=Path("/tmp/corank_work"), help="caches not sent back")
    device.add_argument("--deadline-s", type=float, default=480)
    device.add_argument("--features-deadline-s", type=float, default=240, help="no feature batch started after")
    device.add_argument("--batch-size", type=int, default=512, help="llm.batch_size: papers per decoding pass")
    device.add_argument("--cpu-threads", type=int, default=8, help="the embedding model's CPU threads")
    device.add_argument("--device-name", default="cuda")
    device.add_argument("--smoke", action="store_true", help="a dry run: two queries, pools of 6")
    back = commands.add_parser("collect", help="score the device's rankings here")
    back.add_argument("--runs", type=Path, required=True, help="folder holding the device's runs.json")
    back.add_argument("--folder", type=Path, default=FOLDER)
    back.add_argument("--output", type=Path, default=OUTPUT)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    {"prepare": prepare, "run": run, "collect": collect}[args.command](args)


if __name__ == "__main__":
    main()
