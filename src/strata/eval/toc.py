"""ToC retrieval evaluation on OpenStax ToC-QA (books with author-written questions tied to a section).

Gold is a section (module) path, one level above most leaves. A predicted leaf matches when the gold path is a
prefix of the leaf's path, so a ranking of leaves is read as a ranking of gold-level units: each leaf is cut to the
gold's depth and only its first occurrence counts. R@k is then whether the gold unit is in the top k, and nDCG@3 is
1/log2(1 + rank) of the gold unit (one relevant unit per query). Metrics come from ir_measures (trec_eval). Rankers
return their top K leaves, so R@3 and nDCG@3 read the units of the top 3 leaves: two leaves of one section make
one unit, and a ranker whose top leaves cluster in one section is scored on fewer than 3 units (R@1 is exact).
Hallucination is the share of queries whose free generation names no leaf (methods that generate only).

`run_toc_eval` (`strata eval toc`) ranks every question of a dataset with one method, scores it and writes a
predictions file and a result file (strata.eval.results, which `strata.eval.compare` reads).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal, Protocol

import ir_measures
from pydantic import BaseModel, Field

from strata.config import EmbeddingSettings, LLMSettings, Settings, TocSettings
from strata.eval.datasets import Dataset, load_dataset
from strata.eval.results import DatasetRef, Experiment, QueryRow, new_result, write_result
from strata.llm.trace import TraceSummary
from strata.progress import Progress, tell
from strata.toc.model import DocumentToc, LeafRanking

MEASURES = {"R@1": ir_measures.R @ 1, "R@3": ir_measures.R @ 3, "nDCG@3": ir_measures.nDCG @ 3}
HALLUCINATION = "hallucination"
K = 3  # the deepest cut-off of MEASURES
TocMethod = Literal["bm25", "dense", "llm", "llm-free", "stair", "dsi"]
TOC_METHODS: tuple[TocMethod, ...] = ("bm25", "dense", "llm", "llm-free", "stair", "dsi")
ADAPTER_METHODS = ("stair", "dsi")


class TocQuery(BaseModel):
    query_id: str
    book: str = Field(description="Paper id of the book, as the book parser names it")
    question: str
    gold_path: tuple[str, ...]


class TocQueryResult(BaseModel):
    query_id: str
    book: str
    metrics: dict[str, float]
    predicted: list[str] = Field(description="Leaf labels, best first")
    gold_path: list[str]
    raw_output: str | None = None
    seconds: float


class TocMethodResult(BaseModel):
    """One method on a set of queries (an experiment of a result file: `toc_experiment`)."""

    method: str
    scope: str = Field(description="What the queries are, e.g. 'all', a book id, or a named sample")
    queries: int
    metrics: dict[str, float] = Field(description="Means over the queries")
    latency_ms_mean: float
    latency_ms_p50: float
    per_query: list[TocQueryResult]


def toc_queries(dataset: Dataset) -> list[TocQuery]:
    """The questions of an OpenStax ToC-QA `Dataset` with their gold section."""
    queries = []
    for query in dataset.queries:
        if len(query.gold_sections) != 1:
            raise ValueError(f"{dataset.folder}: query {query.id} has {len(query.gold_sections)} gold sections, not 1")
        (gold,) = query.gold_sections
        queries.append(TocQuery(query_id=query.id, book=gold.paper_id, question=query.text, gold_path=gold.path))
    return queries


def load_toc_queries(book_dir: Path) -> list[TocQuery]:
    """Questions of one book folder (the book's folder or its derived/ folder), or of every book under it."""
    return toc_queries(load_dataset(book_dir, "openstax"))


def score_rankings(queries: Sequence[TocQuery], rankings: Sequence[LeafRanking]) -> list[TocQueryResult]:
    """Per-query metrics; `rankings[i]` answers `queries[i]`."""
    qrels = [ir_measures.Qrel(q.query_id, _unit_id(q.gold_path), 1) for q in queries]
    run: list[ir_measures.ScoredDoc] = []
    for query, ranking in zip(queries, rankings, strict=True):
        units = _units(ranking, len(query.gold_path))
        # Scores strictly fall with rank, so trec_eval's own tie-breaking never reorders the ranking.
        run.extend(ir_measures.ScoredDoc(query.query_id, unit, float(len(units) - i)) for i, unit in enumerate(units))
    values: dict[str, dict[str, float]] = {q.query_id: dict.fromkeys(MEASURES, 0.0) for q in queries}
    names = {measure: name for name, measure in MEASURES.items()}
    for metric in ir_measures.iter_calc(list(MEASURES.values()), qrels, run):
        values[metric.query_id][names[metric.measure]] = float(metric.value)
    results = []
    for query, ranking in zip(queries, rankings):
        metrics = values[query.query_id]
        if ranking.raw_output is not None:
            metrics[HALLUCINATION] = float(ranking.hallucinated)
        results.append(
            TocQueryResult(
                query_id=query.query_id,
                book=query.book,
                metrics=metrics,
                predicted=[leaf.label for leaf in ranking.leaves],
                gold_path=list(query.gold_path),
                raw_output=ranking.raw_output,
                seconds=ranking.seconds,
            )
        )
    return results


def _units(ranking: LeafRanking, depth: int) -> list[str]:
    """Predicted leaves cut to the gold's depth, first occurrence of each."""
    return list(dict.fromkeys(_unit_id(leaf.path[:depth]) for leaf in ranking.leaves))


def _unit_id(path: Iterable[str]) -> str:
    return " > ".join(path)


def summarise(method: str, scope: str, results: Sequence[TocQueryResult]) -> TocMethodResult:
    names = sorted({name for result in results for name in result.metrics})
    seconds = [result.seconds for result in results] or [0.0]
    return TocMethodResult(
        method=method,
        scope=scope,
        queries=len(results),
        metrics={name: statistics.fmean(r.metrics[name] for r in results if name in r.metrics) for name in names},
        latency_ms_mean=1000 * statistics.fmean(seconds),
        latency_ms_p50=1000 * statistics.median(seconds),
        per_query=list(results),
    )


# `strata eval toc`


class TocModelUse(BaseModel):
    """What the method asked of its models (LLM methods), for cost reporting."""

    generations: TraceSummary = Field(description="Traced free-text LLM calls (llama.cpp): count and tokens")
    constrained_steps: int = Field(description="Next-token evaluations of the trie-constrained search (llama.cpp)")
    prompt_tokens: int = Field(description="Prompt tokens given to the fine-tuned model (transformers)")


class TocEvalResult(BaseModel):
    dataset: str
    dataset_dir: str
    dataset_fingerprint: str = Field(description="sha256 over the dataset files read (ToC, sections, questions)")
    book: str = Field(description="The book evaluated, or 'all'")
    method: TocMethod
    queries: int
    metrics: dict[str, float] = Field(description="Means over all questions")
    per_book: dict[str, dict[str, float]] = Field(description="Book paper id -> means over its questions")
    models: dict[str, str] = Field(description="Role -> model identity")
    adapter: str | None = Field(default=None, description="LoRA adapter folder (stair, dsi)")
    toc: TocSettings
    embedding: EmbeddingSettings | None = None
    llm: LLMSettings | None = None
    model_use: TocModelUse | None = None
    setup_seconds: float = Field(description="Parsing the books and loading or building the ranker")
    wall_seconds: float = Field(description="The whole evaluation, end to end")
    latency_ms_mean: float
    latency_ms_p50: float
    per_query: list[TocQueryResult]
    predictions_file: str | None = None
    result_file: str | None = None


class _Ranker(Protocol):
    models: dict[str, str]

    def rank_book(self, toc: DocumentToc, queries: Sequence[TocQuery]) -> list[LeafRanking]: ...

    def model_use(self) -> TocModelUse | None: ...


def run_toc_eval(
    settings: Settings,
    dataset_dir: Path,
    method: TocMethod,
    book: str | None = None,
    adapter: Path | None = None,
    output_dir: Path | None = None,
    progress: Progress | None = None,
) -> TocEvalResult:
    """Rank every question of the OpenStax ToC-QA dataset in `dataset_dir` (or of one `book`) with `method` over its
    book's ToC; writes `{stem}.predictions.jsonl` and `{stem}.json` to `output_dir`."""
    from strata.documents.parsers import iter_papers
    from strata.toc.tree import document_toc

    started = time.perf_counter()
    if method not in TOC_METHODS:
        raise ValueError(f"unknown ToC method {method!r}; known: {', '.join(TOC_METHODS)}")
    if (method in ADAPTER_METHODS) != (adapter is not None):
        raise ValueError(f"--adapter is {'required' if adapter is None else 'only for stair and dsi'} for {method}")
    dataset = load_dataset(dataset_dir, "openstax", book)
    queries = toc_queries(dataset)
    papers = [paper for folder in dataset.corpus for paper in iter_papers(folder, settings.parsing)]
    tocs = {paper.id: document_toc(paper) for paper in papers}
    orphans = sorted({q.book for q in queries} - set(tocs))
    if orphans:
        raise ValueError(f"{dataset_dir}: questions of {', '.join(orphans)} but no such book was parsed")
    with ExitStack() as stack:
        ranker = _make_ranker(method, settings, adapter, stack)
        setup_seconds = time.perf_counter() - started
        ordered: list[TocQuery] = []
        rankings: list[LeafRanking] = []
        for paper_id, toc in tocs.items():
            book_queries = [q for q in queries if q.book == paper_id]
            ordered.extend(book_queries)
            rankings.extend(ranker.rank_book(toc, book_queries))
            tell(progress, "questions", len(ordered), len(queries), paper_id)
        model_use = ranker.model_use()
    scored = score_rankings(ordered, rankings)
    overall = summarise(method, dataset.split, scored)
    result = TocEvalResult(
        dataset=dataset.name,
        dataset_dir=str(dataset.folder),
        dataset_fingerprint=dataset.fingerprint,
        book=dataset.split,
        method=method,
        queries=len(scored),
        metrics=overall.metrics,
        per_book={
            paper_id: summarise(method, paper_id, [r for r in scored if r.book == paper_id]).metrics
            for paper_id in tocs
        },
        models=ranker.models,
        adapter=str(adapter) if adapter is not None else None,
        toc=settings.toc,
        embedding=settings.index.embedding if method == "dense" else None,
        llm=settings.llm if method in ("llm", "llm-free") else None,
        model_use=model_use,
        setup_seconds=setup_seconds,
        wall_seconds=time.perf_counter() - started,
        latency_ms_mean=overall.latency_ms_mean,
        latency_ms_p50=overall.latency_ms_p50,
        per_query=scored,
    )
    if output_dir is not None:
        _write_outputs(result, rankings, ordered, Path(output_dir))
    return result


def format_toc_result(result: TocEvalResult) -> str:
    def metrics(values: dict[str, float]) -> str:
        return "  ".join(f"{name} {value:.4f}" for name, value in values.items())

    lines = [f"{result.dataset} ({result.book}, {result.queries} questions) {result.method}: {metrics(result.metrics)}"]
    if len(result.per_book) > 1:
        lines.extend(f"  {paper_id}: {metrics(values)}" for paper_id, values in result.per_book.items())
    lines.append(
        f"latency mean {result.latency_ms_mean:.1f} ms, p50 {result.latency_ms_p50:.1f} ms; "
        f"setup {result.setup_seconds:.1f}s, wall {result.wall_seconds:.1f}s"
    )
    if result.result_file:
        lines.append(f"predictions: {result.predictions_file}  result: {result.result_file}")
    return "\n".join(lines)


def _write_outputs(
    result: TocEvalResult, rankings: Sequence[LeafRanking], queries: Sequence[TocQuery], output_dir: Path
) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{result.dataset}-{result.book}-{result.method}"
    predictions, result_path = output_dir / f"{stem}.predictions.jsonl", output_dir / f"{stem}.json"
    with predictions.open("w", encoding="utf-8") as handle:
        for query, ranking in zip(queries, rankings, strict=True):
            prediction = _Prediction(query_id=query.query_id, book=query.book, ranking=ranking)
            handle.write(prediction.model_dump_json() + "\n")
    result.predictions_file, result.result_file = str(predictions), str(result_path)
    overall = TocMethodResult(
        method=result.method, scope=result.book, queries=result.queries, metrics=result.metrics,
        latency_ms_mean=result.latency_ms_mean, latency_ms_p50=result.latency_ms_p50, per_query=result.per_query,
    )  # fmt: skip
    experiment = toc_experiment(overall, stem, result.dataset).model_copy(
        update={"details": result.model_dump(mode="json", include={"per_book", "models", "adapter", "model_use"})}
    )
    experiment.cost |= {"setup_seconds": result.setup_seconds, "wall_seconds": result.wall_seconds}
    settings = {"toc": result.toc, "embedding": result.embedding, "llm": result.llm}
    written = new_result(
        "strata eval toc",
        [experiment],
        datasets=[DatasetRef(name=result.dataset, path=result.dataset_dir, fingerprint=result.dataset_fingerprint)],
        settings={name: value.model_dump(mode="json") for name, value in settings.items() if value is not None},
        details={"predictions_file": result.predictions_file},
    )
    write_result(written, result_path)


def toc_experiment(result: TocMethodResult, name: str, dataset: str, group: str | None = None) -> Experiment:
    """One method's ToC result as an experiment of a result file, with its per-query rows."""
    return Experiment(
        name=name,
        method=result.method,
        dataset=dataset,
        subset=result.scope,
        group=group,
        queries=result.queries,
        metrics=result.metrics,
        cost={"latency_ms_mean": result.latency_ms_mean, "latency_ms_p50": result.latency_ms_p50},
        per_query=[QueryRow(**row.model_dump()) for row in result.per_query],
    )


def method_result(experiment: Experiment) -> TocMethodResult:
    """The inverse of `toc_experiment`, for an experiment with its rows inline."""
    if not isinstance(experiment.per_query, list):
        raise ValueError(f"experiment {experiment.name} holds no per-query rows")
    return TocMethodResult(
        method=experiment.method,
        scope=experiment.subset or "all",
        queries=experiment.queries or len(experiment.per_query),
        metrics=experiment.metrics,
        latency_ms_mean=experiment.cost["latency_ms_mean"],
        latency_ms_p50=experiment.cost["latency_ms_p50"],
        per_query=[TocQueryResult.model_validate(row.model_dump()) for row in experiment.per_query],
    )


class _Prediction(BaseModel):
    query_id: str
    book: str
    ranking: LeafRanking


def _make_ranker(method: TocMethod, settings: Settings, adapter: Path | None, stack: ExitStack) -> _Ranker:
    if method == "bm25":
        return _BM25Ranker()
    if method == "dense":
        return _DenseRanker(settings)
    if method in ("llm", "llm-free"):
        return _LLMRanker(settings, free=method == "llm-free", stack=stack)
    assert adapter is not None  # checked by run_toc_eval
    return _AdapterRanker(settings, "stair" if method == "stair" else "dsi", adapter)


class _BM25Ranker:
    def __init__(self) -> None:
        self.models: dict[str, str] = {}

    def rank_book(self, toc: DocumentToc, queries: Sequence[TocQuery]) -> list[LeafRanking]:
        from strata.toc.baselines import LeafBM25

        bm25 = LeafBM25(toc)
        return [bm25.rank(query.question, K) for query in queries]

    def model_use(self) -> TocModelUse | None:
        return None


class _DenseRanker:
    def __init__(self, settings: Settings) -> None:
        from strata.encoders.embedder import Embedder

        self.settings = settings.index.embedding
        self.embedder = Embedder(self.settings)
        self.models = {"embedder": self.settings.model}

    def rank_book(self, toc: DocumentToc, queries: Sequence[TocQuery]) -> list[LeafRanking]:
        from strata.toc.baselines import LeafDense

        dense = LeafDense(toc, self.settings, self.embedder)  # embeds every leaf's chunks once per book
        return [dense.rank(query.question, K) for query in queries]

    def model_use(self) -> TocModelUse | None:
        return None


class _LLMRanker:
    """The configured LLM zero-shot on the ToC prompt: trie-constrained, or free generation (`free`)."""

    def __init__(self, settings: Settings, free: bool, stack: ExitStack) -> None:
        from strata.llm import make_client
        from strata.llm.trace import tracing
        from strata.toc.retriever import TocRetriever, toc_llm_settings

        client = stack.enter_context(make_client(toc_llm_settings(settings)))
        self.trace = stack.enter_context(tracing())
        self.retriever = TocRetriever(client, settings.toc)
        self.free = free
        self.models = {"llm": client.model}

    def rank_book(self, toc: DocumentToc, queries: Sequence[TocQuery]) -> list[LeafRanking]:
        rank = self.retriever.generate if self.free else lambda t, q: self.retriever.rank(t, q, K)
        return [rank(toc, query.question) for query in queries]

    def model_use(self) -> TocModelUse | None:
        summary = self.trace.summary()
        return TocModelUse(generations=summary, constrained_steps=self.retriever.constrained_steps, prompt_tokens=0)


class _AdapterRanker:
    """The fine-tuning base model with a saved STAIR or DSI adapter: trie-constrained beam search, plus a free
    generation per question to count hallucinations."""

    def __init__(self, settings: Settings, mode: Literal["stair", "dsi"], adapter: Path) -> None:
        from strata.toc.adapter import load_adapter, load_base_model, read_adapter_meta, resolve_device
        from strata.toc.encode import PromptEncoder

        device = resolve_device(settings.toc.device)
        model, tokenizer, identity = load_base_model(
            settings.toc.train_model, settings.llm.model_dir, device, settings.toc.threads
        )
        self.model: Any = load_adapter(model, adapter, identity, mode)
        self.base_prefix = not read_adapter_meta(adapter).adapt_toc
        self.encoder = PromptEncoder(tokenizer, settings.toc)
        self.settings = settings.toc
        self.mode = mode
        self.prompt_tokens = 0
        self.models = {"base": identity, "adapter": str(adapter)}

    def rank_book(self, toc: DocumentToc, queries: Sequence[TocQuery]) -> list[LeafRanking]:
        from strata.toc.decode import rank_questions

        questions = [q.question for q in queries]
        ranked = rank_questions(
            self.mode,
            self.model,
            self.encoder,
            toc,
            questions,
            self.settings,
            self.mode,
            free=True,
            base_prefix=self.base_prefix,
        )
        self.prompt_tokens += sum(
            len(self.encoder.prompt_ids(self.encoder.prompt(self.mode, toc, question))) for question in questions
        )
        return ranked

    def model_use(self) -> TocModelUse | None:
        return TocModelUse(generations=TraceSummary(), constrained_steps=0, prompt_tokens=self.prompt_tokens)
