"""Reranking: one `Reranker` interface over CoRank, listwise LLM baselines and a cross-encoder."""

from strata.rerank.base import FirstStage, Reranker

__all__ = ["FirstStage", "Reranker"]
