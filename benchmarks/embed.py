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

Writes benchmarks/results/embed.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from strata.config import EmbeddingSettings, Settings
from strata.encoders.embedder import Embedder, encoder_identity
from strata.eval.results import DatasetRef, Experiment, new_result, repo_relative, write_result
from strata.eval.retrieval import RetrievalEvalResult, retrieval_experiment, run_retrieval_eval

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
SCIFACT = REPO.parent / "shared" / "data" / "scifact" / "beir"
RESULTS = ROOT / "results"
WORK = RESULTS / "tmp"
MINILM_HYBRID, MINILM_DENSE = 0.7153, 0.6538  # benchmarks/results/retrieval.json
NOT_MEASURED = {
    "minilm-onnx": "not measured: sentence-transformers' ONNX backend exports through optimum (optimum-onnx), whose "
    "releases on PyPI require transformers<4.58 and would replace the pinned transformers 5.24 (pip install "
    "--dry-run 'optimum[onnx]' resolves to transformers 4.57.6)",
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


def quality(static_dir: Path, rescore: int) -> tuple[list[Experiment], dict[str, float], str | None]:
    home = WORK / "scifact-static-store"
    shutil.rmtree(home, ignore_errors=True)
    runs = [("static", 0)] + ([("static-rescore", rescore)] if rescore else [])
    experiments, build, fingerprint = [], {}, None
    for label, top_k in runs:
        for method in ("dense", "hybrid"):
            settings = Settings.load(overrides={
                "store.home": str(home), "index.embedding.backend": "static",
                "index.embedding.static_dir": str(static_dir), "index.embedding.rescore_top_k": top_k,
            })  # fmt: skip
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
            experiments.append(experiment)
    return experiments, build, fingerprint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm-texts", type=int, default=192, help="texts MiniLM embeds per configuration")
    parser.add_argument("--skip-quality", action="store_true", help="speed only (no SciFact evaluation)")
    parser.add_argument("--rescore", type=int, default=0, help="also evaluate MiniLM re-scoring the top K")
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
        rows, build, fingerprint = quality(static_dir, args.rescore)
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
