"""The cross-encoder reranker, and where it finds its model: the configured one, else the one `strata
train-reranker` saved under the store."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from strata.config import RerankSettings, Settings
from strata.documents.model import Ranking
from strata.encoders.embedder import TORCH_LOCK, torch_threads
from strata.rerank.base import nan_lowest
from strata.rerank.fusion import FusionChoice, reordered_by_scores
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


def trained_fusion(settings: Settings) -> FusionChoice | None:
    """The fusion train-reranker chose on validation for the cross-encoder it saved; None for a configured model or
    one trained before fusion existed (the reranker then runs alone)."""
    source = cross_encoder_source(settings)
    chosen = Path(source) / FUSION_FILE if source and not settings.rerank.cross_encoder_model else None
    if chosen is None or not chosen.is_file():
        return None
    return FusionChoice.model_validate_json(chosen.read_text(encoding="utf-8"))


class CrossEncoderReranker:
    """Rescores the top `cross_encoder_depth` candidates on (query, title + window) for each of a paper's first
    `windows` windows of `passage_words` words, a paper scoring its best window's score (MaxP, Dai and Callan 2019):
    the opening words alone miss most evidence (SciFact train claims: every rationale sentence starts after word 90
    of its abstract for 51% of (claim, paper) pairs). Ties keep first-stage order."""

    name = "cross-encoder"

    def __init__(
        self, model: CrossEncoder, texts: PaperTexts, depth: int, passage_words: int, batch: int, windows: int = 1,
        threads: int = 2,
    ) -> None:
        self.model, self.texts = model, texts
        self.depth, self.passage_words, self.batch, self.windows = depth, passage_words, batch, windows
        self.threads = threads

    @classmethod
    def configured(cls, model: CrossEncoder, texts: PaperTexts, rerank: RerankSettings) -> CrossEncoderReranker:
        return cls(model, texts, rerank.cross_encoder_depth, rerank.passage_words, rerank.cross_encoder_batch,
                   rerank.cross_encoder_windows, rerank.cross_encoder_threads)

    def scores(self, query: str, candidates: Ranking) -> dict[str, float]:
        """Each of the top `depth` candidates' best window score (-inf where the model gave only NaN)."""
        top = candidates.candidates[: self.depth]
        windows = [self.texts.windows(candidate.paper_id, self.passage_words, self.windows) for candidate in top]
        pairs = [(query, window) for paper in windows for window in paper]
        if not pairs:
            return {}
        with TORCH_LOCK:  # concurrent requests would oversubscribe torch's process-wide threads
            torch_threads(self.threads)
            scores = self.model.predict(pairs, batch_size=self.batch)
        each = iter(scores)
        return {candidate.paper_id: max(nan_lowest(float(score)) for score in islice(each, len(paper)))
                for candidate, paper in zip(top, windows)}  # fmt: skip

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        return reordered_by_scores(candidates, self.scores(query, candidates), self.name)
