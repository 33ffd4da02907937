"""The static embedding tier: a model2vec static model distilled from the dense encoder, built on first use.

Distillation (model2vec's `distill_from_model`) runs every word piece of the sentence-transformers model's vocabulary
through the model once, keeps the mean output per piece, reduces them by PCA and weights them (SIF); a text's
vector is then the normalised sum of its pieces' vectors, with no transformer at embedding time.

The distilled model is cached under `static_dir` in a folder named by the model and the distillation parameters. It is
written to a temporary folder beside that one and renamed into place, so an interrupted build leaves no half model
(the next use builds it again) and concurrent builders agree (the first rename wins; the others use its model).

Encoding is vectorised rather than run through the tokenizer per text: texts are lowercased and split on whitespace
by numpy over their UTF-8 bytes, each word is identified by a 64-bit polynomial hash, and a word seen for the first
time is cut into word pieces once by the model's own tokenizer (which applies its normalisation and punctuation
splitting, so the pieces are the tokenizer's). Text vectors are sums of piece vectors (torch `embedding_bag`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from strata.config import EmbeddingSettings

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

DISTILL_FORMAT = "static-v1"  # part of the cache folder name: a change of the build recipe builds anew
_HASH_BASE = np.uint64(0x100000001B3)  # odd: invertible modulo 2**64
_HASH_BASE_INVERSE = np.uint64(pow(0x100000001B3, -1, 2**64))
_BATCH_BYTES = 1 << 20
_MAX_CACHED_WORDS = 4_000_000  # ~100 MB of hashes and piece lists; past this, the word table starts again


def static_model_folder(settings: EmbeddingSettings, model_path: Path) -> Path:
    """Where the static model distilled from `model_path` with `settings` is cached."""
    name = settings.model.removeprefix("packaged:").replace("/", "_").strip("._") or "model"
    recipe = f"{DISTILL_FORMAT}|{model_path.resolve()}|{settings.static_dims}|{settings.static_vocabulary}"
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    suffix = f"-v{settings.static_vocabulary}" if settings.static_vocabulary else ""
    return Path(settings.static_dir).expanduser() / f"{name}-d{settings.static_dims}{suffix}-{digest}"


def ensure_static_model(settings: EmbeddingSettings, model_path: Path) -> Path:
    """The cached static model's folder, distilled from `model_path` first when it is not there yet."""
    folder = static_model_folder(settings, model_path)
    if (folder / "model.safetensors").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        log.warning("distilling a static embedding from %s into %s (once; a minute or more)", model_path, folder)
        distill_static(model_path, temp, settings.static_dims, settings.static_vocabulary)
        try:
            os.rename(temp, folder)
        except OSError:
            if not (folder / "model.safetensors").is_file():
                raise
            # Another process finished the same build first: use its model.
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return folder


def distill_static(model_path: Path, target: Path, dims: int, vocabulary: int = 0) -> None:
    """Distil a model2vec static model from the sentence-transformers folder `model_path` into `target`."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from model2vec.distill import distill_from_model
    from transformers import AutoModel, AutoTokenizer

    from strata.encoders.embedder import TORCH_LOCK

    tokenizer = AutoTokenizer.from_pretrained(str(model_path), use_fast=True, local_files_only=True)
    model = AutoModel.from_pretrained(str(model_path), local_files_only=True)
    pattern = r"\[unused\d+\]"
    if vocabulary:
        pattern = _keep_first_pattern(tokenizer.get_vocab(), vocabulary, pattern)
    with TORCH_LOCK:
        static = distill_from_model(
            model=model, tokenizer=tokenizer, device="cpu", pca_dims=dims, token_remove_pattern=pattern  # type: ignore[arg-type]
        )
    static.save_pretrained(str(target))


def _keep_first_pattern(vocab: dict[str, int], keep: int, removed: str) -> str:
    """A pattern matching every token but the first `keep` by id (special tokens always kept) and `removed`."""
    import re

    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    ordered = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    kept = [t for t in ordered if t in special or not re.fullmatch(removed, t)][: keep + len(special)]
    alternatives = "|".join(re.escape(token) for token in sorted(set(kept) | special, key=len, reverse=True))
    return rf"(?:{removed})$|(?!(?:{alternatives})$)"


class StaticEncoder:
    """L2-normalised float32 text vectors from a model2vec static model folder; safe to share between threads."""

    def __init__(self, folder: Path) -> None:
        from model2vec import StaticModel

        static = StaticModel.from_pretrained(folder, force_download=False)
        self.folder = folder
        self._tokenizer: Tokenizer = static.tokenizer
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        embedding = np.asarray(static.embedding, dtype=np.float32)
        if static.token_mapping is not None:
            embedding = embedding[np.asarray(static.token_mapping)]
        if static.weights is not None:
            embedding = embedding * np.asarray(static.weights, dtype=np.float32)[:, None]
        self._unk = static.unk_token_id
        self._wordpiece = _wordpiece_of(self._tokenizer)
        self.dimension = int(embedding.shape[1])
        import torch

        self._embedding = torch.from_numpy(np.ascontiguousarray(embedding))
        self._lock = threading.Lock()
        self._reset_words()

    def _reset_words(self) -> None:
        # Open-addressing hash table of the words seen: slot -> word hash and word id (-1: empty).
        self._slot_hash = np.zeros(1 << 16, dtype=np.uint64)
        self._slot_word = np.full(1 << 16, -1, dtype=np.int64)
        self._starts = np.zeros(0, dtype=np.int64)  # per word id: first of its pieces in _pieces
        self._counts = np.zeros(0, dtype=np.int64)  # per word id: how many pieces
        self._pieces = np.zeros(0, dtype=np.int64)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        encoded = [text.lower().encode("utf-8", "replace") for text in texts]
        parts: list[np.ndarray] = []
        batch: list[bytes] = []
        size = 0
        for text in encoded:  # about a MiB of text at a time: bounded temporaries (the hash tables grow with it)
            if batch and size + len(text) > _BATCH_BYTES:
                parts.append(self._encode_bytes(batch))
                batch, size = [], 0
            batch.append(text)
            size += len(text) + 1
        parts.append(self._encode_bytes(batch))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _encode_bytes(self, encoded: list[bytes]) -> np.ndarray:
        data = b" ".join(encoded)
        text_starts = np.zeros(len(encoded), dtype=np.int64)
        text_starts[1:] = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)) + 1)[:-1]
        starts, ends, hashes = _words(np.frombuffer(data, dtype=np.uint8))
        with self._lock:
            word_ids = self._word_ids(data, starts, ends, hashes)
            counts = self._counts[word_ids]
            piece_index = np.repeat(self._starts[word_ids] - (np.cumsum(counts) - counts), counts)
            piece_index += np.arange(piece_index.size, dtype=np.int64)
            pieces = self._pieces[piece_index]
        # Words never span two texts (they are joined by a space): each text's words are a run of the word list.
        cumulative = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=cumulative[1:])
        offsets = cumulative[np.searchsorted(starts, text_starts)]
        import torch

        with torch.inference_mode():
            sums = torch.nn.functional.embedding_bag(
                torch.from_numpy(pieces), self._embedding, torch.from_numpy(offsets), mode="sum"
            ).numpy()
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        return np.ascontiguousarray(sums / np.maximum(norms, 1e-12), dtype=np.float32)

    def _lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Word id of each hash, -1 for words not seen yet (linear probing, all hashes at once)."""
        mask = np.uint64(self._slot_hash.size - 1)
        slots = (hashes & mask).astype(np.int64)
        ids = np.full(hashes.size, -1, dtype=np.int64)
        pending = np.arange(hashes.size)
        while pending.size:
            at = slots[pending]
            words = self._slot_word[at]
            hit = (words >= 0) & (self._slot_hash[at] == hashes[pending])
            ids[pending[hit]] = words[hit]
            pending = pending[(words >= 0) & ~hit]  # an occupied slot of another word: probe the next
            slots[pending] = (slots[pending] + 1) & int(mask)
        return ids

    def _word_ids(self, data: bytes, starts: np.ndarray, ends: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        ids = self._lookup(hashes)
        missing = ids < 0
        if missing.any():
            if self._counts.size + int(missing.sum()) > _MAX_CACHED_WORDS:
                self._reset_words()  # a pathological corpus of unique tokens: keep memory bounded
                missing[:] = True
            new_hashes, first = np.unique(hashes[missing], return_index=True)
            where = np.flatnonzero(missing)[first]
            words = [data[s:e].decode("utf-8", "replace") for s, e in zip(starts[where].tolist(), ends[where].tolist())]
            self._add_words(new_hashes, words)
            ids = self._lookup(hashes)
        return ids

    def _add_words(self, hashes: np.ndarray, words: list[str]) -> None:
        """Cut `words` (with their distinct, unseen `hashes`) into the tokenizer's pieces and remember them."""
        piece_lists: list[list[int] | None] = [self._wordpiece(word) if self._wordpiece else None for word in words]
        others = [i for i, pieces in enumerate(piece_lists) if pieces is None]
        if others:
            encodings = self._tokenizer.encode_batch_fast([words[i] for i in others], add_special_tokens=False)
            for i, encoding in zip(others, encodings):
                piece_lists[i] = encoding.ids
        lists = [[p for p in pieces if p != self._unk] for pieces in piece_lists if pieces is not None]
        counts = np.fromiter(map(len, lists), np.int64, len(lists))
        word_ids = self._counts.size + np.arange(len(lists), dtype=np.int64)
        self._starts = np.concatenate([self._starts, self._pieces.size + np.cumsum(counts) - counts])
        self._counts = np.concatenate([self._counts, counts])
        self._pieces = np.concatenate([self._pieces, np.fromiter((p for ps in lists for p in ps), np.int64)])
        if 2 * self._counts.size > self._slot_hash.size:  # keep the table at most half full: grow and re-insert
            size = 1 << (4 * self._counts.size - 1).bit_length()
            old_hash, old_word = self._slot_hash, self._slot_word
            used = old_word >= 0
            self._slot_hash = np.zeros(size, dtype=np.uint64)
            self._slot_word = np.full(size, -1, dtype=np.int64)
            self._insert(old_hash[used], old_word[used])
        self._insert(hashes, word_ids)

    def _insert(self, hashes: np.ndarray, word_ids: np.ndarray) -> None:
        mask = self._slot_hash.size - 1
        slots = (hashes & np.uint64(mask)).astype(np.int64)
        pending = np.arange(hashes.size)
        while pending.size:
            at = slots[pending]
            # Of several pending words wanting one free slot, the first takes it; the others probe on.
            free = self._slot_word[at] < 0
            _, first = np.unique(at, return_index=True)
            take = np.zeros(pending.size, dtype=bool)
            take[first] = True
            take &= free
            self._slot_hash[at[take]] = hashes[pending[take]]
            self._slot_word[at[take]] = word_ids[pending[take]]
            pending = pending[~take]
            slots[pending] = (slots[pending] + 1) & mask


def _wordpiece_of(tokenizer: Tokenizer) -> Callable[[str], list[int] | None] | None:
    """A Python WordPiece for lowercase ASCII words, exactly the tokenizer's (BERT's greedy longest match), or None
    when the tokenizer is not a lowercasing BERT WordPiece; it answers None for a word it leaves to the tokenizer."""
    import json

    spec = json.loads(tokenizer.to_str())
    model, normalizer = spec.get("model") or {}, spec.get("normalizer") or {}
    if model.get("type") != "WordPiece" or not (normalizer.get("type") == "BertNormalizer" and normalizer.get("lowercase")):
        return None
    vocab: dict[str, int] = tokenizer.get_vocab()
    prefix = model.get("continuing_subword_prefix", "##")
    longest = int(model.get("max_input_chars_per_word", 100))
    unknown = [vocab[model["unk_token"]]] if model.get("unk_token") in vocab else []

    def pieces(word: str) -> list[int] | None:
        if not word.isascii() or not word.isalnum():
            return None  # accents, other scripts, control characters: the tokenizer's own normalisation
        if word in vocab:
            return [vocab[word]]
        if len(word) > longest:
            return unknown
        found: list[int] = []
        start = 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else prefix + word[start:end]
                if piece in vocab:
                    found.append(vocab[piece])
                    start = end
                    break
            else:
                return unknown  # no piece matches: BERT makes the whole word [UNK]
        return found

    return pieces


# Byte classes: 0 whitespace, 1 part of a word, 2 ASCII punctuation (a word of its own, as BERT splits it).
_CLASS = np.ones(256, dtype=np.int8)
_CLASS[[ord(c) for c in " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"]] = 0
_CLASS[[c for c in range(33, 127) if not chr(c).isalnum()]] = 2


def _words(buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, 64-bit hash) of each word of the lowercased UTF-8 bytes `buffer`: runs of word bytes between
    whitespace, each ASCII punctuation character a word of its own."""
    if buffer.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.uint64)
    kind = _CLASS[buffer]
    inside = kind == 1
    punct = kind == 2
    before = np.concatenate(([False], inside[:-1]))
    after = np.concatenate((inside[1:], [False]))
    starts = np.flatnonzero(punct | (inside & ~before))
    ends = np.flatnonzero(punct | (inside & ~after)) + 1
    powers, inverse_powers = _powers(buffer.size)
    with np.errstate(over="ignore"):
        prefix = np.zeros(buffer.size + 1, dtype=np.uint64)
        np.cumsum((buffer.astype(np.uint64) + np.uint64(1)) * powers[: buffer.size], out=prefix[1:])
        hashes = (prefix[ends] - prefix[starts]) * inverse_powers[starts]
        hashes ^= (ends - starts).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        hashes ^= hashes >> np.uint64(29)  # mix the high bits into the low ones the table slots use
    return starts, ends, hashes


@lru_cache(maxsize=1)
def _power_table(size: int) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(over="ignore"):
        powers = np.full(size, _HASH_BASE, dtype=np.uint64)
        powers[0] = 1
        np.cumprod(powers, out=powers)
        inverse = np.full(size, _HASH_BASE_INVERSE, dtype=np.uint64)
        inverse[0] = 1
        np.cumprod(inverse, out=inverse)
    return powers, inverse


def _powers(size: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE**i and BASE**-i modulo 2**64 for i < size (a table grown in powers of two and reused)."""
    return _power_table(1 << max(16, (size - 1).bit_length()))


@lru_cache(maxsize=2)
def load_static_encoder(folder: str) -> StaticEncoder:
    """One encoder per model folder and process (its word table is shared by every Embedder using it)."""
    return StaticEncoder(Path(folder))
