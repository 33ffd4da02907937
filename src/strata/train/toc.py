"""`strata train-toc DOCUMENT`: a document's STAIR adapter, trained on synthetic questions and saved where
`strata toc` looks for it."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from strata.config import Settings
from strata.llm import LLMClient, make_client
from strata.store import open_store
from strata.toc.adapter import load_base_model, load_base_tokenizer, resolve_device, save_adapter
from strata.toc.encode import PromptEncoder
from strata.toc.fused import choose_fusion_weight
from strata.toc.induce import needs_induction
from strata.toc.model import DocumentToc
from strata.toc.query import adapter_folder, fused_retriever, fusion_context, resolve_document, toc_for
from strata.toc.retriever import toc_llm_settings
from strata.toc.synthetic import QuestionCache, generate_questions, split_questions
from strata.train.toc_lora import Log, TrainReport, adapter_meta, train_adapter, training_examples
from strata.progress import Progress


def train_toc_adapter(
    settings: Settings, document: str, log: Log = print, progress: Progress | None = None
) -> tuple[TrainReport, Path]:
    """Train and save `document`'s STAIR adapter (used by `run_toc_query` from then on): synthetic questions from
    the configured LLM (cached), then LoRA on `toc.train_model`, on CUDA when present. Returns the training report
    and the adapter's folder.

    A document that cannot be trained (one leaf, no leaf text, a ToC longer than the context) is refused with a
    ValueError before any question is generated or the model to train is loaded."""
    with open_store(settings) as store:
        paper = store.get_paper(resolve_document(store, document))
    with ExitStack() as stack:

        def llm() -> LLMClient:  # loaded only once the document is known to be trainable (or to title its ToC)
            return stack.enter_context(make_client(toc_llm_settings(settings)))

        client = llm() if needs_induction(paper) else None
        toc, _ = toc_for(paper, settings, client)
        check_trainable(toc, log)
        tokenizer = load_base_tokenizer(settings.toc.train_model, settings.llm.model_dir)
        encoder = PromptEncoder(tokenizer, settings.toc)
        encoder.toc_text(toc)  # a ToC too long for the context: refused now, not after generating questions
        client = client or llm()
        cache = QuestionCache(settings.toc.question_cache, toc.paper_id, client.model)
        questions = generate_questions(client, toc, toc.leaves(), settings.toc, cache)
    seed = settings.llm.seed
    device = resolve_device(settings.toc.device)
    started = time.perf_counter()
    model, tokenizer, identity = load_base_model(
        settings.toc.train_model, settings.llm.model_dir, device, settings.toc.threads, tokenizer=tokenizer
    )
    log(f"loaded {identity} on {device} in {time.perf_counter() - started:.0f}s")
    splits = {toc.paper_id: split_questions(questions, settings.toc.dev_fraction, seed)}
    try:
        train, dev = training_examples(encoder, "stair", [toc], splits)
        log(f"stair: {len(train)} train and {len(dev)} dev questions")
        tries = {toc.paper_id: encoder.trie(toc)}
        tuned, report = train_adapter(
            model, encoder, "stair", train, dev, tries, settings.toc, seed, log, progress=progress
        )
    except ValueError as error:  # e.g. no questions: a failed training, exit 1
        raise RuntimeError(f"training the ToC adapter of {paper.id} failed: {error}") from error
    meta = adapter_meta("stair", identity, [toc], settings.toc)
    if settings.toc.fusion_candidates > 0:
        dev_questions = [item for item in splits[toc.paper_id] if item.split == "dev"]
        retriever = fused_retriever(settings, toc, tuned, encoder, settings.toc.adapt_toc, 0.0)
        meta.fusion = choose_fusion_weight(retriever, dev_questions, settings.search.fusion_max_p)
        meta.fused_with = fusion_context(settings)
        log(f"fusion with hybrid search on dev questions: {meta.fusion.verdict()}")
    folder = adapter_folder(settings, paper.id)
    save_adapter(tuned, folder, meta)
    return report, folder


def check_trainable(toc: DocumentToc, log: Log = print) -> None:
    """Refuse (ValueError) a ToC with one leaf (nothing to choose between) or without any leaf text (synthetic
    questions are written from it); say how many leaves have no text when only some do."""
    leaves = toc.leaves()
    if not leaves:
        raise ValueError(f"{toc.paper_id}: nothing to learn: the ToC has no leaves")
    if len(leaves) == 1:
        raise ValueError(
            f"{toc.paper_id}: nothing to learn: the ToC has one leaf ({leaves[0].label}), which `strata toc` "
            "answers without an adapter"
        )
    empty = [leaf for leaf in leaves if not toc.leaf_text(leaf.number).strip()]
    if len(empty) == len(leaves):
        raise ValueError(
            f"{toc.paper_id}: none of its {len(leaves)} ToC leaves holds any text, and the synthetic training "
            "questions are written from each leaf's text; ingest the document with its section text"
        )
    if empty:
        log(f"{toc.paper_id}: {len(empty)} of {len(leaves)} leaves have no text; their questions come from the title")
