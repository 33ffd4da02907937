"""Relate's output: a finished retrieval run (Ranking A) expanded into Ranking B and fused into the candidate papers
(Lit3R: 50) the reader gets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from strata.config import RelateSettings, Settings
from strata.corpus import CorpusView
from strata.documents.model import Ranking
from strata.relate.expand import Expansion, Relater
from strata.retrieve.fusion import reciprocal_rank_fusion
from strata.retrieve.iterative import merge_candidates
from strata.retrieve.rounds import Constraints, RetrievalRound, RetrievalRun, StopReason

CANDIDATES = "lit3r-candidates"


class CandidateSet(BaseModel):
    """Everything the reader needs from retrieval, and everything a trace needs to explain it."""

    model_config = ConfigDict(extra="forbid")

    question: str
    ranking_a: Ranking = Field(description="Question-anchored ranking: the subquery rankings fused")
    ranking_b: Ranking = Field(description="Paper-anchored ranking from the seeds' neighbours; empty when Relate is off")
    candidates: Ranking = Field(description="Rankings A and B fused: the papers handed to the reader, best first")
    rounds: list[RetrievalRound] = Field(description="Every retrieval round: queries, hits, verdict")
    stop_reason: StopReason
    constraints: Constraints = Field(description="Venue/year restrictions the question names")
    expansion: Expansion | None = Field(default=None, description="Relate's seeds and signal lists; None when off")


def expand_and_fuse(
    run: RetrievalRun, *, corpus: CorpusView, settings: Settings, expansion: Expansion | None = None
) -> CandidateSet:
    """Relate for a finished retrieval run: Ranking B from its seeds, fused with its Ranking A (unless Relate is
    off), cut to `settings.relate.candidates`. Separate from the loop so Relate variants can share one run, and
    fusion variants one `expansion` of it."""
    ranking_a, relate, rrf_k = run.ranking, settings.relate, settings.search.rrf_k
    limit = relate.candidates
    if not relate.enabled:
        expansion = None
    elif expansion is None:
        expansion = Relater(corpus, relate, settings.store.home).expand(ranking_a, rrf_k)
    if expansion is not None:
        ranking_b = expansion.ranking
        fused = _fused(ranking_a.paper_ids, ranking_b.paper_ids, relate, rrf_k)[:limit]
        candidates = Ranking(
            query=run.question, method=CANDIDATES, candidates=merge_candidates(fused, [ranking_a, ranking_b])
        )
    else:
        ranking_b = Ranking(query=run.question, method="off")
        candidates = ranking_a.top(limit)
    return CandidateSet(
        question=run.question,
        ranking_a=ranking_a,
        ranking_b=ranking_b,
        candidates=candidates,
        rounds=run.rounds,
        stop_reason=run.stop_reason,
        constraints=run.constraints,
        expansion=expansion,
    )


def _fused(
    ranking_a: list[str], ranking_b: list[str], relate: RelateSettings, rrf_k: int
) -> list[tuple[str, float]]:
    """Ranking A's first `keep_a` papers in A's order, then A and B fused (weighted RRF); each scored 1 / (k + its
    final rank). Without the kept head, even a small weight on B reorders A's head (RRF scores of neighbouring ranks
    differ by ~1/k**2), and A's best paper is the one B rarely lists first: it is the seed of its own neighbours."""
    head = ranking_a[: relate.keep_a]
    fused = reciprocal_rank_fusion([ranking_a, ranking_b], k=rrf_k, weights=[relate.weight_a, relate.weight_b])
    kept = set(head)
    order = head + [paper_id for paper_id, _ in fused if paper_id not in kept]
    return [(paper_id, 1.0 / (rrf_k + rank)) for rank, paper_id in enumerate(order, start=1)]
