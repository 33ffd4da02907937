"""Embedding speed per backend, and SciFact quality of the static tier.

    python benchmarks/embed.py [--minilm-texts 192] [--skip-quality] [--rescore K]

Speed: real chunk texts (SciFact abstracts, each embedded as its title, a newline and the text, as the dense index
does), chunks/s per backend and each as a ratio to MiniLM (sentence-transformers, torch, 2 threads):
  - MiniLM torch with 1 and 2 threads, given the texts one batch (64) per call (no length sorting across batches)
    and in one call (sentence-transformers sorts a call's texts by length: batches with less padding);
  - the static tier distilled from MiniLM, cold (word table empty: every new word is cut into pieces once) and warm.
  MiniLM reads only `--minilm-texts` texts (it runs at tens of chunks/s here); the static tier reads all 5,183.
Quality: SciFact (BEIR test, 300 queries) nDCG@10 for dense and hybrid with the static encoder, in a store of its own
under benchmarks/results/tmp/ (the MiniLM rows are those of benchmarks/results/retrieval.json); `--rescore K` adds
dense and hybrid with MiniLM re-scoring the static tier's best K chunks per query (K MiniLM embeddings a query).
With `--minilm-store HOME` (a store of the same SciFact corpus with a MiniLM dense index, e.g. the retrieval eval's
.strata/eval/scifact-...), the re-scoring reads each chunk's MiniLM vector from that index instead of embedding it
again: the same vectors (same model, same text), so the same nDCG@10, in seconds rather than the ~hour that 12,000
MiniLM chunk embeddings take here; its query-time cost is then measured on its own (`--rescore-cost-queries`
queries, the real MiniLM embeddings of their top K texts and of the query).

Writes benchmarks/results/embed.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from unittest.mock import patch

import numpy as np

from strata.config import EmbeddingSettings, Settings
from strata.corpus import Corpus
from strata.encoders.embedder import Embedder, encoder_identity
from strata.eval.beir import load_beir
from strata.index.dense import embedding_text
from strata.retrieve import hybrid
from strata.eval.results import DatasetRef, Experiment, new_result, repo_relative, write_result
from strata.eval.retrieval import RetrievalEvalResult, retrieval_experiment, run_retrieval_eval

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
SCIFACT = REPO.parent / "shared" / "data" / "scifact" / "beir"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp"
MINILM_HYBRID, MINILM_DENSE = 0.7153, 0.6538  # benchmarks/results/retrieval.json
NOT_MEASURED = {
    "minilm-onnx": "not a backend: sentence-transformers' ONNX backend exports through optimum, whose releases require "
    "transformers<4.58 (pinned: 5.24). Exported with torch.onnx instead (TorchScript exporter, opset 17; onnx "
    "1.23.2 outside the venv) and run on onnxruntime 1.32 with 2 intra-op threads, fused by onnxruntime.transformers "
    "(vectors within 1e-6 of torch's), it embedded SciFact chunks at 10.4-11.5 chunks/s against torch's 11.8-12.1 "
    "(2 threads, the same 128 texts, length-sorted batches of 64): not faster here",
}


def chunk_texts() -> list[str]:
    texts = []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            texts.append(f"{doc['title']}\n{doc['text']}" if doc.get("title") else doc["text"])
    return texts


def timed(embed, texts: list[str], per_call: int) -> float:
    """Chunks per second embedding `texts`, `per_call` at a time."""
    started = time.perf_counter()
    for start in range(0, len(texts), per_call):
        embed(texts[start : start + per_call])
    return len(texts) / (time.perf_counter() - started)


def speed(texts: list[str], minilm_texts: int, static_dir: Path) -> list[Experiment]:
    sample = texts[:minilm_texts]
    rows: list[tuple[str, str, float, int, dict[str, object]]] = []
    for threads in (1, 2):
        embedder = Embedder(EmbeddingSettings(threads=threads))
        embedder.embed(sample[:8])  # load the model
        for label, per_call in (("batch-per-call", embedder.settings.batch_size), ("length-sorted", len(sample))):
            rate = timed(embedder.embed, sample, per_call)
            print(f"  MiniLM torch, {threads} thread(s), {label}: {rate:.1f} chunks/s", file=sys.stderr)
            rows.append((f"minilm-torch-t{threads}-{label}", "sentence-transformers", rate, len(sample),
                         {"threads": threads, "texts_per_call": per_call}))  # fmt: skip
    static_settings = EmbeddingSettings(backend="static", static_dir=static_dir)
    static = Embedder(static_settings)
    started = time.perf_counter()
    static.embed(["warm-up"])  # distils on first use (cached afterwards)
    load_seconds = time.perf_counter() - started
    for label in ("cold", "warm"):
        rate = timed(static.embed, texts, 256)  # 256 chunks a call, as the dense index sync reads them
        print(f"  static ({label} word table): {rate:.0f} chunks/s", file=sys.stderr)
        rows.append((f"static-{label}", "static", rate, len(texts),
                     {"texts_per_call": 256, "load_or_distill_seconds": load_seconds,
                      "encoder": encoder_identity(static_settings)}))  # fmt: skip
    reference = next(rate for name, _, rate, _, _ in rows if name == "minilm-torch-t2-length-sorted")
    return [
        Experiment(name=name, method=method, dataset="scifact", subset=f"{count} chunks", queries=None,
                   metrics={"chunks_per_second": rate, "ratio_to_minilm_torch_2_threads": rate / reference},
                   details=details)
        for name, method, rate, count, details in rows
    ]  # fmt: skip


class StoredVectorModel:
    """Stands in for the MiniLM Embedder that `rescore_with_model` builds: chunk texts get the MiniLM vectors a
    MiniLM-indexed store of the same corpus holds (a text it lacks is embedded for real, and counted); queries are
    embedded for real."""

    def __init__(self, table: dict[str, np.ndarray], counts: dict[str, int]) -> None:
        self.table, self.counts = table, counts

    def __call__(self, settings: EmbeddingSettings) -> StoredVectorModel:
        self.model = Embedder(settings)
        return self

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [text for text in texts if text not in self.table]
        self.counts["looked_up"] += len(texts) - len(missing)
        self.counts["embedded"] += len(missing)
        if missing:
            self.table.update(zip(missing, self.model.embed(missing)))
        return np.stack([self.table[text] for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.model.embed_query(text)


def minilm_vectors(minilm_home: Path) -> dict[str, np.ndarray]:
    """Every chunk's MiniLM vector in the store at `minilm_home`, by the text the dense index embedded."""
    settings = Settings.load(overrides={"store.home": str(minilm_home)})
    with Corpus.open(settings) as corpus:
        vectors = corpus.vectors.vectors()
        if not vectors:
            raise SystemExit(f"{minilm_home} has no dense index")
        stored = corpus.store.get_chunks(vectors)
        return {embedding_text(chunk, settings.index.embedding): vectors[rowid] for rowid, chunk in stored.items()}


def rescore_cost(settings: Settings, queries: int) -> dict[str, float]:
    """What re-scoring adds to a query for real: MiniLM embeds the query and the texts of its top K static hits."""
    dataset = load_beir(SCIFACT, "test")
    embedding = settings.index.embedding
    model = Embedder(embedding.model_copy(update={"backend": "sentence-transformers"}))
    model.embed_query("warm-up")
    seconds = []
    with Corpus.open(settings) as corpus:
        for query in dataset.queries[:queries]:
            hits = corpus.vectors.search_text(query.text, embedding.rescore_top_k)
            stored = corpus.store.get_chunks(hit.rowid for hit in hits)
            texts = [embedding_text(stored[hit.rowid], embedding) for hit in hits if hit.rowid in stored]
            started = time.perf_counter()
            model.embed(texts) @ model.embed_query(query.text)
            seconds.append(time.perf_counter() - started)
    ms = np.array(seconds) * 1000
    return {"rescore_queries_timed": float(len(ms)), "rescore_ms_p50": float(np.percentile(ms, 50)),
            "rescore_ms_p95": float(np.percentile(ms, 95)), "rescore_ms_mean": float(ms.mean())}  # fmt: skip


def quality(static_dir: Path, rescore: int, minilm_home: Path | None = None, cost_queries: int = 10
            ) -> tuple[list[Experiment], dict[str, float], str | None]:  # fmt: skip
    home = WORK / "scifact-static-store"
    shutil.rmtree(home, ignore_errors=True)
    runs = [("static", 0)] + ([("static-rescore", rescore)] if rescore else [])
    experiments, build, fingerprint = [], {}, None
    lookup = StoredVectorModel(minilm_vectors(minilm_home), {"looked_up": 0, "embedded": 0}) if minilm_home else None
    for label, top_k in runs:
        for method in ("dense", "hybrid"):
            settings = Settings.load(overrides={
                "store.home": str(home), "index.embedding.backend": "static",
                "index.embedding.static_dir": str(static_dir), "index.embedding.rescore_top_k": top_k,
            })  # fmt: skip
            with ExitStack() as patches:
                if top_k and lookup is not None:
                    lookup.counts.update(looked_up=0, embedded=0)  # this run's
                    patches.enter_context(patch.object(hybrid, "Embedder", lookup))
                result: RetrievalEvalResult = run_retrieval_eval(
                    settings, SCIFACT, method=method, output_dir=WORK / "static-runs", store_home=home
                )
            fingerprint = result.dataset_fingerprint
            if not build:  # the first run built the store; later runs reuse it
                build = {"ingest_seconds": result.timings.ingest_seconds, "index_seconds": result.timings.index_seconds}
            name = f"{label}-{method}"
            print(f"  {name}: nDCG@10 {result.metrics['nDCG@10']:.4f}", file=sys.stderr)
            experiment = retrieval_experiment(result, name)
            minilm = MINILM_DENSE if method == "dense" else MINILM_HYBRID
            experiment.details = {"encoder": encoder_identity(settings.index.embedding), "rescore_top_k": top_k,
                                  "minilm_nDCG@10": minilm,
                                  "minilm_nDCG@10_delta": result.metrics["nDCG@10"] - minilm}  # fmt: skip
            if top_k and lookup is not None:
                experiment.details["rescore_vectors"] = {"from": repo_relative(minilm_home, REPO), **lookup.counts}
                experiment.cost = {**(experiment.cost or {}), **rescore_cost(settings, cost_queries)}
                experiment.details["search_latency_note"] = (
                    "latency_* exclude re-scoring's MiniLM chunk embeddings (looked up); rescore_ms_* are their real "
                    "cost a query (MiniLM, index.embedding.threads torch threads)")
            experiments.append(experiment)
    return experiments, build, fingerprint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm-texts", type=int, default=192, help="texts MiniLM embeds per configuration")
    parser.add_argument("--skip-quality", action="store_true", help="speed only (no SciFact evaluation)")
    parser.add_argument("--rescore", type=int, default=0, help="also evaluate MiniLM re-scoring the top K")
    parser.add_argument("--minilm-store", type=Path, default=None,
                        help="with --rescore: read the re-scored chunks' MiniLM vectors from this store's dense index "
                        "(the same SciFact corpus, MiniLM-indexed) and time the real re-scoring separately")
    parser.add_argument("--rescore-cost-queries", type=int, default=10,
                        help="queries whose real re-scoring cost is timed (with --minilm-store)")
    parser.add_argument("--static-dir", type=Path, default=None,
                        help="where the distilled model is cached (default: a fresh temporary folder, so the "
                        "distillation time is measured)")  # fmt: skip
    args = parser.parse_args()

    static_dir = args.static_dir or Path(tempfile.mkdtemp(prefix="strata-static-"))
    texts = chunk_texts()
    print("embedding speed ...", file=sys.stderr)
    experiments = speed(texts, args.minilm_texts, static_dir)
    details: dict[str, object] = {"not_measured": NOT_MEASURED, "reference": "minilm-torch-t2-length-sorted"}
    fingerprint = None
    if not args.skip_quality:
        print("SciFact with the static encoder ...", file=sys.stderr)
        rows, build, fingerprint = quality(static_dir, args.rescore, args.minilm_store, args.rescore_cost_queries)
        experiments += rows
        details["scifact_static_build"] = build
    summary = new_result(
        "benchmarks/embed.py",
        experiments,
        datasets=[DatasetRef(name="scifact", path=repo_relative(SCIFACT, REPO), fingerprint=fingerprint, split="test")],
        settings={"embedding": EmbeddingSettings(backend="static", static_dir=static_dir).model_dump(mode="json")},
        details=details,
    )
    write_result(summary, RESULTS / "embed.json")
    for row in summary.experiments:
        print(f"{row.name:<34} " + "  ".join(f"{k} {v:.4f}" for k, v in row.metrics.items() if "@" in k or "per" in k
                                              or "ratio" in k))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
