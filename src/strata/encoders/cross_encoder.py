"""The cross-encoder: a sentence-transformers CrossEncoder loaded from disk, never from a hub."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

BASE_MODEL = "packaged:all-MiniLM-L6-v2"  # what `strata train-reranker` fine-tunes


def load_cross_encoder(source: str) -> CrossEncoder:
    # Offline before the import: a named hub model must already be in the local cache; nothing is downloaded.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import CrossEncoder

    return CrossEncoder(source, device="cpu", local_files_only=True)
