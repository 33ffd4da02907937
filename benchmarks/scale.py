"""Scale benchmark: index build and hybrid search at 100k+ chunks, and SciFact quality on both store backends.

    python benchmarks/scale.py [--sizes 100000 500000 2564545] [--queries 100] [--skip-backends] [--skip-scale]
        [--search-only]

On 2 cores the three sizes build in about 20 s, 15 min and 1 h; 2.5M chunks peak at ~10 GB RSS and ~10 GB of disk.

Scale part: a corpus of real SciFact sentences recombined into chunks (strata.experiments.scale_corpus; vectors derived from
the real SciFact embeddings, see there) is streamed into a SQLite store and indexed (tantivy + faiss, HNSW above
index.hnsw_above), each size in its own process so peak RSS is that size's. Then the first `--queries` SciFact test
claims are searched, alternating Strata's hybrid search with tantivy + faiss called directly (same indices, same query
vectors, reciprocal rank fusion and a paper roll-up written inline), so both see the same machine load.

Backends part: the SciFact store built by benchmarks/retrieval.py (SQLite + tantivy + faiss) is copied into
PostgreSQL + pgvector with its vectors (no re-embedding) and both are scored on the 300 test claims.

Writes benchmarks/results/scale.json and prints a table. Work folders go to benchmarks/results/tmp/scale/ (ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from strata.config import Settings
from strata.corpus import Corpus
from strata.eval.beir import load_beir
from strata.eval.results import DatasetRef, Experiment, ResultFile, merged, new_result, repo_relative, update_result
from strata.eval.retrieval import evaluate_run
from strata.experiments.scale_corpus import ScaleCorpus, SourceText
from strata.index.migrate import migrate, vectors_from
from strata.retrieve.fusion import reciprocal_rank_fusion

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
SCIFACT = REPO.parent / "shared" / "data" / "scifact" / "beir"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp" / "scale"
LIT3R_CHUNKS = 2_564_545  # over 27,487 papers
CHUNKS_PER_PAPER = 93  # as in Lit3R
K = 10


def scifact_store_home() -> Path:
    """The SciFact store benchmarks/retrieval.py and `strata eval` build (SQLite + tantivy + faiss)."""
    found = sorted((REPO / ".strata" / "eval").glob("scifact-*"))
    if not found:
        sys.exit("no SciFact store under .strata/eval: run `python benchmarks/retrieval.py` first")
    return found[0]


def load_source() -> SourceText:
    home = scifact_store_home()
    stored, after = [], 0
    with Corpus.open(Settings.load(overrides={"store.home": str(home)})) as scifact:
        while batch := scifact.store.chunks_after(after, limit=5000):
            stored.extend(batch)
            after = batch[-1].rowid
        vectors = vectors_from(scifact.store, scifact.vectors)(stored)
    return SourceText.from_chunks([s.chunk.text for s in stored], vectors, [s.paper_title for s in stored])


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


# one size, in a child process


def build_and_search(chunks: int, queries: int) -> dict[str, object]:
    home = WORK / f"chunks-{chunks}"
    subprocess.run(["rm", "-rf", str(home)], check=True)
    settings = Settings.load(overrides={"store.home": str(home)})
    corpus = ScaleCorpus(load_source(), papers=chunks // CHUNKS_PER_PAPER, chunks_per_paper=CHUNKS_PER_PAPER)
    rss_before = peak_rss_mb()
    started = time.perf_counter()
    built = Corpus(settings)
    for paper in corpus.iter_papers():
        built.store.put_paper(paper, "scale")
    store_seconds = time.perf_counter() - started
    report = built.index.sync(vectors_of=corpus.vectors_of)
    build = {
        "chunks": corpus.chunks,
        "papers": corpus.papers,
        "store_seconds": store_seconds,
        "bm25_seconds": report.bm25_seconds,
        "dense_seconds": report.dense_seconds,
        "build_seconds": store_seconds + report.bm25_seconds + report.dense_seconds,
        "dense_kind": "hnsw" if corpus.chunks > settings.index.hnsw_above else "flat",
        "peak_rss_mb": peak_rss_mb(),
        "source_rss_mb": rss_before,
        "load_average_1min": os.getloadavg()[0],
        "disk_mb": folder_bytes(home) / 2**20,
        "disk_mb_by_part": {
            "sqlite": sum(p.stat().st_size for p in home.glob("corpus.sqlite3*")) / 2**20,
            "tantivy": folder_bytes(home / "index" / "bm25") / 2**20,
            "faiss": folder_bytes(home / "index" / "dense") / 2**20,
        },
    }
    built.close()
    return {"build": build, "search": measure_search(home, settings, queries)}


def measure_search(home: Path, settings: Settings, queries: int) -> dict[str, object]:
    claims = [query.text for query in load_beir(SCIFACT).queries[:queries]]
    corpus = Corpus(settings)
    searcher, embedder = corpus.searcher, corpus.vectors.embedder
    started = time.perf_counter()
    query_vectors = {text: embedder.embed_query(text) for text in claims}
    embed_ms = (time.perf_counter() - started) * 1000 / len(claims)
    # Both sides get the same precomputed query vectors: the ratio compares search, not the encoder.
    embedder.embed_query = query_vectors.__getitem__  # type: ignore[method-assign]
    direct = DirectSearch(home, settings, query_vectors)
    searches = {"strata": lambda text: searcher.search(text, K).paper_ids, "direct": direct.search}
    timings: dict[str, list[float]] = {"strata": [], "direct": []}
    overlap = []
    for text in claims[:5]:  # warm caches and lazy loads
        for search in searches.values():
            search(text)
    for number, text in enumerate(claims):
        # Whichever side runs a query first reads its postings and rows from disk for both (at 2.5M chunks the
        # indices outgrow the page cache): alternate which goes first.
        found = {}
        for side in ("strata", "direct") if number % 2 == 0 else ("direct", "strata"):
            started = time.perf_counter()
            found[side] = searches[side](text)
            timings[side].append((time.perf_counter() - started) * 1000)
        overlap.append(len(set(found["strata"]) & set(found["direct"])) / max(len(found["direct"]), 1))
    strata_ms, direct_ms = timings["strata"], timings["direct"]
    corpus.close()
    p = lambda values, q: float(np.percentile(values, q))  # noqa: E731
    return {
        "queries": len(claims),
        "strata_p50_ms": p(strata_ms, 50),
        "strata_p95_ms": p(strata_ms, 95),
        "direct_p50_ms": p(direct_ms, 50),
        "direct_p95_ms": p(direct_ms, 95),
        "ratio_p50": p(strata_ms, 50) / p(direct_ms, 50),
        "ratio_p95": p(strata_ms, 95) / p(direct_ms, 95),
        "top10_paper_overlap": float(np.mean(overlap)),
        "query_embedding_ms": embed_ms,
        "depth": settings.search.depth,
        "load_average_1min": os.getloadavg()[0],  # the machine is shared: read latencies against this
    }


class DirectSearch:
    """tantivy + faiss called directly on Strata's index files: BM25 and vector top-`depth`, RRF, papers from SQLite."""

    def __init__(self, home: Path, settings: Settings, query_vectors: dict[str, np.ndarray]) -> None:
        import faiss
        import tantivy

        from strata.index.bm25 import ANALYZER, _schema, english_analyzer

        self.depth, self.rrf_k = settings.search.depth, settings.search.rrf_k
        self.tantivy = tantivy.Index(_schema(), path=str(home / "index" / "bm25"), reuse=True)
        self.tantivy.register_tokenizer(ANALYZER, english_analyzer())
        self.searcher = self.tantivy.searcher()
        state = json.loads((home / "index" / "dense" / "state.json").read_text())
        self.faiss = faiss.read_index(str(home / "index" / "dense" / state["vectors_file"]))
        inner = faiss.downcast_index(self.faiss.index)
        if isinstance(inner, faiss.IndexHNSW):
            inner.hnsw.efSearch = max(settings.index.hnsw_ef_search, self.depth)
        self.db = sqlite3.connect(home / "corpus.sqlite3")
        self.query_vectors = query_vectors

    def search(self, text: str) -> list[str]:
        query, _ = self.tantivy.parse_query_lenient(text, ["text", "title"])
        hits = self.searcher.search(query, self.depth).hits
        lexical = self.searcher.fast_field_values("rowid", [address for _, address in hits])
        _, ids = self.faiss.search(self.query_vectors[text].reshape(1, -1), self.depth)
        fused = [rowid for rowid, _ in reciprocal_rank_fusion([list(lexical), [int(i) for i in ids[0] if i >= 0]],
                                                              k=self.rrf_k)]
        papers: list[str] = []
        for start in range(0, len(fused), 100):
            page = fused[start : start + 100]
            rows = dict(self.db.execute(
                f"SELECT rowid, paper_id FROM chunks WHERE rowid IN ({','.join('?' * len(page))})", page
            ).fetchall())
            for rowid in page:
                if rowid in rows and rows[rowid] not in papers:
                    papers.append(rows[rowid])
            if len(papers) >= K:
                return papers[:K]
        return papers


# SciFact on both backends


def compare_backends() -> dict[str, object]:
    source_home = scifact_store_home()
    source_settings = Settings.load(overrides={"store.home": str(source_home)})
    target_settings = Settings.load(
        overrides={"store.home": str(WORK / "scifact-postgres"), "store.backend": "postgres"}
    )
    dataset = load_beir(SCIFACT)
    source, target = Corpus(source_settings), Corpus(target_settings)
    migrate_seconds = 0.0
    if target.store.stats().chunks != source.store.stats().chunks:
        started = time.perf_counter()
        migrate(source.store, source.index, target.store, target.index)
        migrate_seconds = time.perf_counter() - started
    results: dict[str, object] = {"queries": len(dataset.queries), "migrate_seconds": migrate_seconds}
    for backend, opened in [("sqlite", source), ("postgres", target)]:
        searcher = opened.searcher
        opened.vectors.embedder.embed_query("warm-up")
        for method in ("bm25", "dense", "hybrid"):
            run, latencies = {}, []
            for query in dataset.queries:
                started = time.perf_counter()
                ranking = searcher.search(query.text, 100, method)
                latencies.append((time.perf_counter() - started) * 1000)
                run[query.id] = {c.paper_id: c.score for c in ranking.candidates}
            ndcg = evaluate_run(run, dataset.qrels)[0]["nDCG@10"]
            results[f"{backend}/{method}"] = {
                "nDCG@10": ndcg, "p50_ms": float(np.percentile(latencies, 50)),
                "p95_ms": float(np.percentile(latencies, 95)),
            }
            print(f"  {backend} {method}: nDCG@10 {ndcg:.4f}", file=sys.stderr)
    for method in ("bm25", "dense", "hybrid"):
        results[f"delta/{method}"] = results[f"postgres/{method}"]["nDCG@10"] - results[f"sqlite/{method}"]["nDCG@10"]
    source.close()
    target.close()
    return results


# driver


def run_size(chunks: int, queries: int, search_only: bool) -> dict[str, object]:
    """One size in a fresh process (its peak RSS is that size's alone), niced like the rest."""
    command = [sys.executable, __file__, "--child", str(chunks), "--queries", str(queries)]
    command += ["--search-only"] if search_only else []
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"scale run at {chunks} chunks failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


BUILD_COST = ("build_seconds", "store_seconds", "bm25_seconds", "dense_seconds", "peak_rss_mb", "source_rss_mb",
              "disk_mb")  # fmt: skip
SEARCH_COST = ("strata_p50_ms", "strata_p95_ms", "direct_p50_ms", "direct_p95_ms", "ratio_p50", "ratio_p95",
               "query_embedding_ms")  # fmt: skip


def size_experiments(chunks: int, entry: dict) -> list[Experiment]:
    """A size's build (when it ran) and search as experiments; a search-only run replaces only the search."""
    experiments = []
    if "build" in entry:
        build = entry["build"]
        experiments.append(Experiment(
            name=f"build {chunks}", method="build", dataset="scifact-recombined", group="build",
            subset=f"{chunks} chunks", cost={key: build[key] for key in BUILD_COST},
            details={key: value for key, value in build.items() if key not in BUILD_COST},
        ))  # fmt: skip
    search = entry["search"]
    experiments.append(Experiment(
        name=f"search {chunks}", method="hybrid", dataset="scifact-recombined", group="search",
        subset=f"{chunks} chunks", queries=search["queries"],
        metrics={"top10_paper_overlap": search["top10_paper_overlap"]}, cost={key: search[key] for key in SEARCH_COST},
        details={"chunks": chunks, "depth": search["depth"], "load_average_1min": search["load_average_1min"]},
    ))  # fmt: skip
    return experiments


def backend_experiments(backends: dict) -> list[Experiment]:
    return [
        Experiment(
            name=key, method=key.split("/")[1], dataset="scifact", group="backends", subset=key.split("/")[0],
            queries=backends["queries"], metrics={"nDCG@10": value["nDCG@10"]},
            cost={"p50_ms": value["p50_ms"], "p95_ms": value["p95_ms"]},
        )
        for key, value in backends.items()
        if isinstance(value, dict)
    ]  # fmt: skip


def extrapolate(builds: list[Experiment], chunks: int) -> dict[str, float]:
    """Linear growth from the two largest measured sizes (an estimate, labelled as such in the output)."""
    low, high = (build.cost | {"chunks": build.details["chunks"]} for build in builds[-2:])
    scale = (chunks - high["chunks"]) / (high["chunks"] - low["chunks"])
    grow = lambda key: high[key] + (high[key] - low[key]) * scale  # noqa: E731
    return {"chunks": chunks, "build_seconds": grow("build_seconds"), "peak_rss_mb": grow("peak_rss_mb"),
            "disk_mb": grow("disk_mb")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000, 500_000, LIT3R_CHUNKS])
    parser.add_argument("--queries", type=int, default=100, help="SciFact claims searched per size (cap)")
    parser.add_argument("--extrapolate-to", type=int, default=LIT3R_CHUNKS, help="estimate this size when not measured")
    parser.add_argument("--skip-backends", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS / "scale.json")
    parser.add_argument("--search-only", action="store_true", help="re-measure search on the sizes built before")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        home = WORK / f"chunks-{args.child}"
        settings = Settings.load(overrides={"store.home": str(home)})
        result = ({"search": measure_search(home, settings, args.queries)} if args.search_only
                  else build_and_search(args.child, args.queries))
        print(json.dumps(result))
        return
    datasets = [DatasetRef(name="scifact-recombined", path=repo_relative(SCIFACT, REPO)),
                DatasetRef(name="scifact", path=repo_relative(SCIFACT, REPO), split="test")]  # fmt: skip
    this_run: list[Experiment] = []
    details: dict[str, object] = {}

    def merge(earlier: ResultFile | None) -> ResultFile:
        result = merged(earlier, new_result("benchmarks/scale.py", this_run, datasets=datasets, details=details))
        if args.skip_scale:
            return result
        builds = sorted((e for e in result.experiments if e.group == "build"), key=lambda e: e.details["chunks"])
        kept = {key: value for key, value in result.details.items() if key != "extrapolated"}  # a stale estimate
        if len(builds) >= 2 and args.extrapolate_to // CHUNKS_PER_PAPER > builds[-1].details["papers"]:
            kept["extrapolated"] = extrapolate(builds, args.extrapolate_to)  # must not outlive a measurement
        return result.model_copy(update={"details": kept})

    if not args.skip_scale:
        for chunks in args.sizes:
            print(f"scale: {chunks:,} chunks", file=sys.stderr)
            entry = run_size(chunks, args.queries, args.search_only)
            this_run += size_experiments((chunks // CHUNKS_PER_PAPER) * CHUNKS_PER_PAPER, entry)
            update_result(args.output, merge)  # after each size, so a stopped run keeps what it measured
    if not args.skip_backends:
        print("backends: SciFact on sqlite and postgres", file=sys.stderr)
        backends = compare_backends()
        this_run += backend_experiments(backends)
        deltas = {key.split("/")[1]: value for key, value in backends.items() if key.startswith("delta/")}
        details["backends"] = {"migrate_seconds": backends["migrate_seconds"], "delta": deltas}
    written = update_result(args.output, merge)
    # benchmarks/report.py (this folder is on sys.path), imported only here: no plotting library in a size's RSS
    from report import scale_section

    print(scale_section(args.output.name, written))


if __name__ == "__main__":
    main()
