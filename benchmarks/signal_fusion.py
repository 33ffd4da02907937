"""Which first-stage signals the trained cross-encoder should be fused with (#19): BM25, dense, the hybrid's own
(RRF) score, the cross-encoder's MaxP score and an untrained one, the best cosine between the query and one sentence
of the paper (MiniLM, as the dense index, but per sentence: a SciFact claim restates one sentence of its abstract,
which a whole-abstract vector dilutes), each min-max normalised over the hybrid top `--depth` papers and summed at
weights chosen on SciFact train claims (a labelled dev split), then measured on the 300 test queries.

    python benchmarks/signal_fusion.py --work benchmarks/results/tmp/corank-ce-maxp-1200 [--dev-queries 300]

The cross-encoder is the one `benchmarks/corank.py` trained under --work (this script never trains); the store is
the SciFact eval store corank.py reads. The product fuses two signals (the hybrid score and the cross-encoder's:
`strata.rerank.fusion.fuse_scores`); this asks whether a third helps before the product carries it. Every family of
signals gets its weights from a grid on the simplex (step 0.1; 0.2 for four signals), the best on dev (ties: more
weight on the hybrid score); each weighting is then tested against the hybrid order with the paired randomization
test, on dev and on test. Papers below the top --depth keep the hybrid order. Signals are computed once and kept in
--work, so reweighting costs seconds.

Writes benchmarks/results/signal_fusion.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from corank import SCIFACT, STORE, bench_settings
from corank import arguments as corank_arguments
from strata.corpus import Corpus
from strata.eval.beir import BeirDataset, load_beir
from strata.eval.results import DatasetRef, Experiment, new_result, repo_relative, write_result
from strata.eval.retrieval import order_ndcg
from strata.documents.sentences import sentence_spans
from strata.rerank.base import ScoringReranker
from strata.rerank.factory import make_reranker
from strata.rerank.fusion import min_max
from strata.rerank.texts import PaperTexts
from strata.stats import paired_p_value

ROOT = Path(__file__).resolve().parent
SIGNALS = ("hybrid", "bm25", "dense", "sentence", "cross-encoder")
FAMILIES: dict[str, tuple[str, ...]] = {  # the hybrid order alone is the baseline every row is tested against
    "cross-encoder": ("cross-encoder",),
    "sentence": ("sentence",),
    "bm25 + dense": ("bm25", "dense"),
    "hybrid + cross-encoder": ("hybrid", "cross-encoder"),
    "bm25 + dense + cross-encoder": ("bm25", "dense", "cross-encoder"),
    "bm25 + dense + sentence": ("bm25", "dense", "sentence"),
    "bm25 + dense + sentence + cross-encoder": ("bm25", "dense", "sentence", "cross-encoder"),
    "hybrid + bm25 + dense + cross-encoder": ("hybrid", "bm25", "dense", "cross-encoder"),
}
Signals = dict[str, dict]  # query id -> {"ids": head ids, "rest": ids below the head, signal -> scores}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=STORE, help="SciFact store home (read only)")
    parser.add_argument("--work", type=Path, required=True, help="corank.py's --work, holding its cross-encoder")
    parser.add_argument("--dev-queries", type=int, default=300, help="first N SciFact train claims (dev)")
    parser.add_argument("--depth", type=int, default=20, help="hybrid papers whose signals are fused")
    parser.add_argument("--passage-words", type=int, default=80, help="as the cross-encoder was trained with")
    parser.add_argument("--ce-windows", type=int, default=4, help="as the cross-encoder was trained with")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "signal_fusion.json")
    return parser.parse_args()


class SentenceVectors:
    """Every sentence of every paper's abstract (its text without one) after the paper's title, embedded once by the
    dense index's model and kept in --work; the `sentence` signal of a paper is its best sentence's cosine with the
    query. With the title, as the index embeds its chunks: in a prototype on the 809 dev claims (not kept) the best
    sentence alone scored nDCG@10 0.701 with the title, 0.676 without."""

    def __init__(self, corpus: Corpus, path: Path) -> None:
        if not path.is_file():
            owners, sentences = [], []
            texts = PaperTexts(corpus.store)
            for paper_id in corpus.store.paper_ids():
                body = " ".join(texts.body(paper_id))
                for start, end in sentence_spans(body):
                    owners.append(paper_id)
                    sentences.append(f"{texts.title(paper_id)}\n{body[start:end]}")  # as the index titles chunks
            partial = path.with_name(f"{path.stem}.partial.npz")  # a cut-off run leaves no file that loads
            np.savez(partial, vectors=corpus.embedder.embed(sentences), owners=np.array(owners))
            partial.replace(path)
        saved = np.load(path, allow_pickle=False)
        self.vectors = saved["vectors"]
        self.rows: dict[str, list[int]] = {}
        for index, owner in enumerate(saved["owners"].tolist()):
            self.rows.setdefault(owner, []).append(index)

    def best(self, query_vector: np.ndarray, paper_ids: Sequence[str]) -> list[float | None]:
        """Each paper's best sentence cosine (vectors are normalised); None for a paper without sentences."""
        return [float(np.max(self.vectors[self.rows[paper_id]] @ query_vector)) if paper_id in self.rows else None
                for paper_id in paper_ids]  # fmt: skip


def query_signals(corpus: Corpus, reranker: ScoringReranker, sentences: SentenceVectors, text: str, depth: int,
                  pool: int) -> dict:
    """The hybrid top `pool` and each signal's paper scores over its top `depth` (None: no BM25 term matched)."""
    first = corpus.searcher.search(text, k=pool)
    head = first.top(depth)
    ids = head.paper_ids
    row: dict = {"ids": ids, "rest": first.paper_ids[depth:], "hybrid": [c.score for c in head.candidates]}
    for method in ("bm25", "dense"):
        found = corpus.searcher.search(text, k=depth, method=method, paper_ids=ids)
        scores = {candidate.paper_id: candidate.score for candidate in found.candidates}
        row[method] = [scores.get(paper_id) for paper_id in ids]
    cross = reranker.scores(text, head)
    row["cross-encoder"] = [cross[paper_id] for paper_id in ids]
    row["sentence"] = sentences.best(corpus.embedder.embed_query(text), ids)
    return row


def signals(args: argparse.Namespace, splits: Mapping[str, BeirDataset]) -> tuple[dict[str, Signals], float]:
    """Every split's signals and the seconds they took. Each query's are appended to a file in --work as computed, so
    a rerun (more dev claims, other weights, an interrupted run) computes only the queries it lacks."""
    cache = args.work / f"signals-{args.depth}.jsonl"
    known = {}
    if cache.is_file():
        with cache.open(encoding="utf-8") as lines:
            known = {(row["split"], row["query_id"]): row for row in map(json.loads, lines)}
    missing = [(name, query) for name, split in splits.items() for query in split.queries
               if not set(SIGNALS) <= known.get((name, query.id), {}).keys()]  # a later line replaces an older one
    if missing:
        settings = bench_settings(corank_arguments(["--store", str(args.store), "--work", str(args.work),
                                                    "--ce-depth", str(args.depth), "--passage-words",
                                                    str(args.passage_words), "--ce-windows", str(args.ce_windows)]))
        with Corpus.open(settings) as corpus, cache.open("a", encoding="utf-8") as out:
            reranker = make_reranker(settings, corpus.store, method="cross-encoder")  # unfused: bench_settings
            if not isinstance(reranker, ScoringReranker):
                raise SystemExit(f"no trained cross-encoder under {args.work}: run benchmarks/corank.py there first")
            sentences = SentenceVectors(corpus, args.work / "sentences.npz")
            for name, query in missing:
                started = time.perf_counter()
                row = query_signals(corpus, reranker, sentences, query.text, args.depth, 200)
                row |= {"split": name, "query_id": query.id, "seconds": time.perf_counter() - started}
                out.write(json.dumps(row) + "\n")
                out.flush()
                known[(name, query.id)] = row
    computed = {name: {query.id: known[(name, query.id)] for query in split.queries} for name, split in splits.items()}
    return computed, sum(row["seconds"] for rows in computed.values() for row in rows.values())


def reciprocal_rank(values: Sequence[float | None], k: int = 60) -> np.ndarray:
    """1 / (k + rank) of each paper by the signal (ties and unscored papers: hybrid order, unscored last), as the
    hybrid's own reciprocal rank fusion weighs its lists."""
    order = sorted(range(len(values)), key=lambda i: (values[i] is None, -(values[i] or 0.0), i))
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    return 1.0 / (k + ranks)


def normalised(values: Sequence[float | None]) -> np.ndarray:
    """Scores scaled to [0, 1] over the head; a paper the signal did not score counts as its lowest."""
    lowest = min((value for value in values if value is not None), default=0.0)
    return np.array(min_max([lowest if value is None else value for value in values]))


NORMALISATIONS = {"scores": normalised, "ranks": reciprocal_rank}


def fused_run(rows: Signals, weights: Mapping[str, float], fuse: str = "scores") -> dict[str, list[str]]:
    """Each query's ids by the weighted sum of normalised signals (ties: hybrid order), then the rest."""
    run, normalise = {}, NORMALISATIONS[fuse]
    for qid, row in rows.items():
        total = sum((weight * normalise(row[name]) for name, weight in weights.items()), np.zeros(len(row["ids"])))
        order = sorted(range(len(row["ids"])), key=lambda index: (-total[index], index))
        run[qid] = [row["ids"][index] for index in order] + row["rest"]
    return run


def simplex(names: Sequence[str], step: float) -> Iterator[dict[str, float]]:
    parts = round(1 / step)
    for shares in itertools.product(range(parts + 1), repeat=len(names)):
        if sum(shares) == parts:
            yield {name: round(share * step, 3) for name, share in zip(names, shares)}


def mean(values: Mapping[str, float]) -> float:
    return float(np.mean(list(values.values())))


def chosen_on_dev(dev: Signals, qrels: Mapping[str, Mapping[str, int]], names: Sequence[str], fuse: str
                  ) -> tuple[dict[str, float], float]:
    """The weights (and their dev nDCG@10) scoring best on dev; ties: more weight on the hybrid score."""
    step = 0.2 if len(names) > 3 else 0.1
    scored = [(mean(order_ndcg(fused_run(dev, weights, fuse), qrels)), weights) for weights in simplex(names, step)]
    score, weights = max(scored, key=lambda item: (round(item[0], 12), item[1].get("hybrid", 0.0)))
    return weights, score


def main() -> None:
    args = arguments()
    splits = {"dev": load_beir(SCIFACT, split="train"), "test": load_beir(SCIFACT)}
    splits["dev"] = splits["dev"].model_copy(update={"queries": splits["dev"].queries[: args.dev_queries]})
    computed, seconds = signals(args, splits)
    # Every fused order is scored in its exact order (ranks as scores), the hybrid's too.
    hybrid = {name: order_ndcg(fused_run(computed[name], {"hybrid": 1.0}), split.qrels)
              for name, split in splits.items()}  # fmt: skip
    experiments = [Experiment(name=f"{name}: hybrid (first stage)", method="hybrid", dataset="scifact", group=name,
                              queries=len(values), metrics={"nDCG@10": round(mean(values), 4)})
                   for name, values in hybrid.items()]  # fmt: skip
    dev_best: dict[str, float] = {}
    for family, names in FAMILIES.items():
        for fuse in NORMALISATIONS if len(names) > 1 else ("scores",):
            method = family if len(names) == 1 else f"{family} ({fuse})"
            weights, dev_best[method] = chosen_on_dev(computed["dev"], splits["dev"].qrels, names, fuse)
            for name, split in splits.items():
                values = order_ndcg(fused_run(computed[name], weights, fuse), split.qrels)
                ids = sorted(values)
                p_value = paired_p_value(np.array([hybrid[name][q] for q in ids]), np.array([values[q] for q in ids]))
                experiments.append(Experiment(
                    name=f"{name}: {method}", method=method, dataset="scifact", group=name, queries=len(values),
                    metrics={"nDCG@10": round(mean(values), 4)},
                    details={"weights": weights, "fused": fuse, "chosen_on": "dev", "against": "hybrid (first stage)",
                             "p_value": p_value}))  # fmt: skip
    pick = max(dev_best, key=lambda method: (round(dev_best[method], 12), method))
    result = new_result(
        "benchmarks/signal_fusion.py", experiments,
        datasets=[DatasetRef(name="scifact", path=repo_relative(SCIFACT, ROOT.parent),
                             fingerprint=split.fingerprint, split=split.split) for split in splits.values()],
        settings={"depth": args.depth, "dev_queries": args.dev_queries, "passage_words": args.passage_words,
                  "ce_windows": args.ce_windows, "work": repo_relative(args.work, ROOT.parent)},
        details={"signal_seconds": round(seconds, 1), "dev_pick": pick},
    )  # fmt: skip
    write_result(result, args.output)
    for row in experiments:
        p_value = row.details.get("p_value")
        print(f"{row.name:<56} {row.queries:>4} {row.metrics['nDCG@10']:.4f} "
              f"{'' if p_value is None else f'p {p_value:.3f}'} {row.details.get('weights', '')}")
    print(f"dev's pick: {pick}")


if __name__ == "__main__":
    main()
