"""A corpus of any size made from real sentences, for measuring index build and search at scale.

Every synthetic chunk is 4-8 real sentences drawn from the chunks of an existing corpus (SciFact abstracts by
default), under the title of a real paper; papers have `chunks_per_paper` chunks (93 is Lit3R's ratio, 2,564,545
chunks over 27,487 papers). Embedding millions of chunks is out of reach on a laptop CPU, so a chunk's vector is
derived instead: the normalised sum of the real embeddings of the source chunks its sentences came from (taken from
the source corpus's dense index). Text statistics (vocabulary, lengths, term frequencies) and vector statistics are
thus those of real scientific text; the index build and the searches measured on it are the real ones.

Everything is a pure function of (seed, paper number): papers stream out in bounded memory, and the vector of any
stored chunk is recomputed from its paper id and ordinal when the dense index asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from strata.documents.builder import SENTENCE_END
from strata.documents.model import Chunk, Paper
from strata.store.sqlite import StoredChunk

MIN_SENTENCE_CHARS = 20
SENTENCES_PER_CHUNK = (4, 8)
PAPER_PREFIX = "scale-"


@dataclass(frozen=True)
class SourceText:
    """The real material: sentences, the source chunk each came from, source chunk vectors and paper titles."""

    sentences: list[str]
    sentence_source: np.ndarray  # int32, one source chunk index per sentence
    vectors: np.ndarray  # float32 (source chunks, dimension), L2-normalised
    titles: list[str]

    @classmethod
    def from_chunks(cls, texts: Sequence[str], vectors: np.ndarray, titles: Sequence[str]) -> SourceText:
        sentences: list[str] = []
        sources: list[int] = []
        for index, text in enumerate(texts):
            for sentence in SENTENCE_END.split(text.strip()):
                if len(sentence) >= MIN_SENTENCE_CHARS:
                    sentences.append(sentence)
                    sources.append(index)
        if not sentences:
            raise ValueError("the source chunks hold no sentence to build a scale corpus from")
        unique_titles = sorted({title for title in titles if title})
        return cls(sentences, np.array(sources, dtype=np.int32), np.ascontiguousarray(vectors, np.float32),
                   unique_titles or ["Untitled"])


class ScaleCorpus:
    def __init__(self, source: SourceText, papers: int, chunks_per_paper: int = 93, seed: int = 0) -> None:
        self.source = source
        self.papers = papers
        self.chunks_per_paper = chunks_per_paper
        self.seed = seed

    @property
    def chunks(self) -> int:
        return self.papers * self.chunks_per_paper

    def paper_id(self, number: int) -> str:
        return f"{PAPER_PREFIX}{number:07d}"

    def _plan(self, number: int) -> tuple[str, list[np.ndarray]]:
        """(title, sentence indices of each chunk) of paper `number`, the same on every call."""
        rng = np.random.default_rng([self.seed, number])
        title = self.source.titles[int(rng.integers(len(self.source.titles)))]
        low, high = SENTENCES_PER_CHUNK
        sizes = rng.integers(low, high + 1, size=self.chunks_per_paper)
        picks = rng.integers(len(self.source.sentences), size=int(sizes.sum()))
        return title, np.split(picks, np.cumsum(sizes)[:-1])

    def paper(self, number: int) -> Paper:
        title, plan = self._plan(number)
        paper_id = self.paper_id(number)
        texts = [" ".join(self.source.sentences[i] for i in picks) for picks in plan]
        chunks, start = [], 0
        for ordinal, text in enumerate(texts):
            chunks.append(Chunk(paper_id=paper_id, ordinal=ordinal, text=text, char_start=start,
                                char_end=start + len(text)))
            start += len(text) + 2
        return Paper(id=paper_id, title=title, source_format="synthetic", text="\n\n".join(texts), chunks=chunks)

    def iter_papers(self) -> Iterator[Paper]:
        for number in range(self.papers):
            yield self.paper(number)

    def vectors(self, number: int) -> np.ndarray:
        """Derived vectors of paper `number`'s chunks: normalised sums of their sentences' source vectors."""
        _, plan = self._plan(number)
        rows = np.stack([self.source.vectors[self.source.sentence_source[picks]].sum(axis=0) for picks in plan])
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def vectors_of(self, batch: Sequence[StoredChunk]) -> np.ndarray:
        """`strata.index.state.ChunkVectors` for chunks of this corpus, recomputed from their paper and ordinal."""
        cache: dict[str, np.ndarray] = {}
        rows = []
        for stored in batch:
            paper_id = stored.chunk.paper_id
            if paper_id not in cache:
                cache[paper_id] = self.vectors(int(paper_id.removeprefix(PAPER_PREFIX)))
            rows.append(cache[paper_id][stored.chunk.ordinal])
        return np.ascontiguousarray(np.stack(rows), dtype=np.float32)
