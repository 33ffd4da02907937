"""The int8 query encoder (`index.embedding.query_int8`) on SciFact: what it costs in quality and saves in time.

    python benchmarks/query_int8.py [--store .strata/eval/scifact-...]

Quality: dense and hybrid nDCG@10 with the float and the int8 query encoder, on the 300 test claims and the 809
train claims (a second set: nothing is chosen here), with paired randomization tests against float. The documents'
vectors are the store's, embedded by the float model either way. Time: one thread, each test claim embedded alone by
each encoder in turn (interleaved, so load on the machine falls on both alike), as a search embeds it; the ratio is
the comparison, absolute milliseconds move with the machine's load (recorded). Writes
benchmarks/results/query_int8.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from strata.config import Settings
from strata.encoders.embedder import Embedder
from strata.eval.beir import BeirDataset, load_beir
from strata.stats import paired_p_value
from strata.eval.results import DatasetRef, Experiment, new_result, repo_relative, write_result
from strata.eval.retrieval import run_retrieval_eval

ROOT = Path(__file__).resolve().parent
SCIFACT = ROOT.parent.parent / "shared" / "data" / "scifact" / "beir"
STORE = ROOT.parent / ".strata" / "eval" / "scifact-ccca1f829cea-6046c948"
SPLITS = {"test": "test", "train claims": "train"}
VARIANTS = {"float": False, "int8": True}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=STORE, help="SciFact store home (its indices are only read)")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "query_int8.json")
    return parser.parse_args()


def settings_for(store: Path, int8: bool) -> Settings:
    return Settings.load(overrides={"store.home": str(store), "index.embedding.query_int8": int8})


def quality_rows(store: Path, label: str, split: str) -> list[Experiment]:
    rows = []
    for method in ("dense", "hybrid"):
        ndcg = {}
        for name, int8 in VARIANTS.items():
            result = run_retrieval_eval(settings_for(store, int8), SCIFACT, method, split, store_home=store)
            ndcg[name] = {row.query_id: row.metrics["nDCG@10"] for row in result.per_query}
            details = {}
            if int8:
                ids = sorted(ndcg["float"])
                details["paired_test"] = {"against": f"{method}, float query encoder", "metric": "nDCG@10",
                                          "p_value": paired_p_value(np.array([ndcg["float"][q] for q in ids]),
                                                                    np.array([ndcg["int8"][q] for q in ids]))}
            rows.append(Experiment(
                name=f"{label}: {method}, {name}", method=f"{method}, {name} query encoder",
                dataset=f"scifact ({label})", group=label, queries=result.queries,
                metrics={k: round(v, 4) for k, v in result.metrics.items()}, details=details,
            ))  # fmt: skip
            print(rows[-1].model_dump_json(), flush=True)
    return rows


def timing_row(store: Path, dataset: BeirDataset) -> Experiment:
    """Milliseconds per query, one thread, each query alone, the two encoders interleaved query by query."""
    encoders = {name: Embedder(settings_for(store, int8).index.embedding) for name, int8 in VARIANTS.items()}
    texts = [query.text for query in dataset.queries]
    for encoder in encoders.values():
        encoder.embed_queries(texts[:4])  # load and warm up
    spent = dict.fromkeys(encoders, 0.0)
    for text in texts:
        for name, encoder in encoders.items():
            started = time.perf_counter()
            encoder.embed_query(text)
            spent[name] += time.perf_counter() - started
    ms = {name: 1000 * seconds / len(texts) for name, seconds in spent.items()}
    row = Experiment(
        name="query embedding, one thread", method="float vs int8", dataset="scifact (test)", group="time",
        queries=len(texts), metrics={},
        cost={"float_ms_per_query": round(ms["float"], 2), "int8_ms_per_query": round(ms["int8"], 2),
              "int8_time_ratio": round(ms["int8"] / ms["float"], 3)},
    )  # fmt: skip
    print(row.model_dump_json(), flush=True)
    return row


def main() -> None:
    args = arguments()
    experiments: list[Experiment] = []
    datasets = []
    for label, split in SPLITS.items():
        dataset = load_beir(SCIFACT, split)
        datasets.append(DatasetRef(name=f"scifact ({label})", path=repo_relative(SCIFACT, ROOT.parent),
                                   fingerprint=dataset.fingerprint, split=split))  # fmt: skip
        if split == "test":
            experiments.append(timing_row(args.store, dataset))
        experiments += quality_rows(args.store, label, split)
    write_result(new_result("benchmarks/query_int8.py", experiments, datasets=datasets), args.output)
    for row in experiments:
        p = row.details.get("paired_test", {}).get("p_value")
        score = f"nDCG@10 {row.metrics['nDCG@10']:.4f}" if row.metrics else str(row.cost)
        print(f"{row.name:<36} {row.queries:>4} {score}" + (f"  p {p:.4f}" if p is not None else ""))


if __name__ == "__main__":
    main()
