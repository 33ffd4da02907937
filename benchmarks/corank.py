"""CoRank benchmark: SciFact test nDCG@10 for the first stage, the trained cross-encoder, pointwise P(yes), vanilla
listwise, sliding window, CoRank and its two controls (token-equivalent truncated text, random draw from the pool),
all over the same hybrid first stage and the embedded LLM; each LLM reranker also fused with the first stage at a
weight declared in advance (LLM_FUSION_WEIGHT); paired randomization tests against the first stage; LLM calls and
tokens per query; feature extraction cost and cache proof.

    nice -n 10 python benchmarks/corank.py --queries 10 --pool 30 --fine-k 10 ...

The SciFact store is opened read-only (default: the one benchmarks/retrieval.py or `strata eval retrieval` built
under .strata/eval/); features and the cross-encoder go to --work. The LLM response cache (llm.cache) makes reruns
cheap, and every answer also goes to a journal under results/llm-journal/ (--llm-journal; past 1 MB it is folded into
a .gz beside it): committed, it carries a long row's answers to a fresh machine, where the rerun replays them and asks
only what is missing. Writes benchmarks/results/corank.json after every method, so a cut-short run keeps what it
finished.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from strata.config import Settings
from strata.corpus import Corpus
from strata.documents.model import Ranking
from strata.eval.beir import load_beir
from strata.eval.results import (
    DatasetRef,
    Experiment,
    QueryRow,
    ResultFile,
    load_result,
    merged,
    new_result,
    repo_relative,
    write_result,
)
from strata.eval.retrieval import _strict_scores, evaluate_run
from strata.llm import TraceSummary, tracing
from strata.stats import paired_p_value
from strata.rerank.crossencoder import cross_encoder_source, trained_fusion, trained_model_dir
from strata.rerank.factory import compact_features, make_reranker
from strata.rerank.fusion import (
    FusedReranker,
    FusionChoice,
    choose_by_mode,
    preferred,
    reordered_by_scores,
    tuned_fusion,
)
from strata.rerank.model import ranking_calls as only_ranking
from strata.rerank.permutation import ParseErrors
from strata.rerank.texts import PaperTexts
from strata.train.cross_encoder import (
    TrainingReport,
    Validation,
    best_epoch,
    fit_and_fuse,
    paper_similarity,
    train_cross_encoder,
)
from strata.train.pairs import TrainingQuery, count_by_source, mined_pairs, passage_of, writes_queries

ROOT = Path(__file__).resolve().parent
SCIFACT = ROOT.parent.parent / "shared" / "data" / "scifact" / "beir"
STORE = ROOT.parent / ".strata" / "eval" / "scifact-ccca1f829cea-6046c948"
JOURNALS = ROOT / "results" / "llm-journal"  # committed LLM answers, so a long row goes on where the last run stopped
METHODS = ["corank", "corank-truncated", "random-pool", "listwise", "pointwise", "cross-encoder", "sliding-window"]
# The weight of every LLM reranker's fused row, declared before any run (equal say for the reranker and the first
# stage): there is no validation split of LLM-judged queries to choose it on, and choosing it on test would not count.
LLM_FUSION_WEIGHT = 0.5
FEATURE_METHODS = {"corank", "corank-truncated"}  # the truncated-text control is matched to the features' tokens


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=STORE, help="SciFact store home (read only)")
    parser.add_argument("--work", type=Path, default=ROOT / "results" / "tmp" / "corank", help="features, model")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "corank.json")
    parser.add_argument("--queries", type=int, default=10, help="first N SciFact test queries (LLM methods)")
    parser.add_argument("--ce-queries", type=int, default=100, help="queries for the cross-encoder vs BM25/hybrid")
    parser.add_argument("--pool", type=int, default=200)
    parser.add_argument("--fine-k", type=int, default=20)
    parser.add_argument("--listwise-depth", type=int, default=20)
    parser.add_argument("--sliding-depth", type=int, default=100)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--stride", type=int, default=10)
    parser.add_argument("--passage-words", type=int, default=120)
    parser.add_argument("--features-input-words", type=int, default=300)
    parser.add_argument("--ce-depth", type=int, default=100)
    parser.add_argument("--train-passages", type=int, default=120, help="LLM-written training queries (0: none)")
    parser.add_argument("--train-validation-written", type=int, default=60,
                        help="LLM-written validation queries of held-out papers (0: their title and sentence queries)")
    parser.add_argument("--train-queries-per-source", type=int, default=3000,
                        help="papers sampled for the LLM-free title and inverse-cloze training queries")
    parser.add_argument("--train-validation-share", type=float, default=None,
                        help="rerank.train_validation_share: papers whose queries are held out (default: the setting's)")
    parser.add_argument("--train-epochs", type=int, default=3)
    parser.add_argument("--train-max-length", type=int, default=256, help="word pieces per (query, passage) pair")
    parser.add_argument("--ce-windows", type=int, default=4,
                        help="rerank.cross_encoder_windows: windows of --passage-words words the cross-encoder reads "
                        "per paper (its best window's score; 1: the first words only, as before 2026-12-05)")
    parser.add_argument("--ce-dev-queries", type=int, default=0,
                        help="SciFact train claims (a labelled dev split) to also choose the cross-encoder's fusion "
                        "weight on: adds '+fusion (dev weight)' rows (0: none)")
    parser.add_argument("--ce-train-labelled", type=int, default=0,
                        help="a supervised control, not the product recipe: train the cross-encoder on this many "
                        "SciFact train claims (those after the first --ce-dev-queries, which choose its epoch and "
                        "fusion weight) and the papers judged relevant to them, instead of on corpus-derived queries")
    parser.add_argument("--no-train", action="store_true", help="skip the cross-encoder unless already trained")
    parser.add_argument("--ce-train-store", type=Path, default=None,
                        help="train the cross-encoder on another corpus's store instead (a transfer test: no SciFact "
                        "paper seen in training, its fusion weight chosen on that corpus's validation queries)")
    parser.add_argument("--methods", nargs="*", default=METHODS, help="rerankers to run, in order")
    parser.add_argument("--listwise-answer", choices=("first-token", "generate"), default="first-token",
                        help="rerank.listwise_answer: score each candidate as the first number, or write the ranking")
    parser.add_argument("--llm-threads", type=int, default=1, help="llm.n_threads (1 is faster on a busy machine)")
    parser.add_argument("--llm-model", default=None, help="llm.model of every LLM reranker (default: llm.model's)")
    parser.add_argument("--llm-journal", type=Path, default=None,
                        help="llm.cache_journal; default results/llm-journal/<output's name>.jsonl: commit it and its "
                        ".gz, and a rerun on a fresh machine replays the answers they hold")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides", type=key_value,
                        help="another setting of the first stage, e.g. search.fusion=scores (repeatable; --store must "
                        "have been built with the same index settings)")
    return parser.parse_args(argv)


def key_value(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not (key and equals):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, e.g. search.fusion=scores; got {text!r}")
    return key, value


def bench_settings(args: argparse.Namespace) -> Settings:
    return Settings.load(
        overrides={
            "store.home": str(args.store),
            "llm.n_threads": args.llm_threads,
            "llm.n_threads_batch": 2,
            "llm.cache_journal": str(args.llm_journal or JOURNALS / f"{args.output.stem}.jsonl"),
            "rerank.listwise_answer": args.listwise_answer,
            "rerank.pool": args.pool,
            "rerank.fine_k": args.fine_k,
            "rerank.listwise_depth": args.listwise_depth,
            "rerank.pointwise_depth": args.listwise_depth,  # the same top 20 as vanilla listwise
            "rerank.fusion_weight": 1.0,  # rerankers unfused (not even by the environment): fused rows are made here
            "rerank.sliding_depth": args.sliding_depth,
            "rerank.window": args.window,
            "rerank.stride": args.stride,
            "rerank.passage_words": args.passage_words,
            "rerank.features_input_words": args.features_input_words,
            "rerank.cross_encoder_depth": args.ce_depth,
            "rerank.cross_encoder_windows": args.ce_windows,
            "rerank.train_passages": args.train_passages,
            "rerank.train_validation_written": args.train_validation_written,
            "rerank.train_queries_per_source": args.train_queries_per_source,
            "rerank.train_epochs": args.train_epochs,
            "rerank.train_max_length": args.train_max_length,
            "rerank.features_path": str(args.work / "features.sqlite3"),
            "rerank.cross_encoder_dir": str(args.work / "cross-encoder"),
        }
        | ({} if args.train_validation_share is None else {"rerank.train_validation_share": args.train_validation_share})
        | ({} if args.llm_model is None else {"llm.model": args.llm_model})
        | dict(args.overrides)
    )


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.settings = bench_settings(args)
        self.dataset = load_beir(SCIFACT)
        self.caps = {name: str(value) if isinstance(value, Path) else value
                     for name, value in vars(args).items() if name not in ("store", "work", "output", "llm_journal")}
        self.experiments: dict[str, Experiment] = {}  # this run's rows, by name
        self.details: dict = {}  # first-stage time, feature passes, cross-encoder training
        self.ndcg: dict[str, dict[str, float]] = {}  # per-query nDCG@10 of this run's rows, for paired tests
        self.earlier = self._earlier_result()

    def _earlier_result(self) -> ResultFile | None:
        """A run of some methods at the same caps (e.g. the cross-encoder after the LLM methods) adds to the last
        result instead of replacing it; rows it measures again are replaced."""
        if not self.args.output.is_file():
            return None
        earlier = load_result(self.args.output)
        return earlier if _comparable(earlier.settings.get("caps", {})) == _comparable(self.caps) else None

    def earlier_cost(self, name: str, key: str) -> float | None:
        """A cost of the earlier result's row `name`, if it has one."""
        rows = [row for row in self.earlier.experiments if row.name == name] if self.earlier else []
        return rows[0].cost.get(key) if rows else None

    def result(self) -> ResultFile:
        llm = self.settings.llm
        this_run = new_result(
            "benchmarks/corank.py",
            list(self.experiments.values()),
            datasets=[DatasetRef(name="scifact", path=repo_relative(SCIFACT, ROOT.parent),
                                 fingerprint=self.dataset.fingerprint, split="test")],
            settings={"caps": self.caps, "rerank": self.settings.rerank.model_dump(mode="json"),
                      "search": self.settings.search.model_dump(mode="json"),
                      "embedding": self.settings.index.embedding.model_dump(mode="json"),
                      "llm": {"backend": llm.backend, "model": llm.model, "n_ctx": llm.n_ctx}},
            details=self.details,
        )  # fmt: skip
        return merged(self.earlier, this_run)

    def save(self) -> None:
        write_result(self.result(), self.args.output)

    def qrels(self, query_ids: list[str]) -> dict[str, dict[str, int]]:
        return {query_id: self.dataset.qrels[query_id] for query_id in query_ids}

    def row(
        self, name: str, rankings: dict[str, Ranking], queries: int, subset: str, parse_errors: dict | None = None,
        against: str | None = None, tuning: dict | None = None, **cost: float,
    ) -> None:
        """One method's scores on `queries` queries of the `subset` ('ce' or 'llm' query set), saved at once; with
        `against` (another row's name in the subset), the paired randomization test of nDCG@10 against it; `tuning`:
        how its fusion weight was chosen."""
        run = {query_id: _strict_scores(ranking) for query_id, ranking in rankings.items()}
        metrics, per_query = evaluate_run(run, self.qrels(list(rankings)))
        self.ndcg[f"{subset}: {name}"] = {qid: scores["nDCG@10"] for qid, scores in per_query.items()}
        details: dict = {} if parse_errors is None else {"parse_errors": parse_errors}
        details |= {} if tuning is None else {"tuning": tuning}
        if against is not None:
            baseline, system = self.ndcg[f"{subset}: {against}"], self.ndcg[f"{subset}: {name}"]
            ids = sorted(baseline)
            # The baseline's mean too: a later run that merges this row may measure its baseline again (report.py
            # then pairs the per-query rows instead of showing this p).
            details["paired_test"] = {"against": against, "metric": "nDCG@10", "p_value": paired_p_value(
                np.array([baseline[q] for q in ids]), np.array([system[q] for q in ids])),
                "baseline_mean": round(float(np.mean([baseline[q] for q in ids])), 4)}
        row = Experiment(
            name=f"{subset}: {name}", method=name, dataset="scifact", group=subset, queries=queries,
            metrics={k: round(v, 4) for k, v in metrics.items()}, cost=cost, details=details,
            per_query=[QueryRow(query_id=query_id, metrics={k: round(v, 6) for k, v in scores.items()})
                       for query_id, scores in sorted(per_query.items())],  # report.py pairs rows of two runs by them
        )  # fmt: skip
        self.experiments[row.name] = row
        print(row.model_dump_json(), flush=True)
        self.save()


def main() -> None:
    args = arguments()
    args.work.mkdir(parents=True, exist_ok=True)
    bench = Bench(args)
    settings = bench.settings
    queries = bench.dataset.queries[: args.queries]
    ce_queries = bench.dataset.queries[: args.ce_queries]
    depth = first_stage_depth(args)
    with Corpus.open(settings) as corpus:
        if not corpus.store.paper_ids():  # else every row reads 0 and training fails far later
            raise SystemExit(f"no papers under {args.store}: build the SciFact store first "
                             "(`strata eval matrix --rows cheap`, as `make reproduce` does)")
        searcher = corpus.searcher
        client = corpus.llm if set(args.methods) - {"cross-encoder"} else None  # the cross-encoder needs no LLM
        started = time.perf_counter()
        hybrid = {query.id: searcher.search(query.text, k=depth) for query in ce_queries}
        bm25 = {query.id: searcher.search(query.text, k=depth, method="bm25") for query in ce_queries}
        bench.details["first_stage_seconds"] = time.perf_counter() - started
        bench.row("bm25", bm25, len(ce_queries), "ce")
        bench.row("hybrid (first stage)", hybrid, len(ce_queries), "ce")
        capped = {query.id: hybrid[query.id] for query in queries}
        bench.row("hybrid (first stage)", capped, len(queries), "llm")

        if FEATURE_METHODS & set(args.methods):  # else keep the earlier run's feature costs
            features(bench, corpus.store, client, capped)
        for method in args.methods:
            if method == "cross-encoder":
                cross_encoder(bench, corpus, hybrid, bm25, capped)
            else:
                listwise_method(bench, corpus.store, client, method, queries, capped)
    print_table(bench.result())


def first_stage_depth(args: argparse.Namespace) -> int:
    """First-stage candidates per query: enough for the deepest reranker."""
    return max(args.pool, args.sliding_depth, args.ce_depth, args.listwise_depth)


def cross_encoder(bench: Bench, corpus: Corpus, hybrid, bm25, capped) -> None:
    settings = bench.settings
    # The training report is kept beside the model, so a later run measuring the same model still reports it.
    report_file = bench.args.work / "cross-encoder" / "training_report.json"
    if cross_encoder_source(settings) is None:
        if bench.args.no_train:
            print("no trained cross-encoder under --work and --no-train given: cross-encoder rows skipped")
            return
        with tracing() as trace, training_corpus(bench.args, settings, corpus) as trained_on:
            if bench.args.ce_train_labelled:
                report = labelled_training(bench, corpus)
            else:
                report = train_cross_encoder(trained_on, trained_on.llm if writes_queries(settings.rerank) else None)
            learned_from = {"corpus": str(trained_on.settings.store.home),
                            "corpus_papers": len(trained_on.store.paper_ids()),
                            "labelled_claims": bench.args.ce_train_labelled}
        report_file.write_text(json.dumps({**report.model_dump(), "llm": trace.summary().model_dump(),
                                           **learned_from}, indent=2))
    if report_file.is_file():
        bench.details["cross_encoder_training"] = json.loads(report_file.read_text())
        bench.save()
    unfused = settings.model_copy(update={"rerank": settings.rerank.model_copy(update={"fusion_weight": 1.0})})
    reranker = make_reranker(unfused, corpus.store, method="cross-encoder")
    # (row suffix, fusion, how it was chosen): the written validation split's choice, and a labelled dev split's
    trained = trained_fusion(settings)
    fusions: list[tuple[str, FusionChoice | None, dict | None]] = [("", trained, None)]
    if bench.args.ce_dev_queries and not bench.args.ce_train_labelled:  # labelled: those claims chose it already
        dev, by_mode = dev_fusion(bench, corpus, reranker)
        tuning = {"split": "scifact train claims", **dev.model_dump(), "by_mode": by_mode}
        fusions.append((" (dev weight)", dev, tuning))
    baselines = {"hybrid": "hybrid (first stage)", "bm25": "bm25"}
    for name, first, subset in (("hybrid", hybrid, "ce"), ("bm25", bm25, "ce"), ("hybrid", capped, "llm")):
        started = time.perf_counter()
        scores = {ranking.query: reranker.scores(ranking.query, ranking) for ranking in first.values()}
        seconds = (time.perf_counter() - started) / max(len(first), 1)
        keep_scores(bench.args.work, f"{subset}-{name}", first, {qid: scores[r.query] for qid, r in first.items()})
        rankings = {qid: reordered_by_scores(ranking, scores[ranking.query], "cross-encoder")
                    for qid, ranking in first.items()}  # fmt: skip
        rescored = Rescored(rankings, "cross-encoder", scores)
        bench.row(f"{name} > cross-encoder", rankings, len(first), subset, against=baselines[name],
                  seconds_per_query=round(seconds, 2))
        for suffix, fusion, tuning in fusions:
            # Fusion reuses the rescoring above: the same scores, fused with the first stage as validation chose.
            weight, mode = (1.0, "rank") if fusion is None else (fusion.weight, fusion.mode)
            fused_reranker = FusedReranker(rescored, weight, settings.search.rrf_k, mode)
            fused = {qid: fused_reranker.rank(ranking.query, ranking) for qid, ranking in first.items()}
            bench.row(f"{name} > cross-encoder+fusion{suffix}", fused, len(first), subset, against=baselines[name],
                      tuning=tuning, fusion_weight=weight, seconds_per_query=round(seconds, 2))


def labelled_training(bench: Bench, corpus: Corpus) -> TrainingReport:
    """The supervised control: --ce-train-labelled SciFact train claims, each with every paper judged relevant to it
    as a positive and first-stage hits as negatives (the claim's other judged papers never among them); the first
    --ce-dev-queries train claims choose the epoch and the fusion weight. No test claim is used."""
    args, settings = bench.args, bench.settings
    if not args.ce_dev_queries:
        raise SystemExit("--ce-train-labelled needs --ce-dev-queries: the claims that choose the epoch and the weight")
    started = time.perf_counter()
    split = load_beir(SCIFACT, split="train")
    claims = split.queries[args.ce_dev_queries : args.ce_dev_queries + args.ce_train_labelled]
    texts, known = PaperTexts(corpus.store), set(corpus.store.paper_ids())
    similarity = paper_similarity(corpus)
    pairs, dropped, queries = [], 0, 0
    for claim in claims:
        judged = sorted(pid for pid, grade in split.qrels.get(claim.id, {}).items() if grade > 0 and pid in known)
        positives = [TrainingQuery(query=claim.text, paper_id=pid, source="labelled",
                                   positive=passage_of(texts, "labelled", pid, settings.rerank.passage_words,
                                                      claim.text, settings.rerank.cross_encoder_windows))
                     for pid in judged]  # fmt: skip
        mined, lost = mined_pairs(positives, corpus.searcher, texts, settings.rerank, similarity, exclude=judged)
        pairs += mined
        dropped += lost
        queries += len(positives)
    dev = {query.id: query.text for query in split.queries[: args.ce_dev_queries]}
    validation = Validation(dev, split.qrels, corpus, settings.rerank.cross_encoder_depth)
    first_stage = validation.ndcg({qid: ranking.paper_ids for qid, ranking in validation.first.items()})
    generated_at = time.perf_counter()
    print(f"{len(claims)} claims, {queries} (claim, judged paper) queries, {len(pairs)} pairs; first stage dev "
          f"nDCG@10 {first_stage:.4f}", flush=True)
    epochs, fusion = fit_and_fuse(corpus, pairs, validation, trained_model_dir(settings))
    return TrainingReport(
        model_dir=str(trained_model_dir(settings)), queries={"labelled": queries}, failed_llm_queries=0,
        pairs=count_by_source(pairs), dropped_false_negatives=dropped, validation_queries={"labelled": len(dev)},
        first_stage_validation=first_stage, epochs=epochs, best_epoch=best_epoch(epochs), fusion=fusion,
        generation_seconds=generated_at - started, training_seconds=time.perf_counter() - generated_at,
    )  # fmt: skip


@contextmanager
def training_corpus(args: argparse.Namespace, settings: Settings, scifact: Corpus) -> Iterator[Corpus]:
    """The corpus the cross-encoder learns from: SciFact's own, or --ce-train-store's."""
    if args.ce_train_store is None:
        yield scifact
        return
    other = settings.model_copy(update={"store": settings.store.model_copy(update={"home": args.ce_train_store})})
    with Corpus.open(other) as corpus:
        yield corpus


def dev_fusion(bench: Bench, corpus: Corpus, reranker) -> tuple[FusionChoice, dict[str, dict]]:
    """The cross-encoder's fusion chosen on the first --ce-dev-queries SciFact train claims: a labelled dev split of
    the same task (never test), against which the written validation split's choice can be judged. Also each mode's
    own choice, so score fusion is reported when ranks win, and ranks when scores win."""
    dev = load_beir(SCIFACT, split="train")
    chosen = {query.id: query.text for query in dev.queries[: bench.args.ce_dev_queries]}
    validation = Validation(chosen, dev.qrels, corpus, first_stage_depth(bench.args))
    scores = validation.scores(reranker)
    keep_scores(bench.args.work, "dev", validation.first, scores)
    by_mode = choose_by_mode(validation.first, scores, validation.query_ndcg, "nDCG@10",
                             max_p=bench.settings.search.fusion_max_p)
    return preferred(by_mode), {mode: choice.model_dump() for mode, choice in by_mode.items()}


def keep_scores(
    work: Path, label: str, first: Mapping[str, Ranking], scores: Mapping[str, Mapping[str, float]]
) -> None:
    """Each query's first-stage ranking and cross-encoder scores, under --work, so other fusions can be studied
    without scoring again (the scores take most of a cross-encoder row's time)."""
    kept = {qid: {"first": [[c.paper_id, c.score] for c in ranking.candidates], "scores": dict(scores[qid])}
            for qid, ranking in first.items()}  # fmt: skip
    (work / "scores").mkdir(exist_ok=True)
    (work / "scores" / f"{label}.json").write_text(json.dumps(kept), encoding="utf-8")


class Rescored:
    """A reranker answering with rankings (and scores, where it has them) already computed, looked up by query text,
    so fusing them costs no second rescoring."""

    def __init__(self, rankings: dict[str, Ranking], name: str,
                 scores: dict[str, dict[str, float]] | None = None) -> None:
        self.name, self.by_text_scores = name, scores or {}
        self.by_query = {ranking.query: ranking for ranking in rankings.values()}
        if len(self.by_query) != len(rankings):
            raise ValueError("two queries share a text: their rankings cannot be told apart")

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        return self.by_query[query]

    def scores(self, query: str, candidates: Ranking) -> dict[str, float]:
        return self.by_text_scores[query]


def features(bench: Bench, store, client, capped: dict[str, Ranking]) -> None:
    """Extract features for every pooled candidate, then again from a fresh cache reader: the second pass must
    make no LLM call."""
    pool = [c.paper_id for ranking in capped.values() for c in ranking.candidates[: bench.args.pool]]
    documents = len(set(pool))
    passes = []
    for attempt in ("first", "second"):
        extractor = compact_features(bench.settings, PaperTexts(store), client)
        with tracing() as trace:
            report = extractor.ensure(pool)
        summary = trace.summary()
        fresh = max(summary.calls - summary.cache_hits, 0)
        attempted = max(report.extracted + len(report.failed), 1)
        passes.append(
            {
                "pass": attempt,
                **report.model_dump(exclude={"failed"}),
                "failed": len(report.failed),
                "llm": summary.model_dump(),
                "per_document": {  # per document sent to the LLM, failed extractions included
                    "llm_calls": summary.calls / attempted,
                    "tokens_in": summary.tokens_in / attempted,
                    "tokens_out": summary.tokens_out / attempted,
                    "seconds": report.seconds / attempted,
                    "uncached_llm_calls": fresh,
                },
            }
        )
        print(json.dumps(passes[-1]), flush=True)
    bench.details["features"] = {"documents": documents, "passes": passes}
    bench.save()


def listwise_method(bench: Bench, store, client, method: str, queries, capped: dict[str, Ranking]) -> None:
    reranker = make_reranker(bench.settings, store, client, method=method)
    rankings: dict[str, Ranking] = {}
    summaries: list[TraceSummary] = []
    computed: list[float] = []  # seconds of each call the model answered (not the cache)
    started = time.perf_counter()
    for query in queries:
        with tracing() as trace:
            rankings[query.id] = reranker.rank(query.text, capped[query.id])
        # feature extraction happened in its own phase; count only the ranking prompts here
        ranking_calls = only_ranking(trace)
        summaries.append(ranking_calls.summary())
        computed += [call.latency_s for call in ranking_calls.calls if not call.cache_hit]
    seconds = time.perf_counter() - started
    total = TraceSummary.total(summaries)
    if isinstance(reranker, FusedReranker):
        raise ValueError("the benchmark measures rerankers unfused (rerank.fusion_weight 1)")
    llm = getattr(reranker, "llm", None)  # the listwise ones parse written lists; pointwise scores, parses nothing
    errors: ParseErrors = llm.errors if llm is not None else ParseErrors()
    n = max(len(queries), 1)
    cost = {
        "llm_calls_per_query": round(total.calls / n, 2),
        "tokens_in_per_query": round(total.tokens_in / n, 1),
        "tokens_out_per_query": round(total.tokens_out / n, 1),
        "seconds_per_query": round(seconds / n, 1),
        "cache_hits": total.cache_hits,
    }
    if computed:  # a row resumed from the cache: its wall clock says little, the calls the model answered do
        cost["llm_seconds_per_query"] = round(total.calls / n * sum(computed) / len(computed), 1)
    elif (measured := bench.earlier_cost(f"llm: hybrid > {method}", "llm_seconds_per_query")) is not None:
        cost["llm_seconds_per_query"] = measured  # replayed whole from the cache: what the run that asked measured
    bench.row(f"hybrid > {method}", rankings, len(queries), "llm", against="hybrid (first stage)", **cost,
              parse_errors=errors.model_dump())
    fusion = FusedReranker(Rescored(rankings, method), LLM_FUSION_WEIGHT, bench.settings.search.rrf_k)
    fused = {query.id: fusion.rank(capped[query.id].query, capped[query.id]) for query in queries}
    bench.row(f"hybrid > {method}+fusion", fused, len(queries), "llm", against="hybrid (first stage)", **cost,
              fusion_weight=LLM_FUSION_WEIGHT)
    tuned = tuned_fusion(bench.settings, method)  # None: never tuned at this row's model and caps
    if tuned is not None:
        fusion = FusedReranker(Rescored(rankings, method), tuned.fusion.weight, bench.settings.search.rrf_k)
        fused = {query.id: fusion.rank(capped[query.id].query, capped[query.id]) for query in queries}
        bench.row(f"hybrid > {method}+fusion (tuned)", fused, len(queries), "llm", against="hybrid (first stage)",
                  **cost, fusion_weight=tuned.fusion.weight, tuning=tuned.model_dump(exclude={"rerank"}))


def _comparable(caps: dict) -> dict:
    """The caps that decide what a row means (not which methods ran, nor how many threads they had; a cap left
    unset or empty equals one a run made before it existed), in their JSON form: a result file read back holds
    lists where this run holds tuples (--set's pairs)."""
    plain = json.loads(json.dumps(caps))
    return {name: value for name, value in plain.items()
            if name not in ("methods", "no_train", "llm_threads") and value not in (None, [])}


def print_table(result: ResultFile) -> None:
    header = f"{'method':<44} {'set':<4} {'q':>4} {'nDCG@10':>8} {'R@10':>6} {'calls/q':>8} {'tok_in/q':>9} {'s/q':>6}"
    print("\n" + header + "\n" + "-" * len(header))
    for row in result.experiments:
        cost = row.cost
        print(
            f"{row.method:<44} {row.group:<4} {row.queries:>4} {row.metrics['nDCG@10']:>8.4f} "
            f"{row.metrics['R@10']:>6.3f} {cost.get('llm_calls_per_query', 0):>8} "
            f"{cost.get('tokens_in_per_query', 0):>9} {cost.get('seconds_per_query', 0):>6}"
        )
    if "features" in result.details:
        features = result.details["features"]
        first, second = features["passes"]
        print(
            f"\nfeatures: {features['documents']} documents; first pass {first['extracted']} extracted, "
            f"{first['per_document']['tokens_in']:.0f} tokens in / {first['per_document']['tokens_out']:.0f} out and "
            f"{first['per_document']['seconds']:.1f}s per document; second pass {second['llm']['calls']} LLM calls"
        )


if __name__ == "__main__":
    main()
