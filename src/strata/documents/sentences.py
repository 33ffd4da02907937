"""Sentence boundaries in English prose (pysbd: abbreviations, decimals and citations do not end a sentence)."""

from __future__ import annotations

import functools

import pysbd

from strata.documents.model import Chunk, ContentType


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text`, whitespace trimmed; found in order so repeats map correctly."""
    spans, cursor = [], 0
    for sentence in _segmenter().segment(text):
        stripped = sentence.strip()
        start = text.find(stripped, cursor) if stripped else -1
        if start < 0:
            continue
        spans.append((start, start + len(stripped)))
        cursor = start + len(stripped)
    return spans


@functools.cache
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False)


def chunk_sentences(chunk: Chunk) -> list[str]:
    """The sentences of a prose chunk of several, for vectors of their own; none for one sentence (the chunk's own
    vector is that sentence's) or for tables, captions, equations and reference entries."""
    if chunk.content_type != ContentType.TEXT:
        return []
    spans = sentence_spans(chunk.text)
    return [chunk.text[start:end] for start, end in spans] if len(spans) > 1 else []
