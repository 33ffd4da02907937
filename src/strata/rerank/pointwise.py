"""Pointwise LLM relevance: each of the top candidates scored alone by P(yes) that it answers the query.

A small model ranks a list poorly when it must write the list (the 0.5B returned the input order), but a scored
yes/no needs no generation: the log-probabilities of 'yes' and 'no' as the answer's first word give
P(yes) = p(yes) / (p(yes) + p(no)), a relevance score per candidate (monoT5's recipe, Nogueira et al. 2020, with an
instruction model instead of a fine-tuned one). One call per candidate, so `pointwise_depth` bounds the cost; the
LLM response cache makes a rerun of the same query and candidates free.
"""

from __future__ import annotations

import logging

from strata.config import RerankSettings
from strata.documents.model import Ranking
from strata.llm import LLMClient, LLMError
from strata.rerank.base import nan_lowest
from strata.rerank.model import rerank_prompts
from strata.rerank.rerankers import reordered
from strata.rerank.texts import PaperTexts

logger = logging.getLogger(__name__)


class PointwiseReranker:
    """The top `pointwise_depth` candidates ordered by P(yes) (a NaN one last), ties in first-stage order; the rest
    keep theirs."""

    name = "pointwise"

    def __init__(self, client: LLMClient, texts: PaperTexts, settings: RerankSettings) -> None:
        self.client, self.texts, self.settings = client, texts, settings
        self._prompts = rerank_prompts()

    def relevance(self, query: str, paper_id: str) -> float:
        """P(yes) that the paper's title and first `passage_words` words answer `query`; 0 for a paper with neither
        (nothing to judge, and a model asked about an empty document still answers)."""
        document = " ".join(self.texts.passage(paper_id, self.settings.passage_words).split())
        if not document:
            return 0.0
        return self.client.p_yes(self._prompts.render("rerank_pointwise", document=document, query=query))

    def rank(self, query: str, candidates: Ranking) -> Ranking:
        top = candidates.candidates[: self.settings.pointwise_depth]
        try:
            scores = [self.relevance(query, candidate.paper_id) for candidate in top]
        except LLMError as error:
            # One unusable call (a dead server, a passage over n_ctx) keeps the first-stage order, as a listwise
            # window does, instead of failing the whole search.
            logger.warning("pointwise reranking kept the first-stage order for %r: %s", query, error)
            return candidates
        order = sorted(range(len(top)), key=lambda index: (-nan_lowest(scores[index]), index))
        return reordered(candidates, [top[index] for index in order], self.name)
