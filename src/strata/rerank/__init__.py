"""Reranking: one `Reranker` interface over CoRank, listwise LLM baselines and a cross-encoder."""

from strata.rerank.base import FirstStage, Reranker
from strata.rerank.factory import make_reranker

__all__ = ["FirstStage", "Reranker", "make_reranker"]
