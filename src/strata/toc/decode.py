"""Inference with a transformers ToC model: trie-constrained beam search over a document's leaf labels, and free
generation (to count hallucinations).

Batches are left-padded so every answer ends at the last position, and logits are computed only for the answer
window: the vocabulary projection of a 5,000-token ToC prompt would otherwise dominate memory. Scores are the
trie-renormalised log-probabilities of `strata.toc.trie`, as in the llama.cpp path.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

from strata.config import TocSettings
from strata.toc.encode import Mode, PromptEncoder, shared_prefix_length
from strata.toc.model import DocumentToc, LeafRanking
from strata.toc.retriever import match_generation
from strata.toc.trie import LabelTrie

if TYPE_CHECKING:
    import torch

MIN_SHARED_PREFIX = 32  # tokens; below this, reusing a prefix cache saves less than copying it costs
FREE_EXTRA_TOKENS = 8


class CausalLM(Protocol):
    """A transformers causal LM, bare or under a LoRA adapter (PreTrainedModel itself has no generate())."""

    @property
    def device(self) -> torch.device: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def generate(self, *args: Any, **kwargs: Any) -> Any: ...


def _trie_processor(trie: LabelTrie, prompt_length: int) -> Any:
    import torch
    from transformers import LogitsProcessor

    class TrieLogitsProcessor(LogitsProcessor):
        """Only tokens the trie allows, log-probabilities renormalised over them (forced tokens cost nothing)."""

        def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
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
    model: CausalLM,
    encoder: PromptEncoder,
    prompts: Sequence[list[int]],
    trie: LabelTrie,
    k: int,
    beam_width: int,
    batch_size: int,
    prefix: PrefixCache | None = None,
) -> list[list[tuple[str, float]]]:
    """Top-k leaf numbers with constrained log-probabilities for each prompt (beam search through the trie).

    `prefix`: the cached beginning every prompt continues, `batch_size` prompts at a time; for an adapter trained
    on a ToC the base model reads (`toc.adapt_toc` off) it must be that reading (`PrefixCache(..., base=True)`).
    Without it, one prompt at a time shares whatever beginning the prompts have in common."""
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
    for batch, output, prompt_length in _generate(model, encoder, prompts, batch_size, config, trie, prefix):
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
    model: CausalLM,
    encoder: PromptEncoder,
    prompts: Sequence[list[int]],
    batch_size: int,
    max_new_tokens: int,
    prefix: PrefixCache | None = None,
) -> list[str]:
    """Greedy free generation (nothing constrains the answer); `prefix` as in `rank_prompts`."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=encoder.tokenizer.pad_token_id,
        eos_token_id=encoder.end_token,
        return_dict_in_generate=True,
    )
    texts: list[str] = []
    for _, output, prompt_length in _generate(model, encoder, prompts, batch_size, config, None, prefix):
        for row in output.sequences[:, prompt_length:].tolist():
            text = encoder.tokenizer.decode(list(_until_end(row, encoder.end_token)), skip_special_tokens=True)
            assert isinstance(text, str)  # one sequence decodes to one string
            texts.append(text)
    return texts


def _generate(
    model: CausalLM,
    encoder: PromptEncoder,
    prompts: Sequence[list[int]],
    batch_size: int,
    config: Any,
    trie: LabelTrie | None,
    prefix: PrefixCache | None,
) -> Iterator[tuple[Sequence[list[int]], Any, int]]:
    """(batch, generate() output, prompt length) per batch of left-padded prompts, trie-constrained when given.

    With a `prefix` (given, or the prompts' shared beginning when they go one at a time: the CPU path), the
    instructions and ToC are run once and their KV cache copied for each prompt, as the llama.cpp path keeps the ToC
    in its cache: only each question's tokens are read again. A batch then pads between the prefix and each
    question (masked), so the GPU answers many questions per call on one ToC reading. generate() does not spread a
    given cache over its beams, so the copy is repeated per beam.
    """
    import torch
    from transformers import LogitsProcessorList

    device = model.device.type
    pad = encoder.tokenizer.pad_token_id
    if prefix is not None:
        for prompt in prompts:
            prefix.check(prompt)
    else:
        prefix = _shared_prefix_cache(model, prompts, batch_size)
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start : start + batch_size]
        if prefix is None:
            ids, mask, _ = _left_padded(batch, pad, device)
        else:
            ids, mask = _padded_after_prefix(batch, prefix.ids, pad, device)
        extra: dict[str, Any] = {}
        if trie is not None:
            extra["logits_processor"] = LogitsProcessorList([_trie_processor(trie, ids.shape[1])])
        if prefix is not None:
            extra["past_key_values"] = prefix.copy(len(batch) * (config.num_beams or 1))
        with torch.no_grad(), autocast(device):
            output = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **extra)
        yield batch, output, ids.shape[1]


def _padded_after_prefix(
    sequences: Sequence[Sequence[int]], prefix: Sequence[int], pad: int, device: str
) -> tuple[Any, Any]:
    """(input ids, attention mask): the shared prefix, then each sequence's rest left-padded (masked), so every
    sequence ends at the last column and the prefix's cached keys stay where they were computed."""
    import torch

    rests, rest_mask, _ = _left_padded([sequence[len(prefix) :] for sequence in sequences], pad, "cpu")
    head = torch.tensor([list(prefix)] * len(sequences), dtype=torch.long)
    ids = torch.cat([head, rests], dim=1)
    mask = torch.cat([torch.ones_like(head), rest_mask], dim=1)
    return ids.to(device), mask.to(device)


class PrefixCache:
    """The KV cache of a prompt beginning (instructions and ToC), computed once and copied for each use.

    `base` reads the prefix with the adapter disabled: the ToC an adapter trained with `toc.adapt_toc` off saw.
    """

    def __init__(self, model: CausalLM, ids: Sequence[int], base: bool) -> None:
        import torch

        self.ids = list(ids)
        device = model.device.type
        peft_model: Any = model  # only a peft model can disable its adapter, and `base` asks it to
        without_adapter = peft_model.disable_adapter() if base else nullcontext()
        with torch.no_grad(), autocast(device), without_adapter:
            prefix = torch.tensor([self.ids], dtype=torch.long, device=device)
            self.cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values

    def copy(self, repeats: int) -> Any:
        cache = copy.deepcopy(self.cache)
        if repeats > 1:
            cache.batch_repeat_interleave(repeats)
        return cache

    def check(self, prompt: Sequence[int]) -> None:
        if list(prompt[: len(self.ids)]) != self.ids or len(prompt) <= len(self.ids):
            raise ValueError("a prompt does not continue the cached ToC prefix (its ToC or instructions differ)")


def _shared_prefix_cache(model: CausalLM, prompts: Sequence[list[int]], batch_size: int) -> PrefixCache | None:
    shared = shared_prefix_length(prompts) if batch_size == 1 and len(prompts) > 1 else 0
    return PrefixCache(model, prompts[0][:shared], base=False) if shared >= MIN_SHARED_PREFIX else None


def _until_end(tokens: Sequence[int], end_token: int) -> tuple[int, ...]:
    cut = list(tokens).index(end_token) if end_token in tokens else len(tokens)
    return tuple(tokens[:cut])


@contextmanager
def autocast(device: str) -> Iterator[None]:
    import torch

    if device == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield


def rank_questions(
    method: str,
    model: Any,
    encoder: PromptEncoder,
    toc: DocumentToc,
    questions: Sequence[str],
    settings: TocSettings,
    prompt: Mode,
    free: bool,
    batch: int = 1,
    only_free: bool = False,
    base_prefix: bool = False,
) -> list[LeafRanking]:
    """Rank questions about one document on `prompt`'s input: trie-constrained beam search, plus free generation
    when `free` (to measure hallucination); with `only_free` the free answer is the ranking (the unconstrained
    baseline). `base_prefix`: the adapter was trained on a ToC the base model reads (`toc.adapt_toc` off)."""
    prompts = [encoder.prompt_ids(encoder.prompt(prompt, toc, question)) for question in questions]
    prefix = PrefixCache(model, encoder.query_prefix(prompt, toc), base=True) if base_prefix else None
    trie = encoder.trie(toc)
    started = time.perf_counter()
    ranked: Sequence[list[tuple[str, float]]] = (
        [[] for _ in questions]
        if only_free
        else rank_prompts(model, encoder, prompts, trie, settings.top_k, settings.beam_width, batch, prefix)
    )
    # Room for the longest label and some more: enough to tell a leaf from a made-up or run-on answer.
    room = max(len(tokens) for tokens in trie.sequences.values()) + FREE_EXTRA_TOKENS
    texts = generate_texts(model, encoder, prompts, batch, room, prefix) if free else None
    each = (time.perf_counter() - started) / max(len(questions), 1)
    rankings: list[LeafRanking] = []
    for index, question in enumerate(questions):
        leaves = [toc.entry(number).scored(score) for number, score in ranked[index]]
        raw = texts[index] if texts is not None else None
        named = match_generation(toc, raw) if raw is not None else None
        if only_free and named is not None:
            leaves = [named.scored(0.0)]
        rankings.append(
            LeafRanking(
                query=question,
                method=method,
                leaves=leaves,
                raw_output=raw,
                hallucinated=raw is not None and named is None,
                seconds=each,
            )
        )
    return rankings
