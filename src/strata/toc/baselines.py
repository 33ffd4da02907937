"""Baselines over leaf text, one document per leaf (the leaf's number is the document id).

BM25 uses the corpus index's analyser and field combination (Strata's English chain; leaf text and leaf path
scored like BEIR's multi-field baseline) on an in-memory tantivy index. Dense scores a leaf by its best chunk
(MaxP), each chunk embedded after its leaf's path, as the corpus index prefixes chunks with their paper's title.
Hybrid fuses the two as the corpus search does (`search.fusion`). Dense leaf vectors can be kept in a folder
(`strata toc` keeps them under the store home): a whole book takes minutes to embed on a CPU, and a document's
second question should not wait for that again.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from pathlib import Path
from typing import cast

import numpy as np
import tantivy
from tantivy import Occur, Query

from strata.config import EmbeddingSettings, SearchSettings
from strata.documents.sentences import chunk_sentences
from strata.index.bm25 import ANALYZER, FIELDS, TITLE_TIE_BREAKER, english_analyzer
from strata.encoders.embedder import Embedder
from strata.retrieve.fusion import fuse_score_arrays, reciprocal_rank_fusion
from strata.toc.model import DocumentToc, LeafRanking, TocEntry

PATH_SEPARATOR = " > "
KEPT_VERSIONS = 2  # cached leaf-vector files per document id


def _ranking(query: str, method: str, scored: list[tuple[TocEntry, float]], started: float) -> LeafRanking:
    return LeafRanking(
        query=query,
        method=method,
        leaves=[entry.scored(score) for entry, score in scored],
        seconds=time.perf_counter() - started,
    )


class LeafBM25:
    def __init__(self, toc: DocumentToc) -> None:
        self.leaves = toc.leaves()
        self.analyzer = english_analyzer()
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("position", stored=True, indexed=True, fast=True)
        for field in FIELDS:
            builder.add_text_field(field, tokenizer_name=ANALYZER, index_option="freq")
        self.schema = builder.build()
        self.index = tantivy.Index(self.schema)  # in memory: a few hundred leaves index in well under a second
        self.index.register_tokenizer(ANALYZER, self.analyzer)
        writer = self.index.writer(heap_size=50_000_000, num_threads=1)
        for position, leaf in enumerate(self.leaves):
            text, title = toc.leaf_text(leaf.number), PATH_SEPARATOR.join(leaf.path)
            writer.add_document(tantivy.Document(position=position, text=text, title=title))
        writer.commit()
        self.index.reload()

    def rank(self, query: str, k: int) -> LeafRanking:
        started = time.perf_counter()
        weights = Counter(self.analyzer.analyze(query))
        if not weights:
            return _ranking(query, "bm25", [], started)
        per_field = [
            Query.boolean_query(
                [
                    (Occur.Should, Query.boost_query(Query.term_query(self.schema, field, term), float(weight)))
                    for term, weight in sorted(weights.items())
                ]
            )
            for field in FIELDS
        ]
        searcher = self.index.searcher()
        hits = searcher.search(Query.disjunction_max_query(per_field, tie_breaker=TITLE_TIE_BREAKER), k).hits
        # An integer field that every leaf's document has (the stub types any field's values).
        positions = cast(list[int], searcher.fast_field_values("position", [address for _, address in hits]))
        scored = sorted(
            ((self.leaves[position], float(score)) for (score, _), position in zip(hits, positions)),
            key=lambda item: (-item[1], item[0].number),
        )
        return _ranking(query, "bm25", scored, started)


class LeafDense:
    def __init__(
        self,
        toc: DocumentToc,
        settings: EmbeddingSettings,
        embedder: Embedder | None = None,
        cache: Path | None = None,
    ) -> None:
        self.leaves = toc.leaves()
        self.embedder = embedder or Embedder(settings)
        texts: list[str] = []
        owners: list[int] = []
        for position, leaf in enumerate(self.leaves):
            chunks = toc.leaf_chunks.get(leaf.number, [])
            # With `sentences`, a prose chunk's sentences count too, as in the corpus's dense index.
            sentences = [text for chunk in chunks for text in chunk_sentences(chunk)] if settings.sentences else []
            for text in [*([chunk.text for chunk in chunks] or [""]), *sentences]:
                texts.append(f"{PATH_SEPARATOR.join(leaf.path)}\n{text}")
                owners.append(position)
        self.vectors = self._vectors(texts, cache, toc.paper_id)
        self.owners = np.array(owners)

    def _vectors(self, texts: list[str], cache: Path | None, paper_id: str) -> np.ndarray:
        """The texts' vectors: from `cache` when the same encoder embedded the same texts, else embedded and saved
        there whole by an atomic rename (an interrupted save leaves no file that loads). A document keeps its
        KEPT_VERSIONS latest files (a book and a chapter subset of it share the id); a cache that cannot be
        read or written is passed by, never an error."""
        if cache is None:
            return self.embedder.embed(texts)
        digest = hashlib.sha256("\x00".join([self.embedder.identity, *texts]).encode()).hexdigest()[:16]
        document = hashlib.sha256(paper_id.encode()).hexdigest()[:12]  # any id is a safe file name
        path = cache / f"{document}-{digest}.npy"
        try:
            vectors = np.load(path, allow_pickle=False)
            if vectors.shape[0] == len(texts):
                return vectors
        except (OSError, ValueError, EOFError):  # absent or damaged: embedded again and replaced
            pass
        vectors = self.embedder.embed(texts)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            cache.mkdir(parents=True, exist_ok=True)
            with partial.open("wb") as handle:
                np.save(handle, vectors, allow_pickle=False)
            os.replace(partial, path)
            versions = sorted(cache.glob(f"{document}-*.npy"), key=lambda file: file.stat().st_mtime, reverse=True)
            for stale in versions[KEPT_VERSIONS:]:
                stale.unlink(missing_ok=True)
        except OSError:
            partial.unlink(missing_ok=True)
        return vectors

    def rank(self, query: str, k: int) -> LeafRanking:
        started = time.perf_counter()
        # The query side (a model's query prompt, an adapted query encoder), with the leaves' thread count: another
        # count moves a vector by ~1e-7, enough to reorder near-tied leaves in the committed ToC numbers.
        similarity = self.vectors @ self.embedder.embed_queries([query], self.embedder.settings.threads)[0]
        best = np.full(len(self.leaves), -np.inf)
        np.maximum.at(best, self.owners, similarity)
        order = sorted(range(len(self.leaves)), key=lambda i: (-best[i], i))[:k]
        return _ranking(query, "dense", [(self.leaves[i], float(best[i])) for i in order], started)


class LeafHybrid:
    """BM25 and dense over every leaf, fused as the corpus search fuses them (`search.fusion`: reciprocal rank fusion
    with its rrf_k, or their scaled scores at its dense_weight)."""

    def __init__(self, bm25: LeafBM25, dense: LeafDense, search: SearchSettings | None = None) -> None:
        self.bm25, self.dense, self.search = bm25, dense, search or SearchSettings()
        self.by_number = {leaf.number: leaf for leaf in bm25.leaves}

    @classmethod
    def over(
        cls,
        toc: DocumentToc,
        settings: EmbeddingSettings,
        embedder: Embedder | None = None,
        search: SearchSettings | None = None,
        cache: Path | None = None,
    ) -> LeafHybrid:
        return cls(LeafBM25(toc), LeafDense(toc, settings, embedder, cache), search)

    def rank(self, query: str, k: int) -> LeafRanking:
        started = time.perf_counter()
        every = len(self.by_number)
        sides = [side.rank(query, every).leaves for side in (self.bm25, self.dense)]
        if self.search.fusion == "scores":
            position = {number: index for index, number in enumerate(self.by_number)}  # integer ids to fuse
            scored = [([position[leaf.number] for leaf in side], [leaf.score for leaf in side]) for side in sides]
            weight = self.search.dense_weight
            ids, scores = fuse_score_arrays(scored, [1 - weight, weight])
            numbers = list(self.by_number)
            fused = [(numbers[index], float(score)) for index, score in zip(ids.tolist(), scores.tolist())][:k]
        else:
            fused = reciprocal_rank_fusion([[leaf.number for leaf in side] for side in sides], self.search.rrf_k)[:k]
        return _ranking(query, "hybrid", [(self.by_number[number], score) for number, score in fused], started)
