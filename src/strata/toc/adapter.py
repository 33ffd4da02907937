"""The transformers model of the ToC adapters: the packaged GGUF model dequantised into transformers (`gguf_file=`),
and LoRA adapters saved with what they were trained on, loaded back only onto those base weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from strata.llm.hf import load_base_model, load_base_tokenizer, resolve_device  # noqa: F401 (their home before)
from strata.rerank.fusion import FusionChoice
from strata.toc.encode import Mode
from strata.toc.model import DocumentToc
from strata.toc.tree import toc_digest

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
    fused_with: dict[str, Any] = Field(
        default_factory=dict, description="The leaf-search settings `fusion` was chosen with (empty: not recorded)"
    )
    tocs: dict[str, str] = Field(
        default_factory=dict, description="`toc_digest` of each ToC trained on, by paper id (empty: not recorded)"
    )
    answer_format: str = Field(
        default="number title",
        description="How the adapter writes a leaf (TocEntry.answer); adapters saved before it was recorded wrote "
        "the number first",
    )


def save_adapter(peft_model: Any, folder: Path, meta: AdapterMeta) -> None:
    """Weights and meta written beside `folder`, then swapped in by renames: an interrupted save leaves the old
    adapter (or none), never new weights under old meta or a folder without meta."""
    partial, old = folder.with_name(f"{folder.name}.partial"), folder.with_name(f"{folder.name}.old")
    for leftover in (partial, old):
        shutil.rmtree(leftover, ignore_errors=True)
    partial.mkdir(parents=True)
    peft_model.save_pretrained(str(partial))
    (partial / ADAPTER_META).write_text(meta.model_dump_json(indent=2))
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def has_adapter(folder: Path) -> bool:
    """Whether `folder` holds a saved adapter (its meta is written last)."""
    return (folder / ADAPTER_META).is_file()


def read_adapter_meta(folder: Path) -> AdapterMeta:
    meta_path = folder / ADAPTER_META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{folder} holds no ToC adapter ({ADAPTER_META} missing)")
    return AdapterMeta.model_validate(json.loads(meta_path.read_text()))


def check_toc(meta: AdapterMeta, toc: DocumentToc, folder: Path) -> None:
    """Refuse an adapter for a ToC that changed since it was trained (the document re-ingested, its ToC induced
    anew): it would answer with the old leaves' labels, and the trie would map them onto other leaves."""
    trained = meta.tocs.get(toc.paper_id)
    if trained is not None and trained != toc_digest(toc):
        raise ValueError(f"{folder}: {toc.paper_id}'s ToC changed since this adapter was trained on it; train it "
                         "again (strata train-toc) or answer without it (--toc.use_adapter false)")


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
