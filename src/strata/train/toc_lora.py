"""LoRA fine-tuning (transformers + peft) of the ToC adapters, STAIR (instructions + ToC + query -> leaf) and DSI
(query -> leaf), on synthetic questions: early stopping on dev R@1 through the trie-constrained decoder that answers
with the adapter later (`strata.toc.decode`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, Field

from strata.config import TocSettings
from strata.toc.adapter import ANSWER_FORMAT, AdapterMeta
from strata.toc.decode import PrefixCache, autocast, rank_prompts
from strata.toc.encode import Example, Mode, PromptEncoder, shared_prefix_length
from strata.toc.model import DocumentToc, TrainingQuestion
from strata.toc.tree import toc_digest
from strata.toc.trie import LabelTrie
from strata.progress import Progress, tell

if TYPE_CHECKING:
    from transformers import PreTrainedModel

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DEV_LIMIT = 300  # most dev questions ranked per check: each check ranks them all
Log = Callable[[str], None]

T = TypeVar("T")


class DevCheck(BaseModel):
    step: int
    epoch: float
    dev_r1: float
    train_loss: float


class TrainReport(BaseModel):
    mode: Mode
    device: str
    train_examples: int
    dev_examples: int
    steps: int
    epochs: float
    seconds: float
    seconds_per_step: float
    train_seconds: float = Field(description="Seconds of the optimiser steps alone, dev checks excluded")
    tokens: int = Field(description="Tokens the training steps ran through the model (a reused ToC reading excluded)")
    best_dev_r1: float
    best_step: int
    stopped_early: bool
    checks: list[DevCheck]


def training_examples(
    encoder: PromptEncoder,
    mode: Mode,
    tocs: Sequence[DocumentToc],
    splits: Mapping[str, Sequence[TrainingQuestion]],
    dev_limit: int = DEV_LIMIT,
) -> tuple[list[Example], list[Example]]:
    """(train, dev) examples of the documents' split questions, dev cut to `dev_limit` (every n-th, deterministic)."""
    train: list[Example] = []
    dev: list[Example] = []
    for toc in tocs:
        if toc.paper_id not in splits:
            raise ValueError(f"{toc.paper_id} has no training questions (did generating them fail?)")
        for item in splits[toc.paper_id]:
            example = encoder.example(mode, toc, toc.entry(item.leaf), item.question)
            (train if item.split == "train" else dev).append(example)
    return train, dev_cut(dev, dev_limit)


def dev_cut(dev: Sequence[T], limit: int) -> list[T]:
    """At most about `limit` of `dev`: every n-th, deterministic (the dev checks' questions; `strata train-toc`
    chooses its fusion weight on every dev question)."""
    return list(dev[:: max(1, -(-len(dev) // limit))])


def adapter_meta(mode: Mode, base_identity: str, tocs: Sequence[DocumentToc], settings: TocSettings) -> AdapterMeta:
    """What an adapter trained on `tocs` records, so it is loaded only onto the base weights it was trained on."""
    return AdapterMeta(
        mode=mode,
        base_model=base_identity,
        paper_ids=[toc.paper_id for toc in tocs],
        tocs={toc.paper_id: toc_digest(toc) for toc in tocs},
        lora_r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        answer_format=ANSWER_FORMAT,
        adapt_toc=settings.adapt_toc,
    )


def train_adapter(
    model: PreTrainedModel,
    encoder: PromptEncoder,
    mode: Mode,
    train: Sequence[Example],
    dev: Sequence[Example],
    tries: dict[str, LabelTrie],
    settings: TocSettings,
    seed: int,
    log: Log = print,
    budget_s: float | None = None,
    dev_batch: int | None = None,
    progress: Progress | None = None,
) -> tuple[Any, TrainReport]:
    """Wrap `model` with a fresh LoRA adapter and train it; early stopping keeps the weights of the best dev R@1.

    Training also ends, after one last dev check, once `budget_s` seconds have passed. Dev questions are ranked
    `dev_batch` at a time (None: `toc.dev_batch`; with `toc.adapt_toc` off a batch shares one cached ToC reading,
    with it on a batch reads every prompt's whole ToC again). Returns the peft model, which
    shares the base model's modules: `.unload()` it before training another adapter (done here if training fails).
    """
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=LORA_TARGETS,
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, config)
    try:
        batch = dev_batch or settings.dev_batch
        return peft_model, _train(
            peft_model, encoder, mode, train, dev, tries, settings, seed, log, budget_s, batch, progress
        )
    except BaseException:
        peft_model.unload()
        raise


def _train(
    peft_model: Any,
    encoder: PromptEncoder,
    mode: Mode,
    train: Sequence[Example],
    dev: Sequence[Example],
    tries: dict[str, LabelTrie],
    settings: TocSettings,
    seed: int,
    log: Log,
    budget_s: float | None,
    dev_batch: int,
    progress: Progress | None,
) -> TrainReport:
    import torch

    device = peft_model.device.type
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=settings.learning_rate)
    batches_per_epoch = max(1, -(-len(train) // settings.batch_size))
    check_every = settings.eval_every_steps or batches_per_epoch
    max_steps = settings.max_steps or settings.max_epochs * batches_per_epoch
    rng = random.Random(seed)
    stopper = _EarlyStopping(settings.patience)
    checks: list[DevCheck] = []
    losses: list[float] = []
    step, tokens, dev_seconds, started = 0, 0, 0.0, time.perf_counter()
    # The base model's reading of each document's ToC: computed once, the same for every step (no gradient).
    firsts = {} if settings.adapt_toc else {example.paper_id: example for example in reversed(train)}
    prefixes = {paper_id: PrefixCache(peft_model, query_prefix(first), True) for paper_id, first in firsts.items()}
    for batch in _endless_batches(train, settings.batch_size, rng):
        peft_model.train()
        prefix = prefixes.get(batch[0].paper_id)
        loss = _loss(peft_model, batch, encoder.tokenizer.pad_token_id, device, prefix)
        tokens += _tokens_run(batch, prefix)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        step += 1
        tell(progress, f"{mode} steps", step, max_steps, f"loss {loss.item():.3f}")
        last = step >= max_steps or (budget_s is not None and time.perf_counter() - started > budget_s)
        if step % check_every == 0 or last:
            peft_model.eval()
            checked = time.perf_counter()
            r1 = dev_r1(peft_model, encoder, dev, tries, dev_batch, base_prefix=not settings.adapt_toc)
            dev_seconds += time.perf_counter() - checked
            checks.append(DevCheck(step=step, epoch=step / batches_per_epoch, dev_r1=r1, train_loss=_mean(losses)))
            log(f"{mode}: step {step}/{max_steps} loss {checks[-1].train_loss:.3f} dev R@1 {r1:.3f}")
            losses.clear()
            stopper.record(step, r1, peft_model)
        if last or stopper.stop:
            break
    stopper.restore(peft_model)
    peft_model.eval()
    seconds = time.perf_counter() - started
    return TrainReport(
        mode=mode,
        device=device,
        train_examples=len(train),
        dev_examples=len(dev),
        steps=step,
        epochs=step / batches_per_epoch,
        seconds=seconds,
        seconds_per_step=seconds / max(step, 1),
        train_seconds=seconds - dev_seconds,
        tokens=tokens,
        best_dev_r1=stopper.best_r1,
        best_step=stopper.best_step,
        stopped_early=stopper.stop,
        checks=checks,
    )


class _EarlyStopping:
    """Keeps the adapter weights of the best dev R@1 and says when `patience` checks brought no improvement."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.best_r1, self.best_step, self.stale = 0.0, 0, 0
        self.best_state: dict[str, Any] | None = None

    @property
    def stop(self) -> bool:
        return self.stale >= self.patience

    def record(self, step: int, r1: float, model: Any) -> None:
        from peft import get_peft_model_state_dict

        if self.best_state is None or r1 > self.best_r1:
            self.best_r1, self.best_step, self.stale = r1, step, 0
            self.best_state = {name: t.detach().clone() for name, t in get_peft_model_state_dict(model).items()}
        else:
            self.stale += 1

    def restore(self, model: Any) -> None:
        from peft import set_peft_model_state_dict

        if self.best_state is not None:
            set_peft_model_state_dict(model, self.best_state)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _endless_batches(examples: Sequence[Example], size: int, rng: random.Random) -> Iterator[list[Example]]:
    if not examples:
        raise ValueError("no training questions: generate synthetic questions first")
    while True:
        yield from _batches(examples, size, rng)


def _batches(examples: Sequence[Example], size: int, rng: random.Random) -> Iterator[list[Example]]:
    """Shuffled batches of one document each (similar lengths, and STAIR prompts share their ToC)."""
    by_paper: dict[str, list[Example]] = {}
    for example in examples:
        by_paper.setdefault(example.paper_id, []).append(example)
    batches: list[list[Example]] = []
    for paper_id in sorted(by_paper):
        group = list(by_paper[paper_id])
        rng.shuffle(group)
        batches.extend(group[i : i + size] for i in range(0, len(group), size))
    rng.shuffle(batches)
    yield from batches


def _loss(model: Any, batch: Sequence[Example], pad: int, device: str, prefix: PrefixCache | None = None) -> Any:
    """Mean cross-entropy of the answer tokens.

    The examples of a batch share their prompt's beginning (instructions and, for STAIR, the whole ToC), so that
    prefix is run once and its KV cache repeated for every example; only the rest (question and answer) is run per
    example, right-padded. Gradients flow through the repeated cache into the prefix, unless the prefix is `prefix`
    (the document's ToC as the base model reads it, computed once: `toc.adapt_toc` off).
    """
    import torch

    shared, suffixes = _split(batch, prefix)
    width = max(len(suffix) for suffix in suffixes)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.ones((len(batch), shared + width), dtype=torch.long)
    targets = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, (example, suffix) in enumerate(zip(batch, suffixes)):
        ids[row, : len(suffix)] = torch.tensor(suffix, dtype=torch.long)
        mask[row, shared + len(suffix) :] = 0
        answer_start = len(suffix) - len(example.answer_ids)
        targets[row, answer_start - 1 : len(suffix) - 1] = torch.tensor(example.answer_ids, dtype=torch.long)
    positions = torch.arange(shared, shared + width, device=device).expand(len(batch), width)
    with autocast(device):
        if prefix is None:
            head = torch.tensor([batch[0].prompt_ids[:shared]], dtype=torch.long, device=device)
            cache = model(input_ids=head, use_cache=True, logits_to_keep=1).past_key_values
            cache.batch_repeat_interleave(len(batch))
        else:
            for example in batch:
                prefix.check(example.prompt_ids)
            cache = prefix.copy(len(batch))
        logits = model(
            input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions, past_key_values=cache
        ).logits
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1), ignore_index=-100
    )


def _split(batch: Sequence[Example], prefix: PrefixCache | None) -> tuple[int, list[list[int]]]:
    """The length of the batch's shared prompt beginning (the cached ToC reading's, when given) and each example's
    tokens after it (question and answer)."""
    shared = shared_prefix_length([example.prompt_ids for example in batch]) if prefix is None else len(prefix.ids)
    return shared, [example.prompt_ids[shared:] + example.answer_ids for example in batch]


def _tokens_run(batch: Sequence[Example], prefix: PrefixCache | None) -> int:
    """Tokens one step runs through the model: the shared beginning once (none when `prefix`, computed once, is
    reused), then every example's rest."""
    shared, suffixes = _split(batch, prefix)
    return (shared if prefix is None else 0) + sum(len(suffix) for suffix in suffixes)


def query_prefix(example: Example) -> list[int]:
    return example.prompt_ids[: example.query_start]


def dev_r1(
    model: Any,
    encoder: PromptEncoder,
    dev: Sequence[Example],
    tries: dict[str, LabelTrie],
    batch: int,
    base_prefix: bool = False,
) -> float:
    """Share of dev questions whose greedy constrained answer is their leaf (`base_prefix`: the ToC read by the base
    model, as the adapter was trained with `toc.adapt_toc` off)."""
    if not dev:
        return 0.0
    hits = 0
    for paper_id, trie in tries.items():
        examples = [example for example in dev if example.paper_id == paper_id]
        if not examples:
            continue
        prefix = PrefixCache(model, query_prefix(examples[0]), base=True) if base_prefix else None
        ranked = rank_prompts(model, encoder, [e.prompt_ids for e in examples], trie, 1, 1, batch, prefix)
        hits += sum(1 for example, top in zip(examples, ranked) if top and top[0][0] == example.leaf)
    return hits / len(dev)
