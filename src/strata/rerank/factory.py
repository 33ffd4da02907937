"""`make_reranker`: the configured reranker over an open store (and an LLM client for the listwise ones)."""

from __future__ import annotations

import functools
import logging

from strata.config import LLM_RERANKERS, Settings
from strata.encoders.cross_encoder import load_cross_encoder
from strata.llm import LLMClient
from strata.rerank.base import FirstStage, Reranker
from strata.rerank.crossencoder import CrossEncoderReranker, cross_encoder_source, trained_fusion
from strata.rerank.features import CompactFeatures, ExtractionReport, feature_cache
from strata.rerank.fusion import FusedReranker, tuned_fusion
from strata.rerank.listwise import ListwiseLLM
from strata.rerank.pointwise import PointwiseReranker
from strata.rerank.rerankers import (
    CoarseToFineReranker,
    ListwiseReranker,
    RandomPoolReranker,
    SlidingWindowReranker,
    form4_representation,
    truncated_representation,
)
from strata.rerank.texts import PaperTexts
from strata.store.protocol import PaperStore
from strata.progress import Progress

logger = logging.getLogger(__name__)


def make_reranker(
    settings: Settings, store: PaperStore, client: LLMClient | None = None, method: str | None = None
) -> Reranker:
    """The reranker named by `method` (default: `settings.rerank.method`), fused with the first stage at
    `rerank.fusion_weight` (unset: the weight chosen when the cross-encoder was trained, or when `strata
    tune-reranker` measured the LLM reranker, else the reranker alone).

    'default' needs no LLM: the cross-encoder named by rerank.cross_encoder_model, else first-stage.
    The LLM methods (pointwise and the listwise ones) need `client`.
    """
    method = method or settings.rerank.method
    weight = settings.rerank.fusion_weight
    # Only a cross-encoder train-reranker saved has a chosen fusion ('default' names a configured model or none).
    trained = trained_fusion(settings) if method == "cross-encoder" else None
    if weight is None and method in LLM_RERANKERS:
        tuned = tuned_fusion(settings, method)
        if tuned is None:
            _warn_untuned(str(settings.store.home), method, settings.llm.model)
        weight = 1.0 if tuned is None else tuned.fusion.weight
    elif weight is None:
        weight = 1.0 if trained is None else trained.weight
    if weight == 0.0:
        return FirstStage()  # the reranker would not count: neither load it nor spend its LLM calls
    reranker = _reranker(settings, store, client, method)
    if isinstance(reranker, FirstStage):
        return reranker
    mode = "rank" if trained is None else trained.mode  # a configured weight fuses the mode validation chose
    return reranker if weight == 1.0 else FusedReranker(reranker, weight, settings.search.rrf_k, mode)


@functools.cache  # warned once per store, reranker and model, however often one is built
def _warn_untuned(home: str, method: str, model: str) -> None:
    logger.warning(
        "%s on %s was never measured on this corpus at these settings, so it runs alone, unfused with the first "
        "stage (on SciFact the embedded 0.5B's listwise and pointwise orders scored below the first stage); `strata "
        "tune-reranker --method %s` chooses a fusion weight on validation queries, or set --rerank.fusion_weight",
        method, model, method)


def _reranker(settings: Settings, store: PaperStore, client: LLMClient | None, method: str) -> Reranker:
    rerank = settings.rerank
    texts = PaperTexts(store)
    if method == "default":
        # A cross-encoder trained on the corpus alone still ranks below the first stage (SciFact test nDCG@10 0.657 vs
        # 0.731; fused at a dev-chosen weight 0.735, p 0.18: results/corank-ce-sentences.json), so only a user-named
        # model is the default.
        method = "cross-encoder" if rerank.cross_encoder_model else "first-stage"
    if method == "first-stage":
        return FirstStage()
    if method == "cross-encoder":
        source = cross_encoder_source(settings)
        if source is None:
            raise ValueError(
                "no cross-encoder: run `strata train-reranker` or set rerank.cross_encoder_model to a local model"
            )
        return CrossEncoderReranker.configured(load_cross_encoder(source), texts, rerank)
    if method not in LLM_RERANKERS:
        raise ValueError(f"unknown rerank method {method!r}")
    if client is None:
        raise ValueError(f"rerank method {method!r} needs an LLM client")
    if method == "pointwise":
        return PointwiseReranker(client, texts, rerank)
    llm = ListwiseLLM(client, rerank.window_tokens, rerank.listwise_answer)
    if method == "listwise":
        return ListwiseReranker(llm, texts, rerank)
    if method == "sliding-window":
        return SlidingWindowReranker(llm, texts, rerank)
    if method == "random-pool":
        return RandomPoolReranker(llm, texts, rerank)
    form4 = form4_representation(compact_features(settings, texts, client), texts, rerank)
    if method == "corank":
        return CoarseToFineReranker("corank", llm, texts, rerank, form4)
    return CoarseToFineReranker("corank-truncated", llm, texts, rerank, truncated_representation(form4, texts))


def compact_features(settings: Settings, texts: PaperTexts, client: LLMClient | None) -> CompactFeatures:
    from strata.encoders.embedder import Embedder

    return CompactFeatures(
        feature_cache(settings), texts, Embedder(settings.index.embedding), settings.rerank, client
    )


def extract_features(
    settings: Settings,
    store: PaperStore,
    client: LLMClient,
    paper_ids: list[str] | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
) -> ExtractionReport:
    """`strata features`: compact features for the given papers (default: the whole corpus, or its first `limit`
    by id); papers with current cached features cost no LLM call."""
    wanted = paper_ids or store.paper_ids()[:limit]
    return compact_features(settings, PaperTexts(store), client).ensure(wanted, progress)
