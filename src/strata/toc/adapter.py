"""The transformers model of the ToC adapters: the packaged GGUF model dequantised into transformers (`gguf_file=`),
and LoRA adapters saved with what they were trained on, loaded back only onto those base weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from strata.llm.packaged import resolve_model
from strata.rerank.fusion import FusionChoice
from strata.toc.encode import Mode

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ADAPTER_META = "strata_toc_adapter.json"
ANSWER_FORMAT = "title (number)"  # TocEntry.answer


class AdapterMeta(BaseModel):
    mode: Mode
    base_model: str = Field(description="Identity of the base weights the adapter was trained on")
    paper_ids: list[str]
    lora_r: int
    lora_alpha: int
    adapt_toc: bool = Field(
        default=True,
        description="Trained on the ToC tokens too; False: the base model reads the ToC (toc.adapt_toc)",
    )
    fusion: FusionChoice | None = Field(
        default=None, description="The weight of the adapter's order in the fused retriever, chosen on dev questions"
    )
    answer_format: str = Field(
        default="number title",
        description="How the adapter writes a leaf (TocEntry.answer); adapters saved before it was recorded wrote "
        "the number first",
    )


def resolve_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("toc.device is 'cuda' but torch sees no CUDA device")
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


def save_adapter(peft_model: Any, folder: Path, meta: AdapterMeta) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(folder))
    (folder / ADAPTER_META).write_text(meta.model_dump_json(indent=2))


def read_adapter_meta(folder: Path) -> AdapterMeta:
    meta_path = folder / ADAPTER_META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{folder} holds no ToC adapter ({ADAPTER_META} missing)")
    return AdapterMeta.model_validate(json.loads(meta_path.read_text()))


def load_adapter(model: PreTrainedModel, folder: Path, base_identity: str, mode: Mode | None = None) -> Any:
    """The base model with a saved adapter; refuses an adapter trained on other base weights (or in another mode
    than `mode`, when given)."""
    from peft import PeftModel

    meta = read_adapter_meta(folder)
    if meta.base_model != base_identity:
        raise ValueError(f"{folder}: adapter was trained on {meta.base_model}, not on {base_identity}")
    if meta.answer_format != ANSWER_FORMAT:
        raise ValueError(
            f"{folder}: the adapter answers as '{meta.answer_format}', not as '{ANSWER_FORMAT}'; train it again "
            "(strata train-toc)"
        )
    if mode is not None and meta.mode != mode:
        raise ValueError(f"{folder}: a {meta.mode} adapter, not a {mode} one")
    peft_model = PeftModel.from_pretrained(model, str(folder))
    peft_model.eval()
    return peft_model
