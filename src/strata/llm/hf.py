"""A packaged or local GGUF model dequantised into transformers (`gguf_file=`): the base of the ToC adapters and of
the transformers LLM backend, which runs the same weights batched on a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from strata.llm.packaged import resolve_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def resolve_device(setting: str, name: str = "toc.device") -> str:
    """'cuda' or 'cpu' for a device setting ('auto': CUDA when torch sees it); `name` is the setting, for errors."""
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{name} is 'cuda' but torch sees no CUDA device")
    return setting


def load_base_tokenizer(spec: str, model_dir: Path) -> PreTrainedTokenizerBase:
    """The tokenizer of the GGUF model `load_base_model` loads, alone (seconds: no weights are read)."""
    return _gguf_tokenizer(resolve_model(spec, model_dir).path)


def _gguf_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_base_model(
    spec: str,
    model_dir: Path,
    device: str,
    cpu_threads: int | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """A packaged or local GGUF model dequantised into transformers: (model, tokenizer, weights identity); the
    tokenizer is `tokenizer` when given (one `load_base_tokenizer` already returned for `spec`)."""
    import torch
    from transformers import AutoModelForCausalLM

    if device == "cpu" and cpu_threads:
        torch.set_num_threads(cpu_threads)
    resolved = resolve_model(spec, model_dir)
    folder, name = str(resolved.path.parent), resolved.path.name
    if tokenizer is None:
        tokenizer = _gguf_tokenizer(resolved.path)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
    # transformers types `to` as a functools.wraps result, whose __call__ does not bind `self`.
    model = model.to(device)  # type: ignore[arg-type]
    model.eval()
    return model, tokenizer, resolved.identity
