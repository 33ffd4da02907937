"""Lit3R retriever benchmark: candidate-paper recall@1/@10/@50 of Retrieve (Ranking A) and Relate (A+B).

    nice -n 10 python benchmarks/lit3r_retrieval.py --part no-llm            # every question, no LLM
    nice -n 10 python benchmarks/lit3r_retrieval.py --part llm --llm-questions 10
    nice -n 10 python benchmarks/lit3r_retrieval.py --part weights --datasets scifact   # choose Relate's fusion

On SciFact test claims (BEIR qrels; gold = cited abstracts) and the LitQA2 questions over their 39 PDFs (gold = the
PDF of the question's source DOI). Rows:
  hybrid              plain hybrid BM25 + dense search (no PRF), the question as query
  A                   Retrieve without an LLM: the question alone, hybrid + PRF, reranked (one round)
  A+B, A+B -signal    ... plus Relate, and Relate with each of its three signals removed in turn
  llm subset: ...     on a capped subset (half multi-gold where possible): the same rows, then 'A llm' rows with
                      the embedded LLM's decomposition and verification (up to 3 rounds) before the same Relate rows
  weights             on SciFact's train claims (never the test ones): the A+B fusion grid (relate.keep_a,
                      relate.weight_b) and the setting chosen by `choose_fusion`'s rule
Each Relate row reuses its question's retrieval run, so rows differ only in Relate. Recall@k is per question
|gold ∩ top k| / |gold|, averaged; claims citing several abstracts are also reported alone (multi-gold).
LLM calls/tokens per question come from the trace (cache hits included, and counted); wall times are per question.
Stores are only read; paper vectors are cached under results/tmp/lit3r/. Results merge into
benchmarks/results/lit3r_retrieval.json (rows replaced by dataset and name) and this run's rows print as a table.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from strata.config import Settings
from strata.corpus import Corpus
from strata.stats import paired_p_value
from strata.eval.datasets import EvalQuery, load_dataset
from strata.eval.results import DatasetRef, Experiment, ResultFile, merged, new_result, repo_relative, update_result
from strata.llm import LLMClient, Trace, TraceSummary, make_client
from strata.relate import expand_and_fuse
from strata.rerank import make_reranker
from strata.retrieve.iterative import QuestionRetriever
from strata.retrieve.rounds import RetrievalRun

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
DATA = REPO.parent / "shared" / "data"
RESULTS = ROOT / "results"
VECTOR_CACHE = RESULTS / "tmp" / "lit3r"
STORES = {
    "scifact": REPO / ".strata" / "eval" / "scifact-ccca1f829cea-6046c948",
    "litqa2": REPO / ".strata" / "litqa2",
}
DATASETS = {"scifact": (DATA / "scifact" / "beir", "test"), "litqa2": (DATA / "litqa2", None)}
VALIDATION_SPLIT = "train"  # BEIR SciFact's train claims: where Relate's fusion is chosen
FUSION_GRID = [(keep, weight) for keep in (0, 3, 5, 10) for weight in (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)]
KS = (1, 10, 50)
SIGNALS = ("embedding", "references", "bm25")
# Relate variants: row suffix -> relate settings
RELATE_VARIANTS: dict[str, dict[str, object]] = {
    "": {"relate.enabled": False},
    "+B": {},
    **{f"+B -{signal}": {f"relate.{signal}": False} for signal in SIGNALS},
}


class Row(BaseModel):
    dataset: str
    name: str
    questions: int
    recall: dict[str, float] = Field(description="recall@k over all questions, keys 'R@1', 'R@10', 'R@50'")
    multi_gold_questions: int
    multi_gold_recall: dict[str, float]
    single_gold_recall: dict[str, float] = Field(
        default_factory=dict, description="recall@k over the questions with one gold paper (empty in earlier rows)"
    )
    llm_calls_per_question: float = 0.0
    llm_cache_hits_per_question: float = 0.0
    tokens_in_per_question: float = 0.0
    tokens_out_per_question: float = 0.0
    retrieve_seconds_per_question: float = Field(description="Wall time of the retrieval loop (LLM included)")
    relate_seconds_per_question: float = Field(default=0.0, description="Wall time of Relate and the fusion")
    rounds_per_question: float = 1.0
    reranker: str = "none"
    fusion: str = Field(default="off", description="Relate's A+B fusion (keep_a, weight_b); 'off' without Relate")
    p_vs_relate_off: dict[str, float] = Field(
        default_factory=dict, description="Paired randomization test of per-question recall@k against the same run "
        "with Relate off"
    )


def recall(ids: Sequence[str], gold: dict[str, int], k: int) -> float:
    return len(set(ids[:k]) & set(gold)) / len(gold)


def p_value(queries: list[EvalQuery], baseline: list[list[str]], system: list[list[str]], k: int) -> float:
    """Paired randomization test of per-question recall@k."""
    def per_question(rankings: list[list[str]]) -> np.ndarray:
        return np.array([recall(ranking, query.gold_papers, k) for ranking, query in zip(rankings, queries)])

    return paired_p_value(per_question(baseline), per_question(system))


def summarise(dataset: str, name: str, queries: list[EvalQuery], rankings: list[list[str]], **extra: Any) -> Row:
    multi = [i for i, query in enumerate(queries) if len(query.gold_papers) > 1]
    single = [i for i, query in enumerate(queries) if len(query.gold_papers) == 1]

    def mean_recall(indices: Sequence[int]) -> dict[str, float]:
        return {
            f"R@{k}": sum(recall(rankings[i], queries[i].gold_papers, k) for i in indices) / max(len(indices), 1)
            for k in KS
        }

    return Row(
        dataset=dataset,
        name=name,
        questions=len(queries),
        recall=mean_recall(range(len(queries))),
        multi_gold_questions=len(multi),
        multi_gold_recall=mean_recall(multi),
        single_gold_recall=mean_recall(single),
        **extra,
    )


def settings_for(dataset: str, **overrides: object) -> Settings:
    return Settings.load(
        overrides={
            "store.home": str(STORES[dataset]),
            "relate.paper_vector_cache": str(VECTOR_CACHE / dataset),
            **overrides,
        }
    )


def fusion_of(settings: Settings) -> str:
    relate = settings.relate
    return f"keep_a={relate.keep_a} weight_b={relate.weight_b}" if relate.enabled else "off"


def gold_in_store(queries: list[EvalQuery], corpus: Corpus) -> list[EvalQuery]:
    """Queries with their gold restricted to papers in the store (the LitQA2 loader names a gold PDF the way the PDF
    parser names its paper); queries left without gold are dropped, and counted by the caller."""
    ids = set(corpus.store.paper_ids())
    kept = []
    for query in queries:
        gold = {paper_id: grade for paper_id, grade in query.gold_papers.items() if paper_id in ids}
        if gold:
            kept.append(query.model_copy(update={"gold_papers": gold}))
    return kept


def run_rows(
    dataset: str,
    queries: list[EvalQuery],
    corpus: Corpus,
    client: LLMClient | None,
    prefix: str,
) -> list[Row]:
    """Every Relate variant on one retrieval run per question (with `client`, or without an LLM)."""
    base = settings_for(dataset)
    reranker = make_reranker(base, corpus.store)  # the best offline reranker: cross-encoder if trained, else none
    retriever = QuestionRetriever(corpus.searcher, corpus.store, reranker, base.retrieve, client, base.search.rrf_k)
    runs: list[RetrievalRun] = []
    traces: list[TraceSummary] = []
    started = time.perf_counter()
    for number, query in enumerate(queries, start=1):
        trace = Trace()
        runs.append(retriever.run(query.text, trace))
        traces.append(trace.summary())
        if client is not None:
            print(f"  {dataset} {prefix} {number}/{len(queries)} rounds={len(runs[-1].rounds)} "
                  f"{runs[-1].stop_reason} {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    retrieve_seconds = (time.perf_counter() - started) / len(queries)
    total = TraceSummary.total(traces)
    llm = {
        "llm_calls_per_question": total.calls / len(queries),
        "llm_cache_hits_per_question": total.cache_hits / len(queries),
        "tokens_in_per_question": total.tokens_in / len(queries),
        "tokens_out_per_question": total.tokens_out / len(queries),
        "retrieve_seconds_per_question": retrieve_seconds,
        "rounds_per_question": sum(len(run.rounds) for run in runs) / len(runs),
        "reranker": reranker.name,
    }
    rows = []
    relate_off: list[list[str]] = []
    for suffix, overrides in RELATE_VARIANTS.items():
        settings = settings_for(dataset, **overrides)
        started = time.perf_counter()
        rankings = [expand_and_fuse(run, corpus=corpus, settings=settings).candidates.paper_ids for run in runs]
        relate_seconds = (time.perf_counter() - started) / len(queries)
        relate_off = relate_off or rankings  # the first variant is Relate off
        tests = {f"R@{k}": p_value(queries, relate_off, rankings, k) for k in KS} if rankings is not relate_off else {}
        rows.append(summarise(dataset, f"{prefix}{suffix}", queries, rankings, relate_seconds_per_question=relate_seconds,
                              p_vs_relate_off=tests, fusion=fusion_of(settings), **llm))
        print(format_row(rows[-1]), file=sys.stderr, flush=True)
    return rows


def hybrid_row(dataset: str, queries: list[EvalQuery], corpus: Corpus) -> Row:
    started = time.perf_counter()
    rankings = [corpus.searcher.search(query.text, k=max(KS), method="hybrid", prf=False).paper_ids for query in queries]
    seconds = (time.perf_counter() - started) / len(queries)
    return summarise(dataset, "hybrid", queries, rankings, retrieve_seconds_per_question=seconds)


def fusion_rows(dataset: str, queries: list[EvalQuery], corpus: Corpus) -> list[Row]:
    """A with PRF on (retrieve.prf's earlier default), then A alone and A+B at every (keep_a, weight_b) of the grid
    on one retrieval run per question."""

    def runs_with(prf: bool) -> tuple[list[RetrievalRun], dict[str, float]]:
        base = settings_for(dataset, **{"retrieve.prf": prf})
        retriever = QuestionRetriever(corpus.searcher, corpus.store, make_reranker(base, corpus.store),
                                      base.retrieve, None, base.search.rrf_k)
        started = time.perf_counter()
        runs = [retriever.run(query.text, Trace()) for query in queries]
        return runs, {"retrieve_seconds_per_question": (time.perf_counter() - started) / len(queries)}

    alone = settings_for(dataset, **{"relate.enabled": False})
    prf_runs, prf_seconds = runs_with(True)
    with_prf = [expand_and_fuse(run, corpus=corpus, settings=alone).candidates.paper_ids for run in prf_runs]
    rows = [summarise(row_dataset(dataset, "weights"), f"{VALIDATION_SPLIT}: A +PRF", queries, with_prf, **prf_seconds)]
    runs, seconds = runs_with(False)
    expansions = [expand_and_fuse(run, corpus=corpus, settings=settings_for(dataset)).expansion for run in runs]
    for keep, weight in [(0, 0.0), *FUSION_GRID]:
        overrides = {"relate.keep_a": keep, "relate.weight_b": weight, "relate.enabled": weight > 0}
        settings = settings_for(dataset, **overrides)
        rankings = [
            expand_and_fuse(run, corpus=corpus, settings=settings, expansion=expansion).candidates.paper_ids
            for run, expansion in zip(runs, expansions)
        ]
        name = f"{VALIDATION_SPLIT}: A" if weight == 0 else f"{VALIDATION_SPLIT}: A+B keep_a={keep} weight_b={weight}"
        rows.append(summarise(row_dataset(dataset, "weights"), name, queries, rankings, fusion=fusion_of(settings),
                              **seconds))
        print(format_row(rows[-1]), file=sys.stderr, flush=True)
    return rows


def choose_fusion(rows: list[Row]) -> Row:
    """Relate's job is the other gold papers of a multi-gold question, at no cost to the single-gold ones: the grid row
    with the best multi-gold R@50 among those whose recall at every k, over the single-gold and over the multi-gold
    questions, is no lower than A's alone; A itself when none qualifies. Ties go to the better R@50, R@10, R@1 over
    all questions, then to the earlier row of the grid (fewer kept papers, smaller weight). (The rule first maximised
    R@50 over all questions: on SciFact train that picked a weight whose gain there was single-gold papers, which on
    test it lost.)"""
    alone, grid = rows[0], rows[1:]  # rows without the PRF row

    def no_loss(row: Row) -> bool:
        return all(
            row.single_gold_recall[k] >= alone.single_gold_recall[k]
            and row.multi_gold_recall[k] >= alone.multi_gold_recall[k]
            for k in alone.recall
        )

    def merit(row: Row) -> tuple[float, ...]:
        return row.multi_gold_recall["R@50"], row.recall["R@50"], row.recall["R@10"], row.recall["R@1"]

    allowed = [row for row in grid if no_loss(row)]
    return max(allowed, key=merit, default=alone)


def llm_subset(queries: list[EvalQuery], cap: int) -> list[EvalQuery]:
    """At most `cap` questions, half of them (when there are enough) with several gold papers: the case Relate is
    for; each half in dataset order."""
    multi = [query for query in queries if len(query.gold_papers) > 1][: cap // 2]
    single = [query for query in queries if len(query.gold_papers) == 1][: cap - len(multi)]
    chosen = {query.id for query in multi + single}
    return [query for query in queries if query.id in chosen]


def evaluate(dataset: str, llm_cap: int, part: str) -> tuple[list[Row], dict[str, int]]:
    folder, split = DATASETS[dataset]
    loaded = load_dataset(folder, split=VALIDATION_SPLIT if part == "weights" else split)
    with Corpus.open(settings_for(dataset)) as corpus:
        judged = [q for q in loaded.queries if q.gold_papers]
        queries = gold_in_store(judged, corpus)
        print(f"{dataset}: {len(queries)} questions with gold in the store", file=sys.stderr, flush=True)
        counts = {"questions": len(queries), "questions_without_gold_in_store": len(judged) - len(queries)}
        if part == "weights":
            return fusion_rows(dataset, queries, corpus), counts
        if part == "no-llm":
            return [hybrid_row(dataset, queries, corpus), *run_rows(dataset, queries, corpus, None, "A")], counts
        subset = llm_subset(queries, llm_cap)
        counts["llm_questions"] = len(subset)
        with make_client(Settings.load()) as client:
            rows = [hybrid_row(dataset, subset, corpus).model_copy(update={"name": "llm subset: hybrid"})]
            rows += run_rows(dataset, subset, corpus, None, "llm subset: A no-llm")
            rows += run_rows(dataset, subset, corpus, client, "llm subset: A llm")
        return rows, counts


def format_row(row: Row) -> str:
    recall_text = " ".join(f"{row.recall[f'R@{k}']:.3f}" for k in KS)
    multi_text = " ".join(f"{row.multi_gold_recall[f'R@{k}']:.3f}" for k in KS) if row.multi_gold_questions else "  -"
    return (
        f"{row.dataset:<8} {row.name:<34} {row.questions:>4}  {recall_text}  | {row.multi_gold_questions:>3} "
        f"{multi_text}  | {row.single_gold_recall['R@50']:.3f} | {row.llm_calls_per_question:>5.1f} "
        f"{row.tokens_in_per_question:>7.0f} "
        f"{row.tokens_out_per_question:>5.0f} {row.retrieve_seconds_per_question:>7.2f} "
        f"{row.relate_seconds_per_question:>6.2f}"
    )


HEADER = (
    f"{'dataset':<8} {'row':<34} {'n':>4}  R@1   R@10  R@50   | multi-gold n R@1 R@10 R@50 | 1-gold R@50 | calls "
    "tok_in tok_out ret_s rel_s"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--part", choices=["no-llm", "llm", "weights"], default="no-llm",
                        help="no-llm: every question, no LLM; llm: the capped subset, with and without the LLM; "
                             "weights: Relate's fusion grid on the validation split")
    parser.add_argument("--llm-questions", type=int, default=10, help="Questions per dataset in the LLM rows")
    parser.add_argument("--output", type=Path, default=RESULTS / "lit3r_retrieval.json")
    args = parser.parse_args()
    results = {dataset: evaluate(dataset, args.llm_questions, args.part) for dataset in args.datasets}
    settings = Settings.load()
    llm = {"backend": settings.llm.backend, "model": settings.llm.model, "cache": settings.llm.cache}
    this_run = new_result(
        "benchmarks/lit3r_retrieval.py",
        [experiment(row) for rows, _ in results.values() for row in rows],
        datasets=[
            DatasetRef(name=row_dataset(dataset, args.part), path=repo_relative(DATASETS[dataset][0], REPO),
                       split=VALIDATION_SPLIT if args.part == "weights" else DATASETS[dataset][1])
            for dataset in results
        ],
        settings={"retrieve": settings.retrieve.model_dump(mode="json"),
                  "relate": settings.relate.model_dump(mode="json", exclude={"paper_vector_cache"}), "llm": llm},
    )  # fmt: skip

    def merge(earlier: ResultFile | None) -> ResultFile:
        """Rows of earlier runs (other parts or datasets) are kept; rows of this run replace theirs by name."""
        counts = dict(earlier.details.get("counts", {})) if earlier else {}
        for dataset, (_, measured) in results.items():
            counts[dataset] = {**counts.get(dataset, {}), **measured}
        return merged(earlier, this_run.model_copy(update={"details": {"counts": counts}}))

    update_result(args.output, merge)
    print(HEADER)
    for rows, _ in results.values():
        for row in rows:
            print(format_row(row))
        if args.part == "weights":
            print(f"chosen: {choose_fusion(rows[1:]).name}")


def row_dataset(dataset: str, part: str) -> str:
    """The validation rows are of another split than the test rows, so another dataset entry."""
    return f"{dataset}-{VALIDATION_SPLIT}" if part == "weights" else dataset


def experiment(row: Row) -> Experiment:
    """A row as an experiment: recall (and recall over the single- and the multi-gold questions) as metrics, LLM
    use and time as cost."""
    return Experiment(
        name=f"{row.dataset}: {row.name}",
        method=row.name,
        dataset=row.dataset,
        queries=row.questions,
        metrics={
            **row.recall,
            **{f"multi-gold {k}": value for k, value in row.multi_gold_recall.items()},
            **{f"single-gold {k}": value for k, value in row.single_gold_recall.items()},
        },
        cost=row.model_dump(
            include={"llm_calls_per_question", "llm_cache_hits_per_question", "tokens_in_per_question",
                     "tokens_out_per_question", "retrieve_seconds_per_question", "relate_seconds_per_question"}
        ),
        details=row.model_dump(include={"multi_gold_questions", "rounds_per_question", "reranker", "p_vs_relate_off",
                                        "fusion"}),
    )  # fmt: skip


if __name__ == "__main__":
    main()
