"""BM25 over store chunks on tantivy: one document per chunk, keyed by the chunk's store row id.

Two text fields, the chunk text and its paper's title, are scored like BEIR's multi-field BM25 baseline. Queries are
built from analysed terms (never parsed), so no user text can raise a syntax error, and term weights can be boosted
for pseudo-relevance feedback.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import numpy as np
import tantivy
from tantivy import DocAddress, Filter, Occur, Query, Searcher, TextAnalyzerBuilder, Tokenizer

from strata.index.state import ChunkScore, Hits, IndexSyncStats, SyncProgress, SyncState, read_state
from strata.index.state import ranked_chunk_scores, ranked_rowids
from strata.index.state import adopt_reference_choice, write_state
from strata.store.base import StoredChunk
from strata.store.protocol import PaperStore

ANALYZER = "strata_en"
# Bump when the schema or the analyser changes: an index built differently is rebuilt on the next sync.
FORMAT = "bm25-v1"
FIELDS = ("text", "title")
TITLE_TIE_BREAKER = 0.5
WRITER_HEAP_BYTES = 128_000_000
READ_BATCH = 1000

def english_analyzer() -> tantivy.TextAnalyzer:
    """tantivy's 'en_stem' chain (simple tokens, long-token removal, lower case, Snowball English) plus English stop
    words, as in the English analyzer behind BEIR's BM25 numbers."""
    return (
        TextAnalyzerBuilder(Tokenizer.simple())
        .filter(Filter.remove_long(40))
        .filter(Filter.lowercase())
        .filter(Filter.stopword("english"))
        .filter(Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("rowid", stored=True, indexed=True, fast=True)
    builder.add_text_field("paper_id", tokenizer_name="raw")
    for field in FIELDS:
        builder.add_text_field(field, tokenizer_name=ANALYZER, index_option="freq")
    return builder.build()


class TermSearch:
    """Search by text or weighted terms, the part both BM25 backends share so they analyse, filter and order alike.
    Subclasses set `analyzer` and implement `_scored`."""

    analyzer: tantivy.TextAnalyzer

    def terms(self, text: str) -> list[str]:
        """Analysed terms of `text`, in order, with repeats."""
        return self.analyzer.analyze(text)

    def search(
        self,
        text: str,
        depth: int,
        paper_ids: Collection[str] | None = None,
        title_tie_breaker: float = TITLE_TIE_BREAKER,
    ) -> list[ChunkScore]:
        return self.search_terms(Counter(self.terms(text)), depth, paper_ids, title_tie_breaker)

    def search_rowids(
        self,
        text: str,
        depth: int,
        paper_ids: Collection[str] | None = None,
        title_tie_breaker: float = TITLE_TIE_BREAKER,
    ) -> np.ndarray:
        """The row ids `search` returns, in its order, without its ChunkScores (what fusion needs)."""
        return ranked_rowids(*self._hits(Counter(self.terms(text)), depth, paper_ids, title_tie_breaker))

    def search_terms(
        self,
        weights: Mapping[str, float],
        depth: int,
        paper_ids: Collection[str] | None = None,
        title_tie_breaker: float = TITLE_TIE_BREAKER,
    ) -> list[ChunkScore]:
        """Best `depth` chunks for weighted terms, best first, ties by row id; optionally only these papers'."""
        return ranked_chunk_scores(*self._hits(weights, depth, paper_ids, title_tie_breaker))

    def _hits(
        self, weights: Mapping[str, float], depth: int, paper_ids: Collection[str] | None, title_tie_breaker: float
    ) -> Hits:
        if not weights or (paper_ids is not None and not paper_ids):
            return (), ()
        return self._scored(weights, depth, paper_ids, title_tie_breaker)

    def _scored(
        self, weights: Mapping[str, float], depth: int, paper_ids: Collection[str] | None, title_tie_breaker: float
    ) -> Hits:
        """At most `depth` scored chunks, in any order (the backend's own scoring)."""
        raise NotImplementedError


class BM25Index(TermSearch):
    def __init__(self, folder: Path, references: bool = False) -> None:
        self.folder = folder
        self.references = references
        self.state_path = folder.with_suffix(".json")
        self.analyzer = english_analyzer()
        self.schema = _schema()
        self._index: tantivy.Index | None = None

    # reading

    @property
    def exists(self) -> bool:
        return self.state_path.is_file() and tantivy.Index.exists(str(self.folder))

    def _open(self) -> tantivy.Index | None:
        if self._index is None and self.exists:
            self._index = self._load()
        return self._index

    def _load(self) -> tantivy.Index:
        index = tantivy.Index(self.schema, path=str(self.folder), reuse=True)
        index.register_tokenizer(ANALYZER, self.analyzer)
        return index

    def __len__(self) -> int:
        index = self._open()
        return index.searcher().num_docs if index else 0

    def _scored(
        self, weights: Mapping[str, float], depth: int, paper_ids: Collection[str] | None, title_tie_breaker: float
    ) -> Hits:
        index = self._open()
        if index is None:
            return (), ()
        query = self._weighted_query(weights, title_tie_breaker)
        if paper_ids is not None:
            only = Query.const_score_query(Query.term_set_query(self.schema, "paper_id", sorted(paper_ids)), 0.0)
            query = Query.boolean_query([(Occur.Must, query), (Occur.Must, only)])
        searcher = index.searcher()
        hits = searcher.search(query, depth, count=False).hits
        scores, addresses = zip(*hits) if hits else ((), ())
        return _rowids(searcher, list(addresses)), scores

    def _weighted_query(self, weights: Mapping[str, float], title_tie_breaker: float) -> Query:
        # Per field, the weighted sum of its terms' BM25; across fields, the best field plus half the other
        # (Elasticsearch's multi_match best_fields with tie_breaker 0.5, as in BEIR's baseline).
        per_field = [
            Query.boolean_query(
                [
                    (Occur.Should, Query.boost_query(Query.term_query(self.schema, field, term), float(weight)))
                    for term, weight in sorted(weights.items())
                ]
            )
            for field in FIELDS
        ]
        return Query.disjunction_max_query(per_field, tie_breaker=title_tie_breaker)

    def rowids_of_papers(self, paper_ids: Collection[str]) -> list[int]:
        """Row ids of every indexed chunk of these papers."""
        index = self._open()
        if index is None or not paper_ids:
            return []
        searcher = index.searcher()
        query = Query.term_set_query(self.schema, "paper_id", sorted(paper_ids))
        hits = searcher.search(query, max(searcher.num_docs, 1), count=False).hits
        return np.sort(_rowids(searcher, [address for _, address in hits])).tolist()

    # writing

    def sync(self, store: PaperStore, progress: SyncProgress | None = None) -> IndexSyncStats:
        """Add chunks stored since the last sync and drop removed ones, in one tantivy commit."""
        started = time.perf_counter()
        state = self._state_for_writing(store)
        expected = store.max_chunk_rowid() - state.chunk_rowid
        index = self._open() or self._create()
        stats = IndexSyncStats()
        writer = index.writer(heap_size=WRITER_HEAP_BYTES, num_threads=1)
        try:
            deletions = store.deletions_after(state.deletion_seq)
            while batch := store.chunks_after(state.chunk_rowid, limit=READ_BATCH, references=self.references):
                for stored in batch:
                    # Deleting first makes a replay idempotent after a crash between commit and state write.
                    writer.delete_documents_by_term("rowid", stored.rowid)
                    writer.add_document(self._document(stored))
                state.chunk_rowid = batch[-1].rowid
                stats.added += len(batch)
                if progress:
                    progress(stats.added, expected)
            for seq, rowid in deletions:
                writer.delete_documents_by_term("rowid", rowid)
                state.deletion_seq = seq
            stats.deleted = len(deletions)
            writer.commit()
            writer.wait_merging_threads()
        except BaseException:
            writer.rollback()
            raise
        write_state(self.state_path, state)
        index.reload()
        stats.size = index.searcher().num_docs
        stats.seconds = time.perf_counter() - started
        return stats

    def _state_for_writing(self, store: PaperStore) -> SyncState:
        state = read_state(self.state_path, SyncState)
        adopt_reference_choice(state, self.references, store)
        current = state is not None and (state.format, state.references) == (FORMAT, self.references)
        if state is not None and current and tantivy.Index.exists(str(self.folder)):
            return state
        # No index yet, or one built by another format: start over.
        self._index = None
        self.state_path.unlink(missing_ok=True)
        shutil.rmtree(self.folder, ignore_errors=True)
        return SyncState(format=FORMAT, references=self.references)

    def _create(self) -> tantivy.Index:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index = self._load()
        return self._index

    @staticmethod
    def _document(stored: StoredChunk) -> tantivy.Document:
        return tantivy.Document(
            rowid=stored.rowid, paper_id=stored.chunk.paper_id, text=stored.chunk.text, title=stored.paper_title
        )


def rm3_weights(
    query_terms: Sequence[str],
    feedback: Sequence[tuple[Sequence[str], float]],
    expansion_terms: int,
    original_weight: float,
) -> dict[str, float]:
    """RM3 (Abdul-Jaleel et al., 2004; Anserini's defaults): the query's term distribution interpolated with a
    relevance model estimated from feedback documents, given as (analysed terms, retrieval score).

    P(w|R) ∝ Σ_d P(w|d)·score(d), with P(w|d) = tf(w, d)/|d|; keep the best `expansion_terms` terms, normalise both
    distributions to sum 1 and mix them `original_weight` : 1 - `original_weight`.
    """
    original = _normalised(Counter(query_terms))
    relevance: defaultdict[str, float] = defaultdict(float)
    for terms, score in feedback:
        if not terms or score <= 0:
            continue
        for term, count in Counter(terms).items():
            relevance[term] += score * count / len(terms)
    best = sorted(relevance.items(), key=lambda item: (-item[1], item[0]))[:expansion_terms]
    expansion = _normalised(dict(best))
    mixed: dict[str, float] = {}
    for term in original.keys() | expansion.keys():
        weight = original_weight * original.get(term, 0.0) + (1 - original_weight) * expansion.get(term, 0.0)
        if weight > 0:
            mixed[term] = weight
    return mixed


def _rowids(searcher: Searcher, addresses: list[DocAddress]) -> np.ndarray:
    """The store row ids of these documents (an integer fast field every indexed chunk has)."""
    values = searcher.fast_field_values("rowid", addresses)
    return np.array(values, dtype=np.int64)  # a TypeError if one lacked it (None)


def _normalised(weights: Mapping[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    return {term: value / total for term, value in weights.items()} if total > 0 else {}
