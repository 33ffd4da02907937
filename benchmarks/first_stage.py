"""The hybrid first stage's two choices on SciFact (#19): what the dense index embeds (each chunk, or each chunk and
each of its sentences: `index.embedding.sentences`) and how BM25 and dense are fused (`search.fusion`: reciprocal
rank fusion, or min-max scaled scores at `search.dense_weight`). The weight is chosen on SciFact train claims (a
labelled dev split) and only then measured on the 300 test queries; every variant is tested against the default
(chunk vectors, RRF) on the same queries with the paired randomization test.

    python benchmarks/first_stage.py --chunk-store STORE --sentence-store STORE [--dev-queries 809]

Each store is a SciFact eval store `strata eval retrieval` built (`--index.embedding.sentences true` for the second;
the first is the default one every SciFact benchmark reads). The searches are the product's own
(`strata.retrieve.hybrid.HybridSearcher`), so a row is what `strata search` returns under those settings.

Writes benchmarks/results/first_stage.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from corank import SCIFACT, STORE
from strata.config import Settings
from strata.corpus import Corpus
from strata.eval.beir import BeirDataset, load_beir
from strata.eval.results import DatasetRef, Experiment, QueryRow, new_result, repo_relative, write_result
from strata.eval.retrieval import evaluate_run
from strata.stats import paired_p_value

ROOT = Path(__file__).resolve().parent
WEIGHTS = [round(weight, 1) for weight in np.arange(0.1, 1.0, 0.1)]
DEPTH = 100  # papers ranked per query: nDCG@10 and R@100
Run = dict[str, dict[str, float]]  # query id -> paper id -> score


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk-store", type=Path, default=STORE, help="SciFact store, chunk vectors (read only)")
    parser.add_argument("--sentence-store", type=Path, required=True,
                        help="SciFact store built with --index.embedding.sentences true (read only)")
    parser.add_argument("--dev-queries", type=int, default=809, help="first N SciFact train claims (dev)")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "first_stage.json")
    return parser.parse_args()


def search_run(store: Path, sentences: bool, fusion: str, weight: float, split: BeirDataset) -> tuple[Run, float]:
    """Each query's top DEPTH papers by the product's hybrid search, and the mean seconds per query."""
    settings = Settings.load(overrides={
        "store.home": str(store), "index.embedding.sentences": sentences, "search.fusion": fusion,
        "search.dense_weight": weight,
    })
    with Corpus.open(settings) as corpus:
        started = time.perf_counter()
        # Scores from ranks, so that ties are kept in the search's own order (ir_measures would reorder them).
        run = {query.id: {candidate.paper_id: float(DEPTH - candidate.rank)
                          for candidate in corpus.searcher.search(query.text, k=DEPTH).candidates}
               for query in split.queries}
        return run, (time.perf_counter() - started) / len(split.queries)


def scored(run: Run, split: BeirDataset) -> dict[str, dict[str, float]]:
    return evaluate_run(run, {qid: split.qrels[qid] for qid in run})[1]


def mean(per_query: Mapping[str, Mapping[str, float]], metric: str = "nDCG@10") -> float:
    return float(np.mean([values[metric] for values in per_query.values()]))


def experiment(name: str, split_name: str, per_query: dict[str, dict[str, float]], seconds: float,
               baseline: dict[str, dict[str, float]] | None, details: dict) -> Experiment:
    if baseline is not None:
        ids = sorted(per_query)
        p_value = paired_p_value(np.array([baseline[qid]["nDCG@10"] for qid in ids]),
                                 np.array([per_query[qid]["nDCG@10"] for qid in ids]))
        details = details | {"paired_test": {"against": f"{split_name}: chunk vectors, rrf", "metric": "nDCG@10",
                                             "p_value": p_value}}
    return Experiment(
        name=f"{split_name}: {name}", method=name, dataset="scifact", subset=split_name, queries=len(per_query),
        metrics={metric: mean(per_query, metric) for metric in ("nDCG@10", "R@100")},
        cost={"seconds_per_query": seconds},
        per_query=[QueryRow(query_id=qid, metrics={"nDCG@10": values["nDCG@10"]}) for qid, values in per_query.items()],
        details=details,
    )


def main() -> None:
    args = arguments()
    splits = {"dev": load_beir(SCIFACT, split="train"), "test": load_beir(SCIFACT)}
    splits["dev"] = splits["dev"].model_copy(update={"queries": splits["dev"].queries[: args.dev_queries]})
    experiments: list[Experiment] = []
    baseline: dict[str, dict[str, dict[str, float]]] = {}
    for vectors, store, sentences in (("chunk", args.chunk_store, False), ("sentence", args.sentence_store, True)):
        for fusion in ("rrf", "scores"):
            curve: dict[float, float] = {}
            chosen = 0.5
            if fusion == "scores":  # the dense weight, chosen on dev (ties: nearer an even split)
                curve = {weight: mean(scored(search_run(store, sentences, fusion, weight, splits["dev"])[0],
                                             splits["dev"])) for weight in WEIGHTS}
                chosen = max(curve, key=lambda weight: (round(curve[weight], 10), -abs(weight - 0.5)))
            name = f"{vectors} vectors, {fusion}"  # the chosen weight is in the row's details
            for split_name, split in splits.items():
                run, seconds = search_run(store, sentences, fusion, chosen, split)
                per_query = scored(run, split)
                details = {"dense_weight": chosen, "dev_curve": curve} if curve else {}
                experiments.append(experiment(name, split_name, per_query, seconds, baseline.get(split_name), details))
                baseline.setdefault(split_name, per_query)  # the first variant is the default: chunk vectors, RRF
                row = experiments[-1]
                p_value = row.details.get("paired_test", {}).get("p_value", float("nan"))
                print(f"{row.name:32} dense weight {chosen} nDCG@10 {row.metrics['nDCG@10']:.4f}  p {p_value:.4f}",
                      flush=True)
    datasets = [DatasetRef(name="scifact", path=repo_relative(SCIFACT, ROOT.parent),
                           fingerprint=splits["test"].fingerprint, split="train (dev) and test")]
    write_result(new_result("benchmarks/first_stage.py", experiments, datasets=datasets), args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
