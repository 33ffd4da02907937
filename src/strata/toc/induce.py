"""ToC induction for documents without an outline, so ToC retrieval works on any document.

First choice: headings written in the text itself (Markdown '#' lines or numbered headings such as '2.1 Methods'),
nested by their level. Otherwise the chunks are cut into contiguous segments where the similarity of neighbouring
chunks' embeddings is lowest (a TextTiling-style segmentation: a ToC keeps reading order, so the clusters must be
contiguous), and the LLM titles each segment.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

import numpy as np

from strata.config import Settings
from strata.documents.model import Chunk, Paper
from strata.encoders.embedder import Embedder
from strata.llm import LLMClient, LLMError
from strata.toc.model import DocumentToc, SectionTitle, TocEntry, toc_prompts
from strata.toc.tree import first_leaf, owning_leaf

TITLE_PROMPT = "toc_title"
TITLE_PASSAGE_WORDS = 150
FALLBACK_TITLE_WORDS = 8
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_MARKDOWN_HEADING = re.compile(r"^(#{1,6})\s+(\S.{0,100}?)\s*#*$", re.MULTILINE)
_NUMBERED_HEADING = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+([A-Z][^\n.!?]{1,80})$", re.MULTILINE)
MIN_HEADINGS = 2


def needs_induction(paper: Paper) -> bool:
    return not paper.sections


def induce_toc(paper: Paper, settings: Settings, client: LLMClient | None) -> DocumentToc:
    headings = find_headings(paper.text)
    if len(headings) >= MIN_HEADINGS:
        return toc_from_headings(paper, headings)
    return toc_from_segments(paper, settings, client)


def find_headings(text: str) -> list[tuple[int, int, str]]:
    """(offset, level, title) of heading lines; Markdown headings win when a text has both kinds."""
    markdown = [(m.start(), len(m.group(1)), m.group(2).strip()) for m in _MARKDOWN_HEADING.finditer(text)]
    if len(markdown) >= MIN_HEADINGS:
        return markdown
    return [(m.start(), m.group(1).count(".") + 1, m.group(2).strip()) for m in _NUMBERED_HEADING.finditer(text)]


def toc_from_headings(paper: Paper, headings: Sequence[tuple[int, int, str]]) -> DocumentToc:
    """Entries nested by heading level. Chunks are cut at the headings inside them (their spans still index the
    paper's text); each piece belongs to the last heading before it, text before a first child to that child."""
    entries: list[TocEntry] = []
    open_numbers: list[tuple[int, str, tuple[str, ...]]] = []  # (level, number, path) of the open ancestors
    counters: dict[str, int] = {}
    for _, level, title in headings:
        while open_numbers and open_numbers[-1][0] >= level:
            open_numbers.pop()
        parent_number, parent_path = (open_numbers[-1][1], open_numbers[-1][2]) if open_numbers else ("", ())
        counters[parent_number] = counters.get(parent_number, 0) + 1
        number = f"{parent_number}.{counters[parent_number]}" if parent_number else str(counters[parent_number])
        path = (*parent_path, title)
        entries.append(TocEntry(number=number, title=title, path=path, is_leaf=True))
        open_numbers.append((level, number, path))
    entries = [
        entry.model_copy(update={"is_leaf": not any(o.number.startswith(entry.number + ".") for o in entries)})
        for entry in entries
    ]
    offsets = [offset for offset, _, _ in headings]
    pieces = [piece for chunk in sorted(paper.chunks, key=lambda c: c.ordinal) for piece in _cut(chunk, offsets)]
    pieces = [piece.model_copy(update={"ordinal": ordinal}) for ordinal, piece in enumerate(pieces)]
    owners: list[TocEntry | None] = []
    for piece in pieces:
        index = bisect.bisect_right(offsets, piece.char_start) - 1
        # By the heading itself, not its path: two sibling headings may share a title.
        owners.append(first_leaf(entries, entries[index]) if index >= 0 else owning_leaf(entries, ()))
    return _toc(paper.model_copy(update={"chunks": pieces}), entries, owners)


def _cut(chunk: Chunk, offsets: Sequence[int]) -> list[Chunk]:
    """The chunk split at the heading offsets strictly inside it, each piece stripped of surrounding space."""
    bounds = [chunk.char_start, *(o for o in offsets if chunk.char_start < o < chunk.char_end), chunk.char_end]
    pieces = []
    for start, end in zip(bounds, bounds[1:]):
        text = chunk.text[start - chunk.char_start : end - chunk.char_start]
        lead = len(text) - len(text.lstrip())
        text = text.strip()
        if text:
            span = {"char_start": start + lead, "char_end": start + lead + len(text)}
            pieces.append(chunk.model_copy(update={"text": text, **span}))
    return pieces


def toc_from_segments(paper: Paper, settings: Settings, client: LLMClient | None) -> DocumentToc:
    chunks = sorted(paper.chunks, key=lambda c: c.ordinal)
    bounds = segment_bounds(chunks, Embedder(settings.index.embedding), settings.toc.induced_leaves)
    entries: list[TocEntry] = []
    owners: list[TocEntry | None] = []
    for position, (start, end) in enumerate(zip(bounds, bounds[1:]), start=1):
        title = _title(chunks[start:end], client)
        entry = TocEntry(number=str(position), title=title, path=(title,), is_leaf=True)
        entries.append(entry)
        owners.extend([entry] * (end - start))
    return _toc(paper.model_copy(update={"chunks": chunks}), entries, owners)


def segment_bounds(chunks: Sequence[Chunk], embedder: Embedder, most: int) -> list[int]:
    """Start indices of up to `most` contiguous segments, then len(chunks): cut where neighbours differ most."""
    if len(chunks) <= 1:
        return [0, len(chunks)]
    vectors = embedder.embed([chunk.text for chunk in chunks])
    similarity = np.sum(vectors[:-1] * vectors[1:], axis=1)  # unit vectors: cosine of each neighbour pair
    cuts = sorted(int(i) + 1 for i in np.argsort(similarity, kind="stable")[: min(most, len(chunks)) - 1])
    return [0, *cuts, len(chunks)]


def _title(chunks: Sequence[Chunk], client: LLMClient | None) -> str:
    """The LLM's title for the segment; without an LLM, or if it fails, the start of the first sentence."""
    text = " ".join(chunk.text for chunk in chunks)
    words = text.split()
    first_sentence = _SENTENCE_END.split(text.strip(), maxsplit=1)[0].split()
    fallback = " ".join(first_sentence[:FALLBACK_TITLE_WORDS]) or "Untitled"
    if client is None:
        return fallback
    prompt = toc_prompts().render(TITLE_PROMPT, passage=" ".join(words[:TITLE_PASSAGE_WORDS]))
    try:
        title = " ".join(client.complete(prompt, SectionTitle).title.split())
    except LLMError:
        return fallback
    return title or fallback


def _toc(paper: Paper, entries: list[TocEntry], owners: Sequence[TocEntry | None]) -> DocumentToc:
    leaf_chunks: dict[str, list[Chunk]] = {entry.number: [] for entry in entries if entry.is_leaf}
    for chunk, owner in zip(paper.chunks, owners):
        if owner is not None:
            leaf_chunks[owner.number].append(chunk)
    return DocumentToc(paper_id=paper.id, title=paper.title, entries=entries, leaf_chunks=leaf_chunks)
