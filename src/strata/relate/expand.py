"""Lit3R Relate: paper-to-paper expansion from the seed papers of Ranking A into Ranking B.

For each enabled signal, every seed's neighbour list is gathered; the lists are interleaved round-robin across
seeds (the best neighbour of each seed, in seed order, then the second of each, ...), so one seed with many strong
neighbours cannot crowd the others out. The signals' interleaved lists are then fused with equal weight (RRF).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from strata.config import RelateSettings
from strata.corpus import CorpusView
from strata.documents.model import Ranking
from strata.relate.signals import PaperVectors, ReferenceGraph, bm25_neighbours
from strata.retrieve.fusion import reciprocal_rank_fusion
from strata.retrieve.iterative import merge_candidates

SignalName = Literal["embedding", "references", "bm25"]
SIGNALS: tuple[SignalName, ...] = ("embedding", "references", "bm25")
RANKING_B = "lit3r-relate"

Neighbours = Callable[[str, int], list[str]]


class SignalList(BaseModel):
    """One signal's neighbours of every seed, and their round-robin interleaving."""

    model_config = ConfigDict(extra="forbid")

    signal: SignalName
    per_seed: list[list[str]] = Field(
        description="Each seed's neighbours' paper ids (the seed itself left out), best first; seeds in Ranking A's "
        "order"
    )
    interleaved: list[str] = Field(description="The per-seed lists interleaved round-robin, duplicates dropped")


class Expansion(BaseModel):
    """Ranking B and the signal lists it was fused from."""

    model_config = ConfigDict(extra="forbid")

    seeds: list[str]
    signals: list[SignalList]
    ranking: Ranking


def round_robin(lists: Sequence[Sequence[str]]) -> list[str]:
    """Position 1 of every list in order, then position 2 of every list, ...; each id kept at its first place."""
    merged: list[str] = []
    seen: set[str] = set()
    for position in range(max((len(items) for items in lists), default=0)):
        for items in lists:
            if position < len(items) and items[position] not in seen:
                seen.add(items[position])
                merged.append(items[position])
    return merged


def paper_vectors(
    corpus: CorpusView, settings: RelateSettings, store_home: Path, source: str | None = None
) -> PaperVectors:
    """Relate's paper vectors (`source`, by default `relate.paper_vectors`), one object per cache folder and source in
    the corpus's cache, so that training, which reads them too, shares both the object and the files on disk."""
    folder = settings.paper_vector_cache or Path(store_home) / "relate"
    source = source or settings.paper_vectors
    dense = corpus.vectors
    return corpus.cached(
        ("relate.paper-vectors", folder, source), lambda: PaperVectors(dense.embedder, folder, source, dense)
    )


class Relater:
    """Finds Ranking B for a Ranking A. Paper vectors and the reference graph outlive one question: they are kept in
    the corpus's cache (per cache folder and vector source), dropped when the corpus closes."""

    def __init__(self, corpus: CorpusView, settings: RelateSettings, store_home: Path) -> None:
        self.corpus = corpus
        self.settings = settings
        self.vectors = paper_vectors(corpus, settings, store_home)
        self.graph = corpus.cached("relate.reference-graph", ReferenceGraph)

    def enabled_signals(self) -> list[SignalName]:
        return [name for name in SIGNALS if getattr(self.settings, name)]

    def expand(self, ranking_a: Ranking, rrf_k: int = 60) -> Expansion:
        seeds = ranking_a.paper_ids[: self.settings.seeds]
        signals = []
        for name in self.enabled_signals():
            # Neighbours only: a seed heading its own list made Ranking B start as a copy of A's head, so the fusion
            # counted A's order twice. A's own weight in the final fusion keeps its best papers up.
            per_seed = [
                [paper for paper in self._neighbours(name)(seed, self.settings.neighbours) if paper != seed]
                for seed in seeds
            ]
            signals.append(SignalList(signal=name, per_seed=per_seed, interleaved=round_robin(per_seed)))
        fused = reciprocal_rank_fusion([signal.interleaved for signal in signals], k=rrf_k)
        ranking = Ranking(query=ranking_a.query, method=RANKING_B, candidates=merge_candidates(fused, [ranking_a]))
        return Expansion(seeds=seeds, signals=signals, ranking=self._titled(ranking))

    def _neighbours(self, name: SignalName) -> Neighbours:
        store = self.corpus.store
        if name == "embedding":
            return lambda seed, n: self.vectors.neighbours(store, seed, n)
        if name == "references":
            return lambda seed, n: self.graph.neighbours(store, seed, n)
        return lambda seed, n: bm25_neighbours(self.corpus.searcher, store, seed, n, self.settings.seed_text_words)

    def _titled(self, ranking: Ranking) -> Ranking:
        """Titles for the neighbours Ranking A did not hold."""
        untitled = [candidate.paper_id for candidate in ranking.candidates if not candidate.title]
        if not untitled:
            return ranking
        summaries = self.corpus.store.paper_summaries(untitled)
        return ranking.model_copy(
            update={
                "candidates": [
                    candidate
                    if candidate.title or candidate.paper_id not in summaries
                    else candidate.model_copy(update={"title": summaries[candidate.paper_id].title})
                    for candidate in ranking.candidates
                ]
            }
        )
