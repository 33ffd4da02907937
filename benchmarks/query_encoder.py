"""The query encoder adapted to the corpus (`strata train-query-encoder`) on SciFact: dense and hybrid nDCG@10 with
the unadapted and the adapted query encoder, on the 300 test claims and on the 809 train claims (never used for
training or choosing: the encoder learns from the corpus's own titles and sentences, and its best step is chosen on
held-out papers' queries), with paired randomization tests against the unadapted encoder.

    python benchmarks/query_encoder.py [--steps 400] [--no-train]

The SciFact store is the retrieval eval's (.strata/eval/scifact-..., built by `strata eval retrieval --dataset
../shared/data/scifact/beir --method hybrid`); its chunk vectors are used as indexed (only queries are embedded by
the adapted encoder). The encoder and the paper-vector cache go to --work. Writes benchmarks/results/query_encoder.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from strata.config import Settings
from strata.corpus import Corpus
from strata.eval.beir import BeirDataset, load_beir
from strata.stats import paired_p_value
from strata.eval.results import DatasetRef, Experiment, new_result, repo_relative, write_result
from strata.eval.retrieval import _strict_scores, evaluate_run
from strata.train.query_encoder import train_query_encoder

ROOT = Path(__file__).resolve().parent
SCIFACT = ROOT.parent.parent / "shared" / "data" / "scifact" / "beir"
STORE = ROOT.parent / ".strata" / "eval" / "scifact-ccca1f829cea-6046c948"
SPLITS = {"test": "test", "train claims": "train"}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=STORE, help="SciFact store home (its indices are only read)")
    parser.add_argument("--work", type=Path, default=ROOT / "results" / "tmp" / "query-encoder")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "query_encoder.json")
    parser.add_argument("--steps", type=int, default=400, help="rerank.query_encoder_steps")
    parser.add_argument("--batch", type=int, default=64, help="rerank.query_encoder_batch")
    parser.add_argument("--papers", type=int, default=6000, help="rerank.train_queries_per_source (papers sampled)")
    parser.add_argument("--no-train", action="store_true", help="measure the encoder already under --work")
    return parser.parse_args()


def bench_settings(args: argparse.Namespace, adapted: Path | None = None) -> Settings:
    overrides = {
        "store.home": str(args.store),
        "relate.paper_vector_cache": str(args.work / "relate"),
        "rerank.query_encoder_dir": str(args.work / "query-encoder"),
        "rerank.query_encoder_steps": args.steps,
        "rerank.query_encoder_batch": args.batch,
        "rerank.train_queries_per_source": args.papers,
    }
    return Settings.load(overrides={**overrides, **({"index.embedding.query_model": str(adapted)} if adapted else {})})


def rankings(settings: Settings, dataset: BeirDataset, method: str) -> dict[str, dict[str, float]]:
    with Corpus.open(settings) as corpus:
        return {query.id: _strict_scores(corpus.searcher.search(query.text, k=100, method=method))
                for query in dataset.queries}


def main() -> None:
    args = arguments()
    args.work.mkdir(parents=True, exist_ok=True)
    report_file = args.work / "training_report.json"
    if not args.no_train:
        with Corpus.open(bench_settings(args)) as corpus:
            report = train_query_encoder(corpus)
        report_file.write_text(report.model_dump_json(indent=2))
        print(report.summary(), flush=True)
    training = json.loads(report_file.read_text())
    if not training["model_dir"]:
        print("training saved no encoder (validation did not improve): nothing to compare")
        return
    folder = Path(training["model_dir"])
    experiments: list[Experiment] = []
    datasets = []
    for label, split in SPLITS.items():
        dataset = load_beir(SCIFACT, split)
        datasets.append(DatasetRef(name=f"scifact ({label})", path=repo_relative(SCIFACT, ROOT.parent),
                                   fingerprint=dataset.fingerprint, split=split))
        for method in ("dense", "hybrid"):
            per_query = {}
            for name, variant in (("unadapted", bench_settings(args)), ("adapted", bench_settings(args, folder))):
                started = time.perf_counter()
                run = rankings(variant, dataset, method)
                seconds = (time.perf_counter() - started) / len(run)
                metrics, per_query[name] = evaluate_run(run, dataset.qrels)
                details = {}
                if name == "adapted":
                    ids = sorted(per_query["unadapted"])
                    details["paired_test"] = {"against": f"{method}, unadapted query encoder", "metric": "nDCG@10",
                                              "p_value": paired_p_value(
                                                  np.array([per_query["unadapted"][q]["nDCG@10"] for q in ids]),
                                                  np.array([per_query["adapted"][q]["nDCG@10"] for q in ids]))}
                experiments.append(Experiment(
                    name=f"{label}: {method}, {name}", method=f"{method}, {name} query encoder",
                    dataset=f"scifact ({label})", group=label, queries=len(run),
                    metrics={key: round(value, 4) for key, value in metrics.items()},
                    cost={"seconds_per_query": round(seconds, 4)}, details=details,
                ))
                print(experiments[-1].model_dump_json(), flush=True)
    result = new_result("benchmarks/query_encoder.py", experiments, datasets=datasets,
                        settings={"steps": args.steps, "batch": args.batch, "papers": args.papers},
                        details={"training": training})
    write_result(result, args.output)
    for row in experiments:
        p = row.details.get("paired_test", {}).get("p_value")
        print(f"{row.name:<40} {row.queries:>4} nDCG@10 {row.metrics['nDCG@10']:.4f}" + (f"  p {p:.4f}" if p else ""))


if __name__ == "__main__":
    main()
