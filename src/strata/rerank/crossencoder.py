"""The cross-encoder reranker, and where it finds its model: the configured one, else the one `strata
train-reranker` saved under the store."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from strata.config import RerankSettings, Settings
from strata.documents.model import Ranking
from strata.encoders.embedder import TORCH_LOCK
from strata.rerank.fusion import FusionChoice
from strata.rerank.rerankers import reordered
from strata.rerank.texts import PaperTexts

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder


def trained_model_dir(settings: Settings) -> Path:
    return settings.rerank.cross_encoder_dir or Path(settings.store.home) / "rerank" / "cross-encoder"


def cross_encoder_source(settings: Settings) -> str | None:
    """The cross-encoder to load: the configured one, else the trained one under the store, else None."""
    if settings.rerank.cross_encoder_model:
        return settings.rerank.cross_encoder_model
    trained = trained_model_dir(settings)
    return str(trained) if (trained / "config.json").is_file() else None


FUSION_FILE = "fusion.json"  # the fusion weight train-reranker chose on validation, beside the model


def trained_fusion_weight(settings: Settings) -> float:
    """The reranker weight train-reranker chose for the cross-encoder it saved; 1 (the reranker alone) for a
    configured model or one trained before fusion existed."""
    source = cross_encoder_source(settings)
    chosen = Path(source) / FUSION_FILE if source and not settings.rerank.cross_encoder_model else None
    if chosen is None or not chosen.is_file():
        return 1.0
    return FusionChoice.model_validate_json(chosen.read_text(encoding="utf-8")).weight


class CrossEncoderReranker:
    """Rescores the top `cross_encoder_depth` candidates on (query, title + window) for each of a paper's first
    `windows` windows of `passage_words` words, a paper scoring its best window's score (MaxP, Dai and Callan 2019):
    the opening words alone miss most evidence (SciFact train claims: every rationale sentence starts after word 90
    of its abstract for 51% of (claim, paper) pairs). Ties keep first-stage order."""

    name = "cross-encoder"

    def __init__(
        self, model: CrossEncoder, texts: PaperTexts, depth: int, passage_words: int, batch: int, windows: int = 1
    ) -> None:
        self.model, self.texts = model, texts
        self.depth, self.passage_words, self.batch, self.windows = depth, passage_words, batch, windows

    @classmethod
    def configured(cls, model: CrossEncoder, texts: PaperTexts, rerank: RerankSettings) -> CrossEncoderReranker:
        return cls(model, texts, rerank.cross_encoder_depth, rerank.passage_words, rerank.cross_encoder_batch,
                   rerank.cross_encoder_windows)

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        top = candidates.candidates[: self.depth]
        if not top:
            return reordered(candidates, [], self.name)
        windows = [self.texts.windows(candidate.paper_id, self.passage_words, self.windows) for candidate in top]
        pairs = [(query, window) for paper in windows for window in paper]
        with TORCH_LOCK:  # concurrent requests would oversubscribe torch's process-wide threads
            scores = self.model.predict(pairs, batch_size=self.batch)
        each = iter(scores)
        best = [max(float(score) for score in islice(each, len(paper))) for paper in windows]
        order = sorted(range(len(top)), key=lambda index: (-best[index], index))
        return reordered(candidates, [top[index] for index in order], self.name)
