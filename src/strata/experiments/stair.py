"""One STAIR experiment on transformers, the same code on a CPU (a small book) and on a lent GPU (whole books).

A job carries everything needed, so it runs where neither the corpus nor the packaged models are installed: the
books' ToCs and leaf texts, any synthetic questions already generated, and the test questions (without gold).
The run generates the missing questions, trains the STAIR and DSI adapters, and ranks every test question with the
zero-shot model (constrained and free), STAIR and DSI. Scoring against gold happens where the job was made.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, get_args

from pydantic import BaseModel, Field, ValidationError

from strata.config import TocSettings
from strata.toc.adapter import AdapterMeta, load_adapter, load_base_model, read_adapter_meta, save_adapter
from strata.toc.decode import CausalLM, generate_texts, rank_questions
from strata.toc.encode import Example, Mode, PromptEncoder
from strata.toc.model import DocumentToc, LeafRanking, TrainingQuestion
from strata.toc.synthetic import clean_questions, parse_questions, question_prompts, split_questions
from strata.toc.trie import LabelTrie
from strata.train.toc_lora import DEV_LIMIT, Log, TrainReport, adapter_meta, train_adapter, training_examples

QUESTION_TOKENS_EACH = 40
# Written at the start of the answer, so a small model without a grammar continues in the expected JSON format.
QUESTIONS_ANSWER_START = '{"questions": ["'
ZERO_SHOT = "zero-shot"
ZERO_SHOT_FREE = "zero-shot-unconstrained"
TRAINING_RECORD = "strata_toc_training.json"  # beside a saved adapter: what it was trained on, and how it went


class JobQuery(BaseModel):
    query_id: str
    question: str


class BookJob(BaseModel):
    toc: DocumentToc
    questions: dict[str, list[str]] = Field(
        default_factory=dict, description="Synthetic questions already generated, by leaf number"
    )
    queries: list[JobQuery]


class StairJob(BaseModel):
    books: list[BookJob]
    settings: TocSettings
    seed: int
    modes: list[Mode] = Field(default_factory=lambda: list(get_args(Mode)))  # every mode
    zero_shot: bool = Field(default=True, description="Also rank with the bare base model (constrained and free)")
    dev_limit: int = Field(default=DEV_LIMIT, description="Most dev questions per check (every n-th, deterministic)")
    inference_batch: int = Field(default=1, description="Questions per forward pass when ranking test questions")


class TrainingRecord(BaseModel):
    """Saved beside an adapter, so a later run of the same job can rank with it instead of training it again."""

    settings: TocSettings
    seed: int
    device: str
    budget_s: float | None = Field(description="The wall budget training ran under (None: none)")
    examples: str = Field(description="SHA-256 of the (train, dev) questions the adapter was trained and checked on")
    report: TrainReport


class MethodRun(BaseModel):
    method: str
    rankings: dict[str, LeafRanking] = Field(description="By query id")
    seconds: float


class StairRuns(BaseModel):
    device: str
    model: str
    model_load_seconds: float
    question_seconds: float = 0.0
    generated_questions: dict[str, dict[str, list[str]]] = Field(
        default_factory=dict, description="Questions generated in this run: paper id -> leaf number -> questions"
    )
    splits: dict[str, list[TrainingQuestion]] = Field(default_factory=dict, description="Train/dev split per paper")
    train: list[TrainReport] = Field(default_factory=list)
    runs: list[MethodRun] = Field(default_factory=list)
    reused: list[str] = Field(
        default_factory=list, description="Modes whose adapter an earlier run trained on the same job (`train` holds "
        "that run's report)"
    )
    errors: list[str] = Field(default_factory=list, description="Stages that failed; the others still ran")


class LoadedBase(NamedTuple):
    model: Any
    tokenizer: Any
    identity: str
    seconds: float


def load_base(model_spec: str, model_dir: Path, device: str, threads: int | None = None) -> LoadedBase:
    """The base model of the adapters in transformers, timed."""
    started = time.perf_counter()
    model, tokenizer, identity = load_base_model(model_spec, model_dir, device, threads)
    return LoadedBase(model, tokenizer, identity, time.perf_counter() - started)


def run_job(
    job: StairJob,
    model_spec: str,
    model_dir: Path,
    device: str,
    adapter_dir: Path | None,
    log: Log,
    train_budget_s: float | None = None,
    checkpoint: Callable[[StairRuns], None] | None = None,
    reuse: bool = False,
    base: LoadedBase | None = None,
) -> StairRuns:
    """Generate missing questions, rank with the zero-shot model, then train each mode's adapter (at most
    `train_budget_s` seconds each) and rank with it. `checkpoint` gets the runs after every stage, and a stage that
    fails is recorded in `errors` while the next ones run (a remote run is not lost to one failure). With `reuse`, an
    adapter in `adapter_dir` trained on the same settings, seed, base weights and questions is ranked with, not
    trained again (a run cut short after one mode's training resumes at the next). `base`: the model `load_base`
    already loaded, so several jobs share one load (its seconds are reported by each)."""
    if base is None:
        base = load_base(model_spec, model_dir, device, job.settings.threads)
        log(f"loaded {base.identity} on {device} in {base.seconds:.0f}s")
    model, tokenizer, identity = base.model, base.tokenizer, base.identity
    runs = StairRuns(device=device, model=identity, model_load_seconds=base.seconds)
    encoder = PromptEncoder(tokenizer, job.settings)

    def stage(name: str, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as error:  # noqa: BLE001 - recorded with its traceback; the remaining stages still run
            runs.errors.append(f"{name}: {type(error).__name__}: {error}")
            log(f"{name} failed:\n{traceback.format_exc()}")
        if checkpoint is not None:
            checkpoint(runs)

    stage("questions", partial(_questions_stage, runs, model, encoder, job, log))
    if job.zero_shot:
        stage(ZERO_SHOT, partial(_zero_shot_stage, runs, model, encoder, job, free=False))
        stage(ZERO_SHOT_FREE, partial(_zero_shot_stage, runs, model, encoder, job, free=True))
    tries = {book.toc.paper_id: encoder.trie(book.toc) for book in job.books}
    for mode in job.modes:
        stage(
            mode,
            partial(_mode_stage, runs, model, encoder, job, mode, tries, adapter_dir, log, train_budget_s, reuse),
        )
    return runs


def _questions_stage(runs: StairRuns, model: Any, encoder: PromptEncoder, job: StairJob, log: Log) -> None:
    started = time.perf_counter()
    for book in job.books:  # book by book: a failure on one keeps the questions of those before it
        runs.generated_questions[book.toc.paper_id] = _missing_questions(model, encoder, book, job)
    runs.question_seconds = time.perf_counter() - started
    generated = sum(len(leaves) for leaves in runs.generated_questions.values())
    log(f"generated questions for {generated} leaves in {runs.question_seconds:.0f}s")
    runs.splits = {
        book.toc.paper_id: split_questions(
            {**book.questions, **runs.generated_questions[book.toc.paper_id]}, job.settings.dev_fraction, job.seed
        )
        for book in job.books
    }


def _zero_shot_stage(runs: StairRuns, model: Any, encoder: PromptEncoder, job: StairJob, free: bool) -> None:
    """The base model on the STAIR prompt (ToC included): trie-constrained, or free."""
    method = ZERO_SHOT_FREE if free else ZERO_SHOT
    runs.runs.append(_run(method, model, encoder, job, "stair", free=free, only_free=free))


def _mode_stage(
    runs: StairRuns,
    model: Any,
    encoder: PromptEncoder,
    job: StairJob,
    mode: Mode,
    tries: dict[str, LabelTrie],
    adapter_dir: Path | None,
    log: Log,
    budget_s: float | None,
    reuse: bool,
) -> None:
    """Train the mode's adapter (or load the one an earlier run trained on the same job), save it and rank every
    test question with it; the base model is left bare."""
    tocs = [book.toc for book in job.books]
    train, dev = training_examples(encoder, mode, tocs, runs.splits, job.dev_limit)
    meta = adapter_meta(mode, runs.model, tocs, job.settings)
    examples = examples_digest(train, dev)
    folder = adapter_dir / mode if adapter_dir is not None else None
    trained = TrainingRecord(settings=job.settings, seed=job.seed, device=runs.device, budget_s=budget_s,
                             examples=examples, report=TrainReport.model_construct())  # fmt: skip
    record = reusable_record(folder, meta, trained) if reuse and folder is not None else None
    if record is not None and folder is not None:
        log(f"{mode}: reusing the adapter in {folder} (trained on the same {len(train)} train and {len(dev)} dev)")
        peft_model, report = load_adapter(model, folder, runs.model, mode), record.report
        runs.reused.append(mode)
    else:
        log(f"{mode}: {len(train)} train and {len(dev)} dev questions")
        peft_model, report = train_adapter(
            model, encoder, mode, train, dev, tries, job.settings, job.seed, log, budget_s, job.inference_batch
        )
    try:
        runs.train.append(report)
        if folder is not None and record is None:
            # The old record goes first and the new one lands by rename: weights never sit beside another's record.
            (folder / TRAINING_RECORD).unlink(missing_ok=True)
            save_adapter(peft_model, folder, meta)
            partial = folder / f"{TRAINING_RECORD}.partial"
            partial.write_text(trained.model_copy(update={"report": report}).model_dump_json(indent=2))
            partial.replace(folder / TRAINING_RECORD)
        runs.runs.append(_run(mode, peft_model, encoder, job, mode, free=True, base_prefix=not job.settings.adapt_toc))
    finally:
        peft_model.unload()  # removes the LoRA layers from `model` in place


def examples_digest(train: Sequence[Example], dev: Sequence[Example]) -> str:
    """One hash of the examples, in order, with the split each is in."""
    rows = [[split, e.prompt_ids, e.answer_ids] for split, part in (("train", train), ("dev", dev)) for e in part]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def reusable_record(folder: Path, meta: AdapterMeta, wanted: TrainingRecord) -> TrainingRecord | None:
    """The training record of the adapter in `folder` when it was trained as `wanted` says (settings, seed, device,
    budget, examples; its report aside), else None (a missing, damaged or older record included)."""
    path = folder / TRAINING_RECORD
    if not path.is_file() or read_adapter_meta(folder) != meta:
        return None
    try:
        record = TrainingRecord.model_validate_json(path.read_text())
    except ValidationError:
        return None
    # `wanted`'s settings read back as the record's were, so a default path compares in the form a reload gives it
    # ('~' expanded); its report is a placeholder, never validated.
    settings = TocSettings.model_validate_json(wanted.settings.model_dump_json())
    same = record.model_dump(exclude={"report"}) == wanted.model_copy(update={"settings": settings}).model_dump(
        exclude={"report"})
    return record if same else None


def _missing_questions(model: CausalLM, encoder: PromptEncoder, book: BookJob, job: StairJob) -> dict[str, list[str]]:
    leaves = [leaf for leaf in book.toc.leaves() if leaf.number not in book.questions]
    if not leaves:
        return {}
    start = encoder.text_ids(QUESTIONS_ANSWER_START)
    prompts = {leaf.number: question_prompts(book.toc, leaf, job.settings) for leaf in leaves}
    flat = [prompt for leaf in leaves for prompt in prompts[leaf.number]]
    # A short leaf has fewer passages, so each of its prompts asks for more: room for the most any prompt asks.
    each = max(-(-job.settings.questions_per_leaf // len(prompts[leaf.number])) for leaf in leaves)
    texts = iter(
        generate_texts(
            model,
            encoder,
            [encoder.prompt_ids(prompt) + start for prompt in flat],
            job.inference_batch * 4,
            QUESTION_TOKENS_EACH * each,
        )
    )
    found = {}
    for leaf in leaves:
        asked = [q for _ in prompts[leaf.number] for q in parse_questions(QUESTIONS_ANSWER_START + next(texts))]
        # Small models copy the prompt's worked example; such a question is not about the leaf.
        found[leaf.number] = [q for q in clean_questions(asked) if q not in flat[0].system]
    return found


def _run(
    method: str,
    model: Any,
    encoder: PromptEncoder,
    job: StairJob,
    prompt: Mode,
    free: bool,
    only_free: bool = False,
    base_prefix: bool = False,
) -> MethodRun:
    run_started = time.perf_counter()
    rankings: dict[str, LeafRanking] = {}
    for book in job.books:
        questions = [query.question for query in book.queries]
        ranked = rank_questions(
            method,
            model,
            encoder,
            book.toc,
            questions,
            job.settings,
            prompt,
            free,
            job.inference_batch,
            only_free,
            base_prefix,
        )
        rankings.update(zip((query.query_id for query in book.queries), ranked))
    return MethodRun(method=method, rankings=rankings, seconds=time.perf_counter() - run_started)

