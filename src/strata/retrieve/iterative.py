"""Lit3R Retrieve: question-anchored iterative retrieval (Ranking A).

Round 1 asks the LLM to split the question into subqueries; later rounds ask for new ones aimed at what the verifier
found missing. Each subquery runs the `retrieve.method` search (RM3 feedback when `retrieve.prf` is on) and is
reranked; all subquery rankings so far are pooled by reciprocal rank fusion. The verifier reads the pooled top
evidence and says whether it suffices.
The loop stops when it does, when no new subquery comes back, or after `max_rounds`.
Without an LLM client the question itself is the one subquery of one round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from strata.config import RetrieveSettings
from strata.documents.model import Candidate, ChunkHit, Ranking
from strata.llm.client import LLMClient
from strata.llm.errors import LLMOutputError
from strata.llm.trace import Trace
from strata.rerank.base import Reranker
from strata.retrieve.constraints import extract_constraints, merge_llm_constraints, satisfies
from strata.retrieve.fusion import reciprocal_rank_fusion
from strata.retrieve.protocol import Searcher
from strata.retrieve.rounds import (
    Constraints,
    RetrievalRound,
    RetrievalRun,
    StopReason,
    Subqueries,
    SubqueryResult,
    Verdict,
    retrieve_prompts,
)
from strata.store.protocol import PaperStore

POOLED_METHOD = "lit3r-retrieve"
MAX_SUBQUERY_WORDS = 32  # a "subquery" longer than this is the model rambling, not a search query


class QuestionRetriever:
    """Runs the loop for one question at a time; holds the searcher, the store (for the papers' venues and years),
    the reranker and the (optional) LLM client."""

    def __init__(
        self,
        searcher: Searcher,
        store: PaperStore,
        reranker: Reranker,
        settings: RetrieveSettings,
        client: LLMClient | None = None,
        rrf_k: int = 60,
    ) -> None:
        self.searcher = searcher
        self.store = store
        self.reranker = reranker
        self.settings = settings
        self.client = client
        self.rrf_k = rrf_k

    def run(self, question: str, trace: Trace | None = None) -> RetrievalRun:
        if not question.strip():
            raise ValueError("the question is empty")
        constraints = extract_constraints(question)
        asked: list[str] = []
        results: list[SubqueryResult] = []
        rounds: list[RetrievalRound] = []
        verdict: Verdict | None = None
        stop: StopReason = "max_rounds"
        for number in range(1, self.settings.max_rounds + 1):
            queries, constraints = self._next_queries(question, number, asked, verdict, constraints, trace)
            if not queries:
                stop = "no_new_subquery"
                break
            asked.extend(queries)
            round_results = [self._search(query, constraints) for query in queries]
            results.extend(round_results)
            pooled = pool([result.ranking for result in results], question, self.settings.pool_k, self.rrf_k)
            last_round = number == self.settings.max_rounds
            # The last round's verdict could change nothing, so it is not asked for.
            verdict = None if self.client is None or last_round else self._verify(question, pooled, trace)
            rounds.append(
                RetrievalRound(
                    number=number, queries=queries, results=round_results, pooled=pooled.paper_ids, verdict=verdict
                )
            )
            if self.client is None:
                stop = "no_llm"
                break
            if verdict is not None and verdict.sufficient:
                stop = "sufficient"
                break
            if verdict is None and not last_round:
                stop = "verifier_failed"
                break
        ranking = pool([result.ranking for result in results], question, self.settings.pool_k, self.rrf_k)
        return RetrievalRun(question=question, constraints=constraints, rounds=rounds, stop_reason=stop, ranking=ranking)

    def _next_queries(
        self,
        question: str,
        number: int,
        asked: Sequence[str],
        verdict: Verdict | None,
        constraints: Constraints,
        trace: Trace | None,
    ) -> tuple[list[str], Constraints]:
        """This round's new subqueries, and the constraints with the decomposer's venue/year merged in round 1."""
        if self.client is None:
            return [question], constraints
        answer = self._ask_for_subqueries(question, number, asked, verdict, constraints, trace)
        if number == 1:
            constraints = merge_llm_constraints(constraints, question, answer)
        limit = self.settings.first_subqueries if number == 1 else self.settings.later_subqueries
        extra = [question] if number == 1 and self.settings.include_question else []
        fresh = new_subqueries([*extra, *answer.subqueries], asked, limit + len(extra))
        # Round 1 searches something: with no usable subquery (and the question not among them), the question itself.
        return fresh or ([question] if number == 1 else []), constraints

    def _ask_for_subqueries(
        self,
        question: str,
        number: int,
        asked: Sequence[str],
        verdict: Verdict | None,
        constraints: Constraints,
        trace: Trace | None,
    ) -> Subqueries:
        assert self.client is not None
        registry = retrieve_prompts()
        restriction = restriction_line(constraints)
        if number == 1:
            prompt = registry.render(
                "retrieve_decompose",
                question=question,
                restriction=restriction,
                count=str(self.settings.first_subqueries),
            )
        else:
            missing = verdict.missing if verdict is not None else []
            prompt = registry.render(
                "retrieve_followup",
                question=question,
                prior_queries="\n".join(f"- {query}" for query in asked),
                missing="\n".join(f"- {item}" for item in missing) or "- (not stated)",
                restriction=restriction,
                count=str(self.settings.later_subqueries),
            )
        try:
            return self.client.complete(prompt, Subqueries, trace=trace)
        except LLMOutputError:
            return Subqueries()  # no usable subqueries: round 1 keeps the question, a later round ends the loop

    def _search(self, query: str, constraints: Constraints) -> SubqueryResult:
        ranking = self.searcher.search(
            query, k=self.settings.per_query_k, method=self.settings.method, prf=self.settings.prf
        )
        ranking, dropped = self._apply_constraints(ranking, constraints)
        return SubqueryResult(query=query, ranking=self._rerank(query, ranking), filtered_out=dropped)

    def _apply_constraints(self, ranking: Ranking, constraints: Constraints) -> tuple[Ranking, int]:
        if constraints.empty or not self.settings.filter_constraints or not ranking.candidates:
            return ranking, 0
        summaries = self.store.paper_summaries(ranking.paper_ids)
        kept = [c for c in ranking.candidates if c.paper_id not in summaries or satisfies(summaries[c.paper_id], constraints)]
        return renumbered(ranking, kept), len(ranking.candidates) - len(kept)

    def _rerank(self, query: str, ranking: Ranking) -> Ranking:
        """The reranker reorders the head of the list; the tail keeps its first-stage order below it."""
        depth = self.settings.rerank_depth
        if depth == 0 or not ranking.candidates:
            return ranking
        head = self.reranker.rank(query, ranking.top(depth))
        tail = ranking.candidates[depth:]
        return renumbered(head, [*head.candidates, *tail])

    def _verify(self, question: str, pooled: Ranking, trace: Trace | None) -> Verdict | None:
        """The verdict, or None when the model's answer could not be parsed (the failed call is in the trace)."""
        assert self.client is not None
        prompt = retrieve_prompts().render(
            "retrieve_verify", question=question, evidence=evidence_block(pooled, self.settings)
        )
        try:
            return self.client.complete(prompt, Verdict, trace=trace)
        except LLMOutputError:
            return None


def new_subqueries(proposed: Sequence[str], asked: Sequence[str], limit: int) -> list[str]:
    """The proposals not already asked (compared case- and space-insensitively), in order, at most `limit`."""
    seen = {_normal(query) for query in asked}
    fresh: list[str] = []
    for query in proposed:
        cleaned = " ".join(query.split()[:MAX_SUBQUERY_WORDS])
        key = _normal(cleaned)
        if key and key not in seen:
            seen.add(key)
            fresh.append(cleaned)
    return fresh[:limit]


def _normal(query: str) -> str:
    return " ".join(re.findall(r"\w+", query.lower()))


def restriction_line(constraints: Constraints) -> str:
    if constraints.empty:
        return "Restriction: none."
    return f"Restriction: {constraints.describe()}. Keep the venue and year out of the queries."


def evidence_block(ranking: Ranking, settings: RetrieveSettings) -> str:
    """The best chunk of each top paper, numbered and cut to `verify_words` words, for the verifier."""
    lines = []
    for number, candidate in enumerate(ranking.candidates[: settings.verify_papers], start=1):
        text = candidate.chunks[0].text if candidate.chunks else ""
        words = text.split()
        snippet = " ".join(words[: settings.verify_words]) + (" ..." if len(words) > settings.verify_words else "")
        lines.append(f"[{number}] {candidate.title or candidate.paper_id}: {snippet}")
    return "\n".join(lines) or "(no passages found)"


def pool(rankings: Sequence[Ranking], query: str, k: int, rrf_k: int = 60) -> Ranking:
    """Rankings fused by reciprocal rank fusion into one, each paper keeping its chunks from every ranking
    (best-ranked ranking first, duplicates dropped) up to the most any one ranking kept."""
    fused = reciprocal_rank_fusion([ranking.paper_ids for ranking in rankings], k=rrf_k)[:k]
    return Ranking(query=query, method=POOLED_METHOD, candidates=merge_candidates(fused, rankings))


def merge_candidates(fused: Sequence[tuple[str, float]], rankings: Sequence[Ranking]) -> list[Candidate]:
    """Candidates for fused (paper id, score) pairs, with titles and chunks gathered from `rankings`."""
    appearances: dict[str, list[tuple[int, Candidate]]] = {}
    for ranking in rankings:
        for candidate in ranking.candidates:
            appearances.setdefault(candidate.paper_id, []).append((candidate.rank, candidate))
    per_paper = max((len(c.chunks) for r in rankings for c in r.candidates), default=0)
    merged = []
    for rank, (paper_id, score) in enumerate(fused, start=1):
        found = sorted(appearances.get(paper_id, []), key=lambda item: item[0])
        title = next((candidate.title for _, candidate in found if candidate.title), "")
        chunks: list[ChunkHit] = []
        seen: set[int] = set()
        for _, candidate in found:
            for chunk in candidate.chunks:
                if chunk.rowid not in seen:
                    seen.add(chunk.rowid)
                    chunks.append(chunk)
        merged.append(Candidate(paper_id=paper_id, title=title, score=score, rank=rank, chunks=chunks[:per_paper]))
    return merged


def renumbered(ranking: Ranking, candidates: Sequence[Candidate]) -> Ranking:
    """`ranking` holding `candidates` in the given order, ranks renumbered from 1."""
    return ranking.model_copy(
        update={
            "candidates": [
                candidate.model_copy(update={"rank": rank}) for rank, candidate in enumerate(candidates, start=1)
            ]
        }
    )
