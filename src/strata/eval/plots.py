"""Figures from the result files (strata.eval.results.ResultFile) in a results folder, saved as PNG beside them.

  recall_at_k.png   mean R@1..100 per retrieval method, from the TREC runs that `strata eval retrieval` results name
  toc_r1_by_book.png  ToC R@1 per book and method, from the experiments of stair*.json (benchmarks/stair.py)
  cost_quality.png  nDCG@10 against cost per query, from every experiment of the folder's result files that has
                    nDCG@10: LLM tokens per query (`llm_tokens_per_query`, or tokens in + out per query) when any
                    has them, else p50 latency

A figure whose inputs do not exist yet is skipped with the reason, never an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ir_measures
import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 -- the backend must be chosen first
from pydantic import BaseModel, Field  # noqa: E402

from strata.eval.beir import load_beir  # noqa: E402
from strata.eval.results import Experiment, ResultFile, ResultFileError, load_result  # noqa: E402

RECALL_DEPTHS = tuple(range(1, 101))
TOC_FILES = "stair*.json"  # stair.json, stair-cpu.json, stair-gpu.json
ALL_SCOPE = "all"
TOC_METRIC = "R@1"
QUALITY = "nDCG@10"
TOKENS = "llm_tokens_per_query"
TOKENS_IN, TOKENS_OUT = "tokens_in_per_query", "tokens_out_per_query"  # corank.json
LATENCY = "latency_p50_ms"
RETRIEVAL_RUN = "strata eval retrieval"  # the benchmark of the result files that name a TREC run
# name -> (file, what it shows): make_figures draws them, benchmarks/report.py lists the ones drawn.
FIGURES = {
    "recall@k": ("recall_at_k.png", "mean R@1..100 of each retrieval run whose TREC run is kept"),
    "ToC R@1 by book": ("toc_r1_by_book.png", "every ToC method per book, from stair*.json"),
    "cost vs quality": ("cost_quality.png", "nDCG@10 against LLM tokens (or p50 latency) per query"),
}


class Figure(BaseModel):
    name: str
    path: Path | None = Field(default=None, description="The PNG written, or None when skipped")
    note: str = Field(description="What the figure shows, or why it was skipped")


class RecallCurve(BaseModel):
    label: str
    recall: list[float] = Field(description="Mean R@k for k in RECALL_DEPTHS")


class CostPoint(BaseModel):
    label: str
    quality: float
    latency_ms: float | None
    tokens_per_query: float | None


def make_figures(results_dir: Path, base: Path) -> list[Figure]:
    """All figures for `results_dir`; relative paths inside results are taken from `base` (where the eval ran)."""
    return [
        plot_recall_curves(recall_curves(results_dir, base), results_dir / FIGURES["recall@k"][0]),
        plot_toc_by_book(toc_results(results_dir), results_dir / FIGURES["ToC R@1 by book"][0]),
        plot_cost_quality(cost_points(results_dir), results_dir / FIGURES["cost vs quality"][0]),
    ]


# recall@k


def recall_curves(results_dir: Path, base: Path) -> list[RecallCurve]:
    """One curve per (dataset, split, method), from the newest result file whose run file still exists."""
    newest: dict[tuple[str, str, str], tuple[float, ResultFile]] = {}
    for path, result in _retrieval_results(results_dir):
        run_file = _under(base, result.details.get("run_file"))
        (ref,), (experiment,) = result.datasets, result.experiments
        if run_file is None or not run_file.is_file() or ref.path is None:
            continue
        key = (ref.name, ref.split or "", experiment.method)
        if key not in newest or path.stat().st_mtime > newest[key][0]:
            newest[key] = (path.stat().st_mtime, result)
    curves = []
    for (dataset, split, method), (_, result) in sorted(newest.items()):
        qrels = load_beir(base / str(result.datasets[0].path), split).qrels
        run = ir_measures.read_trec_run(str(base / result.details["run_file"]))
        curves.append(RecallCurve(label=f"{dataset} {split}: {method}", recall=mean_recall_at(qrels, list(run))))
    return curves


def mean_recall_at(
    qrels: dict[str, dict[str, int]], run: list[Any], depths: tuple[int, ...] = RECALL_DEPTHS
) -> list[float]:
    """Mean R@k over the judged queries for each k; a judged query missing from the run scores 0 (as in BEIR)."""
    measures = [ir_measures.R @ k for k in depths]
    totals = {str(measure): 0.0 for measure in measures}
    for metric in ir_measures.iter_calc(measures, qrels, run):
        totals[str(metric.measure)] += metric.value
    return [totals[str(measure)] / max(len(qrels), 1) for measure in measures]


def plot_recall_curves(curves: list[RecallCurve], path: Path) -> Figure:
    if not curves:
        return Figure(name="recall@k", note="skipped: no retrieval result with its TREC run (run `make reproduce`)")
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for curve in curves:
        axes.plot(RECALL_DEPTHS, curve.recall, label=curve.label)
    axes.set(xscale="log", xlabel="k (papers retrieved)", ylabel="mean recall@k", ylim=(0, 1), title="Recall@k")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    _save(figure, path)
    return Figure(name="recall@k", path=path, note=f"mean R@1..100 of {len(curves)} runs")


def _retrieval_results(results_dir: Path) -> Iterator[tuple[Path, ResultFile]]:
    """`strata eval retrieval` results anywhere under the folder, its work folders included (where
    benchmarks/retrieval.py keeps its runs)."""
    for path in sorted(results_dir.rglob("*.json")):
        try:
            result = load_result(path)
        except (ResultFileError, ValueError):
            continue  # work files of other kinds share the folder
        if result.benchmark == RETRIEVAL_RUN and len(result.experiments) == len(result.datasets) == 1:
            yield path, result


def _under(base: Path, path: str | None) -> Path | None:
    return None if path is None else base / path  # an absolute `path` stays as it is


# ToC R@1 per book


def toc_scores_by_book(result: ResultFile) -> dict[str, dict[str, float]]:
    """'experiment: method' -> scope -> R@1, from a ToC results file of benchmarks/stair.py: its experiments grouped
    by part (`group`), a scope being 'all' or a book (`subset`). A part that another pools (named in that one's
    `pooled_from`, e.g. one small book inside the small books together) is left out: its rows are in the pooled one."""
    parts = result.details.get("parts", {})
    pooled = {source for part in parts.values() for source in part.get("pooled_from", [])}
    scores: dict[str, dict[str, float]] = {}
    for experiment in result.experiments:
        if experiment.group in pooled or TOC_METRIC not in experiment.metrics or experiment.subset is None:
            continue
        scores.setdefault(f"{experiment.group}: {experiment.method}", {})[experiment.subset] = experiment.metrics[
            TOC_METRIC
        ]
    return scores


def toc_results(results_dir: Path) -> dict[str, dict[str, float]]:
    """toc_scores_by_book over every ToC results file in the folder."""
    scores: dict[str, dict[str, float]] = {}
    for path in sorted(results_dir.glob(TOC_FILES)):
        scores.update(toc_scores_by_book(load_result(path)))
    return scores


def plot_toc_by_book(scores: dict[str, dict[str, float]], path: Path) -> Figure:
    books = sorted({scope for by_scope in scores.values() for scope in by_scope if scope != ALL_SCOPE})
    if not books:
        return Figure(name="ToC R@1 by book", note=f"skipped: no per-book ToC {TOC_METRIC} in {TOC_FILES} yet")
    shown = {label: by_scope for label, by_scope in scores.items() if set(by_scope) - {ALL_SCOPE}}
    width = 0.8 / len(shown)
    figure, axes = plt.subplots(figsize=(6.4 + 0.4 * len(shown), 4.2))
    palette = plt.get_cmap("tab20")  # up to 20 series without a repeated colour
    for index, (label, by_scope) in enumerate(shown.items()):
        positions = [book_index + index * width for book_index in range(len(books))]
        axes.bar(positions, [by_scope.get(book, 0.0) for book in books], width=width, label=label,
                 color=palette(index % palette.N))
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(books))], books)
    axes.set(ylabel=f"ToC {TOC_METRIC}", ylim=(0, 1), title=f"ToC retrieval {TOC_METRIC} per book")
    axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not over them
    _save(figure, path)
    return Figure(name="ToC R@1 by book", path=path, note=f"{len(shown)} methods over {len(books)} books")


# cost against quality


def cost_points(results_dir: Path) -> list[CostPoint]:
    points = []
    for path in sorted(results_dir.glob("*.json")):
        for experiment in load_result(path).experiments:
            if QUALITY in experiment.metrics:
                points.append(
                    CostPoint(
                        label=f"{path.stem}: {experiment.method}",
                        quality=experiment.metrics[QUALITY],
                        latency_ms=experiment.cost.get(LATENCY),
                        tokens_per_query=_tokens_per_query(experiment),
                    )
                )
    return points


def _tokens_per_query(experiment: Experiment) -> float | None:
    cost = experiment.cost
    if TOKENS in cost:
        return cost[TOKENS]
    parts = [cost[key] for key in (TOKENS_IN, TOKENS_OUT) if key in cost]
    return sum(parts) if parts else None


def plot_cost_quality(points: list[CostPoint], path: Path) -> Figure:
    if not points:
        return Figure(name="cost vs quality", note=f"skipped: no experiment in the result files measures {QUALITY}")
    with_tokens = [(point, tokens) for point in points if (tokens := point.tokens_per_query) is not None]
    if with_tokens:
        costed, axis = with_tokens, "LLM tokens per query"
        note = f"{len(costed)} methods with LLM token counts"
    else:
        costed = [(point, latency) for point in points if (latency := point.latency_ms) is not None]
        axis = "p50 latency per query (ms)"
        note = f"{len(costed)} methods; cost is p50 latency: no result carries LLM token counts yet"
    shown, cost = [point for point, _ in costed], [value for _, value in costed]
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    axes.scatter(cost, [point.quality for point in shown])
    for point, x in zip(shown, cost):
        axes.annotate(point.label, (x, point.quality), textcoords="offset points", xytext=(4, 4), fontsize="small")
    axes.margins(x=0.2)  # room for the labels
    axes.set(xlabel=axis, ylabel=QUALITY, title=f"Cost vs {QUALITY}")
    axes.grid(True, alpha=0.3)
    _save(figure, path)
    return Figure(name="cost vs quality", path=path, note=note)


def _save(figure: plt.Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
