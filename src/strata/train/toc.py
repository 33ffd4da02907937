"""`strata train-toc DOCUMENT`: a document's STAIR adapter, trained on synthetic questions and saved where
`strata toc` looks for it."""

from __future__ import annotations

import time
from pathlib import Path

from strata.config import Settings
from strata.llm import make_client
from strata.store import open_store
from strata.toc.adapter import load_base_model, resolve_device, save_adapter
from strata.toc.encode import PromptEncoder
from strata.toc.query import adapter_folder, resolve_document, toc_for
from strata.toc.retriever import toc_llm_settings
from strata.toc.synthetic import QuestionCache, generate_questions, split_questions
from strata.train.toc_lora import Log, TrainReport, adapter_meta, train_adapter, training_examples
from strata.progress import Progress


def train_toc_adapter(
    settings: Settings, document: str, log: Log = print, progress: Progress | None = None
) -> tuple[TrainReport, Path]:
    """Train and save `document`'s STAIR adapter (used by `run_toc_query` from then on): synthetic questions from
    the configured LLM (cached), then LoRA on `toc.train_model`, on CUDA when present. Returns the training report
    and the adapter's folder."""
    with open_store(settings) as store:
        paper = store.get_paper(resolve_document(store, document))
    with make_client(toc_llm_settings(settings)) as client:
        toc, _ = toc_for(paper, settings, client)
        cache = QuestionCache(settings.toc.question_cache, toc.paper_id, client.model)
        questions = generate_questions(client, toc, toc.leaves(), settings.toc, cache)
    seed = settings.llm.seed
    device = resolve_device(settings.toc.device)
    started = time.perf_counter()
    model, tokenizer, identity = load_base_model(
        settings.toc.train_model, settings.llm.model_dir, device, settings.toc.threads
    )
    log(f"loaded {identity} on {device} in {time.perf_counter() - started:.0f}s")
    encoder = PromptEncoder(tokenizer, settings.toc)
    splits = {toc.paper_id: split_questions(questions, settings.toc.dev_fraction, seed)}
    try:
        train, dev = training_examples(encoder, "stair", [toc], splits)
        log(f"stair: {len(train)} train and {len(dev)} dev questions")
        tries = {toc.paper_id: encoder.trie(toc)}
        tuned, report = train_adapter(
            model, encoder, "stair", train, dev, tries, settings.toc, seed, log, progress=progress
        )
    except ValueError as error:  # no questions, or a ToC too long for the context: a failed training, exit 1
        raise RuntimeError(f"training the ToC adapter of {paper.id} failed: {error}") from error
    folder = adapter_folder(settings, paper.id)
    save_adapter(tuned, folder, adapter_meta("stair", identity, [toc], settings.toc))
    return report, folder
