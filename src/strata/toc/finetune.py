"""LoRA fine-tuning (transformers + peft) for STAIR (instructions + ToC + query -> leaf) and DSI (query -> leaf),
and inference with the tuned model: trie-constrained beam search, and free generation to count hallucinations.

The packaged GGUF model is dequantised into transformers (`gguf_file=`). Batches are left-padded so every answer
ends at the last position, and logits are computed only for the answer window: the vocabulary projection of a
5,000-token ToC prompt would otherwise dominate memory. Scores are the trie-renormalised log-probabilities of
`strata.toc.trie`, as in the llama.cpp path.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from strata.config import TocSettings
from strata.llm import Prompt, prompt_registry
from strata.llm.packaged import resolve_model
from strata.toc.model import DocumentToc, TocEntry
from strata.toc.tree import render_toc
from strata.toc.trie import LabelTrie

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Mode = Literal["stair", "dsi"]
PROMPTS: dict[Mode, str] = {"stair": "toc_select", "dsi": "toc_dsi"}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTER_META = "strata_toc_adapter.json"
MIN_SHARED_PREFIX = 32  # tokens; below this, reusing a prefix cache saves less than copying it costs
Log = Callable[[str], None]


class AdapterMeta(BaseModel):
    mode: Mode
    base_model: str = Field(description="Identity of the base weights the adapter was trained on")
    paper_ids: list[str]
    lora_r: int
    lora_alpha: int


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
    best_dev_r1: float
    best_step: int
    stopped_early: bool
    checks: list[DevCheck]


class Example(BaseModel):
    """One prompt with its gold leaf, tokenised."""

    paper_id: str
    leaf: str
    prompt_ids: list[int]
    answer_ids: list[int] = Field(description="Label tokens followed by the end token")


def resolve_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("toc.device is 'cuda' but torch sees no CUDA device")
    return setting


def load_base_model(
    spec: str, model_dir: Path, device: str, cpu_threads: int | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """A packaged or local GGUF model dequantised into transformers: (model, tokenizer, weights identity)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if device == "cpu" and cpu_threads:
        torch.set_num_threads(cpu_threads)
    resolved = resolve_model(spec, model_dir)
    folder, name = str(resolved.path.parent), resolved.path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype).to(device)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, resolved.identity


class PromptEncoder:
    """Chat-formatted token ids of ToC prompts and answers for one tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, settings: TocSettings) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.registry = prompt_registry()
        self.end_token = int(tokenizer.eos_token_id)
        self._toc_text: dict[str, str] = {}

    def prompt(self, mode: Mode, toc: DocumentToc, query: str) -> Prompt:
        book = toc.title or toc.paper_id
        if mode == "dsi":
            return self.registry.render(PROMPTS[mode], book=book, query=query)
        return self.registry.render(PROMPTS[mode], book=book, toc=self.toc_text(toc), query=query)

    def toc_text(self, toc: DocumentToc) -> str:
        if toc.paper_id not in self._toc_text:
            text = render_toc(toc)
            budget = self.settings.context_tokens - self.settings.answer_reserve_tokens
            size = len(self.tokenizer(text, add_special_tokens=False).input_ids)
            if size > budget:
                raise ValueError(
                    f"{toc.paper_id}: the ToC has {size} tokens, more than the {budget} that toc.context_tokens "
                    "leaves for it; STAIR fine-tuning needs the whole ToC in one prompt"
                )
            self._toc_text[toc.paper_id] = text
        return self._toc_text[toc.paper_id]

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def text_ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def answer_ids(self, entry: TocEntry) -> list[int]:
        return [*self.text_ids(entry.label), self.end_token]

    def example(self, mode: Mode, toc: DocumentToc, leaf: TocEntry, query: str) -> Example:
        return Example(
            paper_id=toc.paper_id,
            leaf=leaf.number,
            prompt_ids=self.prompt_ids(self.prompt(mode, toc, query)),
            answer_ids=self.answer_ids(leaf),
        )

    def trie(self, toc: DocumentToc) -> LabelTrie:
        leaves = toc.leaves()
        return LabelTrie({leaf.number: self.answer_ids(leaf)[:-1] for leaf in leaves}, self.end_token)


def _trie_processor(trie: LabelTrie, prompt_length: int) -> Any:
    import torch
    from transformers import LogitsProcessor

    class TrieLogitsProcessor(LogitsProcessor):
        """Only tokens the trie allows, log-probabilities renormalised over them (forced tokens cost nothing)."""

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            mask = torch.full_like(scores, float("-inf"))
            for row, generated in enumerate(input_ids[:, prompt_length:].tolist()):
                mask[row, trie.allowed(generated)] = 0.0
            return torch.log_softmax(scores + mask, dim=-1)

    return TrieLogitsProcessor()


def _left_padded(sequences: Sequence[Sequence[int]], pad: int, device: str) -> tuple[Any, Any, Any]:
    """(input ids, attention mask, position ids) with every sequence ending at the last column."""
    import torch

    width = max(len(sequence) for sequence in sequences)
    ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, width - len(sequence) :] = torch.tensor(list(sequence), dtype=torch.long)
        mask[row, width - len(sequence) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def rank_prompts(
    model: PreTrainedModel,
    encoder: PromptEncoder,
    prompts: Sequence[list[int]],
    trie: LabelTrie,
    k: int,
    beam_width: int,
    batch_size: int,
) -> list[list[tuple[str, float]]]:
    """Top-k leaf numbers with constrained log-probabilities for each prompt (beam search through the trie)."""
    from transformers import GenerationConfig

    by_tokens = {tokens[:-1]: key for key, tokens in trie.sequences.items()}  # labels without the end token
    beams = max(beam_width, k)
    beam_options = (
        # Sums of log-probabilities (length_penalty 0); beams that ended early must not fill the k answers before
        # longer labels have ended.
        {"num_beams": beams, "num_return_sequences": k, "length_penalty": 0.0, "early_stopping": "never"}
        if beams > 1
        else {}
    )
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max(len(tokens) for tokens in trie.sequences.values()),
        pad_token_id=encoder.tokenizer.pad_token_id,
        eos_token_id=encoder.end_token,
        output_scores=True,
        return_dict_in_generate=True,
        **beam_options,
    )
    results: list[list[tuple[str, float]]] = []
    for batch, output, prompt_length in _generate(model, encoder, prompts, batch_size, config, trie):
        generated = output.sequences[:, prompt_length:].tolist()
        scores = output.sequences_scores.tolist() if beams > 1 else [0.0] * len(generated)
        for row in range(len(batch)):
            ranked: list[tuple[str, float]] = []
            for index in range(row * k, row * k + k):
                key = by_tokens.get(_until_end(generated[index], encoder.end_token))
                if key is not None and key not in (found for found, _ in ranked):
                    ranked.append((key, float(scores[index])))
            results.append(ranked)
    return results


def generate_texts(
    model: PreTrainedModel, encoder: PromptEncoder, prompts: Sequence[list[int]], batch_size: int, max_new_tokens: int
) -> list[str]:
    """Greedy free generation (nothing constrains the answer)."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=encoder.tokenizer.pad_token_id,
        eos_token_id=encoder.end_token,
        return_dict_in_generate=True,
    )
    texts: list[str] = []
    for _, output, prompt_length in _generate(model, encoder, prompts, batch_size, config, None):
        for row in output.sequences[:, prompt_length:].tolist():
            texts.append(encoder.tokenizer.decode(_until_end(row, encoder.end_token), skip_special_tokens=True))
    return texts


def _generate(
    model: PreTrainedModel,
    encoder: PromptEncoder,
    prompts: Sequence[list[int]],
    batch_size: int,
    config: Any,
    trie: LabelTrie | None,
) -> Iterator[tuple[Sequence[list[int]], Any, int]]:
    """(batch, generate() output, prompt length) per batch of left-padded prompts, trie-constrained when given.

    One prompt at a time (the CPU path), the prompts' shared beginning (instructions and ToC) is run once and its
    KV cache copied for each prompt, as the llama.cpp path keeps the ToC in its cache: only each question's tokens
    are read again. generate() does not spread a given cache over its beams, so the copy is repeated per beam.
    """
    import torch
    from transformers import LogitsProcessorList

    device = model.device.type
    shared = _shared_prefix_length(prompts) if batch_size == 1 and len(prompts) > 1 else 0
    prefix_cache = None
    if shared >= MIN_SHARED_PREFIX:
        with torch.no_grad(), _autocast(device):
            prefix = torch.tensor([prompts[0][:shared]], device=device)
            prefix_cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start : start + batch_size]
        ids, mask, _ = _left_padded(batch, encoder.tokenizer.pad_token_id, device)
        extra: dict[str, Any] = {}
        if trie is not None:
            extra["logits_processor"] = LogitsProcessorList([_trie_processor(trie, ids.shape[1])])
        if prefix_cache is not None:
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(config.num_beams or 1)
            extra["past_key_values"] = cache
        with torch.no_grad(), _autocast(device):
            output = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **extra)
        yield batch, output, ids.shape[1]


def _until_end(tokens: Sequence[int], end_token: int) -> tuple[int, ...]:
    cut = list(tokens).index(end_token) if end_token in tokens else len(tokens)
    return tuple(tokens[:cut])


@contextmanager
def _autocast(device: str) -> Iterator[None]:
    import torch

    if device == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield


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
    dev_batch: int = 1,
) -> tuple[Any, TrainReport]:
    """Wrap `model` with a fresh LoRA adapter and train it; early stopping keeps the weights of the best dev R@1.

    Training also ends, after one last dev check, once `budget_s` seconds have passed. Dev questions are ranked
    `dev_batch` at a time: 1 on a CPU, where one prompt at a time reuses the ToC's KV cache (a batch reads every
    prompt's whole ToC again), more on a GPU. Returns the peft model, which
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
        return peft_model, _train(
            peft_model, encoder, mode, train, dev, tries, settings, seed, log, budget_s, dev_batch
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
    step, started = 0, time.perf_counter()
    for batch in _endless_batches(train, settings.batch_size, rng):
        peft_model.train()
        loss = _loss(peft_model, batch, encoder.tokenizer.pad_token_id, device)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        step += 1
        last = step >= max_steps or (budget_s is not None and time.perf_counter() - started > budget_s)
        if step % check_every == 0 or last:
            peft_model.eval()
            r1 = dev_r1(peft_model, encoder, dev, tries, dev_batch)
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


def _loss(model: Any, batch: Sequence[Example], pad: int, device: str) -> Any:
    """Mean cross-entropy of the answer tokens.

    The examples of a batch share their prompt's beginning (instructions and, for STAIR, the whole ToC), so that
    prefix is run once and its KV cache repeated for every example; only the rest (question and answer) is run per
    example, right-padded. Gradients flow through the repeated cache into the prefix.
    """
    import torch

    shared = _shared_prefix_length([example.prompt_ids for example in batch])
    prefix = torch.tensor([batch[0].prompt_ids[:shared]], dtype=torch.long, device=device)
    suffixes = [example.prompt_ids[shared:] + example.answer_ids for example in batch]
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
    with _autocast(device):
        cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_repeat_interleave(len(batch))
        logits = model(
            input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions, past_key_values=cache
        ).logits
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1), ignore_index=-100
    )


def _shared_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens all sequences begin with, keeping at least one token of each outside the prefix."""
    shortest = min(len(sequence) for sequence in sequences) - 1
    length = 0
    while length < shortest and all(sequence[length] == sequences[0][length] for sequence in sequences):
        length += 1
    return length


def dev_r1(
    model: Any, encoder: PromptEncoder, dev: Sequence[Example], tries: dict[str, LabelTrie], batch: int
) -> float:
    """Share of dev questions whose greedy constrained answer is their leaf."""
    if not dev:
        return 0.0
    hits = 0
    for paper_id, trie in tries.items():
        examples = [example for example in dev if example.paper_id == paper_id]
        if not examples:
            continue
        ranked = rank_prompts(model, encoder, [e.prompt_ids for e in examples], trie, 1, 1, batch)
        hits += sum(1 for example, top in zip(examples, ranked) if top and top[0][0] == example.leaf)
    return hits / len(dev)


def save_adapter(peft_model: Any, folder: Path, meta: AdapterMeta) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(folder))
    (folder / ADAPTER_META).write_text(meta.model_dump_json(indent=2))


def load_adapter(model: PreTrainedModel, folder: Path, base_identity: str, mode: Mode | None = None) -> Any:
    """The base model with a saved adapter; refuses an adapter trained on other base weights (or in another mode
    than `mode`, when given)."""
    from peft import PeftModel

    meta_path = folder / ADAPTER_META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{folder} holds no ToC adapter ({ADAPTER_META} missing)")
    meta = AdapterMeta.model_validate(json.loads(meta_path.read_text()))
    if meta.base_model != base_identity:
        raise ValueError(f"{folder}: adapter was trained on {meta.base_model}, not on {base_identity}")
    if mode is not None and meta.mode != mode:
        raise ValueError(f"{folder}: a {meta.mode} adapter, not a {mode} one")
    peft_model = PeftModel.from_pretrained(model, str(folder))
    peft_model.eval()
    return peft_model
