"""Question-answering evaluation of `ask` (Retrieve -> Relate -> Read) on a dataset with gold answers or evidence.

LitQA2 (multiple choice): accuracy, precision (correct / answered), coverage, the gold paper among the cited papers,
and overlap of the cited evidence with the key passage (share of the key passage's analysed terms the cited passages
contain). SciFact (claims with rationale sentences, asked 'supported or refuted?'): label accuracy, and
evidence-sentence precision, recall and F1 of the quoted sentences against the rationales, micro-averaged over
claims. Writes predictions JSONL and a result file (strata.eval.results).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from strata.config import Settings
from strata.corpus import require_corpus
from strata.eval.datasets import Dataset, EvalQuery, load_dataset
from strata.eval.results import DatasetRef, Experiment, QueryRow, new_result, write_result
from strata.index.bm25 import english_analyzer
from strata.llm import TraceSummary
from strata.progress import Progress, tell
from strata.read.model import AskResult, Evidence, OptionScore, StageEvent
from strata.documents.sentences import sentence_spans
from strata.read.validate import normalized

# A SciFact claim with rationales is asked as a two-option question: the label is then scored like any multiple
# choice, and no answer has to be generated (scoring is much cheaper than decoding on the embedded model).
SCIFACT_QUESTION = "Is the following claim supported or refuted by the literature? {claim}"
SCIFACT_OPTIONS = {"SUPPORT": "The claim is supported.", "CONTRADICT": "The claim is refuted."}


class QAPrediction(BaseModel):
    query_id: str
    question: str
    options: list[str] = Field(default_factory=list, description="As shown to the model (shuffled)")
    correct: str | None = None
    choice: str | None = None
    answer: str
    supported: bool
    partial: bool
    error: str | None = None
    gold_papers: list[str]
    read_papers: list[str] = Field(description="Papers the reader read, in rank order")
    accepted_papers: list[str]
    cited_papers: list[str]
    evidence: list[Evidence]
    option_scores: list[OptionScore] = Field(
        default_factory=list, description="Multiple choice: each option's grounding and model shares"
    )
    metrics: dict[str, float]
    llm: TraceSummary
    seconds: float


class QueryMetrics(BaseModel):
    query_id: str
    metrics: dict[str, float]


class QAEvalResult(BaseModel):
    dataset: str
    dataset_dir: str
    dataset_fingerprint: str
    kind: str
    split: str
    queries: int = Field(description="Questions evaluated (after --limit)")
    limit: int | None
    metrics: dict[str, float]
    llm_backend: str
    llm_model: str
    embedding_model: str
    settings: dict = Field(description="The full settings tree the run used")
    store_home: str
    llm: TraceSummary = Field(description="LLM calls and tokens over all questions")
    wall_s: float
    per_query: list[QueryMetrics]
    predictions_file: str | None = None
    result_file: str | None = None


def run_qa_eval(
    settings: Settings,
    dataset_dir: Path,
    *,
    split: str | None = None,
    limit: int | None = None,
    output_dir: Path | None = None,
    store_home: Path | None = None,
    on_prediction: Callable[[QAPrediction], None] | None = None,
    progress: Progress | None = None,
) -> QAEvalResult:
    """Ask every question of the dataset (the first `limit`; SciFact: claims with rationales only).

    `store_home` names a store that already holds the corpus and is only read; otherwise the corpus is ingested
    into the evaluation store `store.home/eval/NAME-HASH-CHUNKING`, as `strata eval retrieval` does.
    """
    from strata.eval.retrieval import _eval_settings  # one naming rule for evaluation stores
    from strata.pipeline.ask import open_pipeline

    if store_home is not None:  # opening a store creates it: a mistyped one would be asked every question, empty
        require_corpus(settings.store.model_copy(update={"home": store_home}))
    dataset = load_dataset(dataset_dir, split=split)
    if dataset.kind not in ("litqa2", "scifact"):
        raise ValueError(f"{dataset_dir}: QA evaluation needs LitQA2 or SciFact (original), not {dataset.kind}")
    queries = [query for query in dataset.queries if query.options or query.rationales][:limit]
    eval_settings = _eval_settings(settings, dataset, "hybrid", store_home)  # type: ignore[arg-type]
    if store_home is None:
        _ingest(dataset, eval_settings)
    started = time.perf_counter()
    predictions: list[QAPrediction] = []
    with open_pipeline(eval_settings) as pipeline:
        for query in queries:

            def stage(event: StageEvent, done: int = len(predictions)) -> None:
                tell(progress, "questions", done, len(queries), f"{event.stage} {event.status}")

            prediction = _predict(pipeline, dataset, query, stage)
            predictions.append(prediction)
            tell(progress, "questions", len(predictions), len(queries))
            if on_prediction is not None:
                on_prediction(prediction)
        llm_backend, llm_model = pipeline.client.backend.name, pipeline.client.model
        if pipeline.decider.model != llm_model:
            llm_model = f"{llm_model}, deciding {pipeline.decider.model}"
    result = QAEvalResult(
        dataset=dataset.name,
        dataset_dir=str(dataset.folder),
        dataset_fingerprint=dataset.fingerprint,
        kind=dataset.kind,
        split=dataset.split,
        queries=len(queries),
        limit=limit,
        metrics=summarize(predictions, dataset.kind),
        llm_backend=llm_backend,
        llm_model=llm_model,
        embedding_model=eval_settings.index.embedding.model,
        settings=eval_settings.model_dump(mode="json"),
        store_home=str(eval_settings.store.home),
        llm=TraceSummary.total(prediction.llm for prediction in predictions),
        wall_s=time.perf_counter() - started,
        per_query=[QueryMetrics(query_id=p.query_id, metrics=p.metrics) for p in predictions],
    )
    if output_dir is not None:
        _write_outputs(result, predictions, Path(output_dir))
    return result


def _ingest(dataset: Dataset, settings: Settings) -> None:
    from strata.pipeline.ingest import ingest

    report = ingest(dataset.corpus, settings)
    if report.errors:
        raise ValueError(f"could not ingest the corpus of {dataset.folder}:\n{report.summary()}")


def as_multiple_choice(query: EvalQuery, kind: str) -> EvalQuery:
    """SciFact claims become 'supported / refuted' questions, the right option given by the rationales' label."""
    if kind != "scifact":
        return query
    options = list(SCIFACT_OPTIONS.values())
    return query.model_copy(
        update={
            "text": SCIFACT_QUESTION.format(claim=query.text),
            "options": options,
            "correct_option": options.index(SCIFACT_OPTIONS[query.rationales[0].label]),
        }
    )


def _predict(pipeline, dataset: Dataset, query: EvalQuery, on_event: Callable[[StageEvent], None]) -> QAPrediction:  # noqa: ANN001  (Pipeline, imported lazily)
    query = as_multiple_choice(query, dataset.kind)
    options = shuffled_options(query)
    correct = query.options[query.correct_option] if query.correct_option is not None else None
    result = pipeline.ask(query.text, options=options, answer_format="mc", on_event=on_event)
    answer = result.answer
    cited = list(dict.fromkeys(item.paper_id for item in answer.evidence))
    return QAPrediction(
        query_id=query.id,
        question=query.text,
        options=options,
        correct=correct,
        choice=answer.choice,
        answer=answer.text,
        supported=answer.supported,
        partial=result.partial,
        error=result.error,
        gold_papers=sorted(query.gold_papers),
        read_papers=[reading.paper_id for reading in result.readings],
        accepted_papers=_accepted(result),
        cited_papers=cited,
        evidence=answer.evidence,
        option_scores=answer.option_scores,
        metrics=query_metrics(query, result, correct),
        llm=result.trace.summary(),
        seconds=result.wall_s,
    )


def shuffled_options(query: EvalQuery) -> list[str]:
    """The options in an order fixed by the question id (LitQA2 files list the right answer first)."""
    seed = int.from_bytes(hashlib.sha256(query.id.encode()).digest()[:8], "big")
    options = list(query.options)
    random.Random(seed).shuffle(options)
    return options


def query_metrics(query: EvalQuery, result: AskResult, correct: str | None) -> dict[str, float]:
    answer = result.answer
    cited = {item.paper_id for item in answer.evidence}
    metrics = {
        "cited_gold_paper": float(bool(cited & set(query.gold_papers))),
        "gold_paper_read": float(bool({r.paper_id for r in result.readings} & set(query.gold_papers))),
        "gold_paper_accepted": float(bool(set(_accepted(result)) & set(query.gold_papers))),
    }
    if query.options:
        metrics["answered"] = float(answer.choice is not None)
        metrics["correct"] = float(answer.choice is not None and answer.choice == correct)
    if query.key_passages:
        metrics["evidence_overlap"] = evidence_overlap(answer.evidence, query.key_passages)
    if query.rationales:
        predicted, gold = cited_sentences(answer.evidence), gold_sentences(query)
        metrics["sentences_predicted"] = float(len(predicted))
        metrics["sentences_gold"] = float(len(gold))
        metrics["sentences_correct"] = float(sum(_matches_any(item, gold) for item in predicted))
        metrics["sentences_found"] = float(sum(_matches_any(item, predicted) for item in gold))
    return metrics


def _accepted(result: AskResult) -> list[str]:
    return [reading.paper_id for reading in result.readings if reading.accepted]


def evidence_overlap(evidence: list[Evidence], key_passages: list[str]) -> float:
    """Share of the key passage's distinct analysed terms that the cited passages contain (0 when none cited)."""
    analyzer = english_analyzer()
    key = {term for passage in key_passages for term in analyzer.analyze(passage)}
    cited = {term for item in evidence for term in analyzer.analyze(item.text)}
    return len(key & cited) / len(key) if key else 0.0


Sentence = tuple[str, str]  # (paper id, normalised sentence)


def cited_sentences(evidence: list[Evidence]) -> list[Sentence]:
    found = {
        (item.paper_id, normalized(item.quote[start:end]))
        for item in evidence
        for start, end in sentence_spans(item.quote)
    }
    return sorted(found)


def gold_sentences(query: EvalQuery) -> list[Sentence]:
    return sorted({(r.paper_id, normalized(s)) for r in query.rationales for s in r.sentences})


def _matches_any(sentence: Sentence, others: list[Sentence]) -> bool:
    """Same paper and one sentence inside the other: the segmenter may split an abstract differently."""
    paper, text = sentence
    return any(paper == other_paper and (text in other or other in text) for other_paper, other in others)


def summarize(predictions: list[QAPrediction], kind: str) -> dict[str, float]:
    total = max(len(predictions), 1)

    def mean(name: str) -> float:
        return sum(p.metrics.get(name, 0.0) for p in predictions) / total

    def summed(name: str) -> float:
        return sum(p.metrics.get(name, 0.0) for p in predictions)

    metrics = {
        "cited_gold_paper": mean("cited_gold_paper"),
        "gold_paper_read": mean("gold_paper_read"),
        "gold_paper_accepted": mean("gold_paper_accepted"),
        "partial": sum(p.partial for p in predictions) / total,
    }
    answered = summed("answered")
    metrics |= {
        "accuracy": mean("correct"),
        "precision": summed("correct") / answered if answered else 0.0,
        "coverage": answered / total,
    }
    if kind == "litqa2":
        metrics["evidence_overlap"] = mean("evidence_overlap")
    else:
        precision = _ratio(summed("sentences_correct"), summed("sentences_predicted"))
        recall = _ratio(summed("sentences_found"), summed("sentences_gold"))
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        metrics |= {"sentence_precision": precision, "sentence_recall": recall, "sentence_f1": f1}
    return metrics


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def format_qa_result(result: QAEvalResult) -> str:
    metrics = "  ".join(f"{name} {value:.3f}" for name, value in result.metrics.items())
    lines = [
        f"{result.dataset} ({result.split}, {result.queries} questions) {result.llm_model}: {metrics}",
        f"{result.llm.calls} LLM calls, {result.llm.tokens_in} tokens in, {result.llm.tokens_out} out; "
        f"{result.wall_s:.0f}s",
    ]
    if result.result_file:
        lines.append(f"predictions: {result.predictions_file}  result: {result.result_file}")
    return "\n".join(lines)


def _write_outputs(result: QAEvalResult, predictions: list[QAPrediction], output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{result.dataset}-{result.split}-qa"
    predictions_path, result_path = output_dir / f"{stem}.jsonl", output_dir / f"{stem}.json"
    predictions_path.write_text("".join(p.model_dump_json() + "\n" for p in predictions), encoding="utf-8")
    result.predictions_file, result.result_file = str(predictions_path), str(result_path)
    written = new_result(
        "strata eval qa",
        [qa_experiment(result, stem)],
        datasets=[qa_dataset(result)],
        settings=result.settings,
        details={"store_home": result.store_home, "predictions_file": result.predictions_file},
    )
    write_result(written, result_path)


def qa_dataset(result: QAEvalResult) -> DatasetRef:
    return DatasetRef(
        name=result.dataset, path=result.dataset_dir, fingerprint=result.dataset_fingerprint, split=result.split
    )


def qa_experiment(result: QAEvalResult, name: str) -> Experiment:
    """The evaluation as an experiment of a result file: its metrics, LLM cost and per-query rows."""
    llm = result.llm
    return Experiment(
        name=name,
        method="ask",
        dataset=result.dataset,
        queries=result.queries,
        metrics=result.metrics,
        cost={
            "llm_calls": llm.calls, "llm_tokens_in": llm.tokens_in, "llm_tokens_out": llm.tokens_out,
            "llm_cache_hits": llm.cache_hits, "wall_s": result.wall_s,
            "seconds_per_question": result.wall_s / max(result.queries, 1),
        },
        per_query=[QueryRow(**row.model_dump()) for row in result.per_query],
        details={
            "limit": result.limit,
            "models": {"llm_backend": result.llm_backend, "llm_model": result.llm_model,
                       "embedding": result.embedding_model},
        },
    )  # fmt: skip
