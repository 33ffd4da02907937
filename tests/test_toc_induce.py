"""ToC induction for documents without an outline: from headings in the text, or by contiguous segmentation."""

from __future__ import annotations

import numpy as np

from strata.config import ChunkingSettings, Settings
from strata.documents.builder import PaperBuilder
from strata.toc.induce import find_headings, induce_toc, needs_induction, segment_bounds, toc_from_headings

MARKDOWN = [
    "# Introduction",
    "Why this matters.",
    "## Background",
    "Earlier work.",
    "## Aims",
    "What we try.",
    "# Methods",
    "How it was done.",
]


def flat_paper(blocks: list[str]):
    builder = PaperBuilder("doc", "test", ChunkingSettings(merge_short_blocks=False))
    for block in blocks:
        builder.add_block(block)
    return builder.build(title="Doc")


def test_markdown_headings_nest_by_level_and_text_goes_to_the_leaf_it_follows():
    paper = flat_paper(MARKDOWN)
    assert needs_induction(paper)
    toc = toc_from_headings(paper, find_headings(paper.text))
    assert [(e.number, e.title, e.is_leaf) for e in toc.entries] == [
        ("1", "Introduction", False),
        ("1.1", "Background", True),
        ("1.2", "Aims", True),
        ("2", "Methods", True),
    ]
    assert toc.entry("1.1").path == ("Introduction", "Background")
    # 'Why this matters.' is the lead-in of Introduction, so it belongs to its first leaf.
    assert "Why this matters." in toc.leaf_text("1.1") and "Earlier work." in toc.leaf_text("1.1")
    assert "How it was done." in toc.leaf_text("2") and "Earlier work." not in toc.leaf_text("2")
    for chunks in toc.leaf_chunks.values():
        assert all(paper.text[c.char_start : c.char_end] == c.text for c in chunks)


def test_text_under_two_sibling_headings_of_one_title_goes_to_each_its_own_leaf():
    paper = flat_paper(["# Sleep", "Lead-in.", "## Example", "First example.", "## Example", "Second example."])
    toc = toc_from_headings(paper, find_headings(paper.text))
    assert [(e.number, e.path) for e in toc.leaves()] == [("1.1", ("Sleep", "Example")), ("1.2", ("Sleep", "Example"))]
    assert "First example." in toc.leaf_text("1.1") and "Second example." not in toc.leaf_text("1.1")
    assert "Second example." in toc.leaf_text("1.2") and "Lead-in." in toc.leaf_text("1.1")


def test_headings_inside_one_merged_chunk_still_split_its_text():
    builder = PaperBuilder("doc", "test")  # short blocks merge into one chunk across the heading lines
    for block in MARKDOWN:
        builder.add_block(block)
    paper = builder.build(title="Doc")
    assert len(paper.chunks) == 1
    toc = toc_from_headings(paper, find_headings(paper.text))
    assert toc.leaf_text("1.2") == "## Aims\n\nWhat we try."
    assert all(paper.text[c.char_start : c.char_end] == c.text for cs in toc.leaf_chunks.values() for c in cs)


def test_numbered_headings_are_found_when_there_is_no_markdown():
    text = "1 Introduction\n\nSome text.\n\n1.1 Scope of the study\n\nMore.\n\n2 Results\n\nEnd of sentence."
    assert [(level, title) for _, level, title in find_headings(text)] == [
        (1, "Introduction"),
        (2, "Scope of the study"),
        (1, "Results"),
    ]


class TopicEmbedder:
    """Unit vectors by topic word, so neighbouring chunks of one topic are identical."""

    def embed(self, texts):
        topics = ["tides", "volcano", "forest"]
        vectors = np.array([[float(topic in text) for topic in topics] for text in texts]) + 1e-3
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_segments_are_cut_where_neighbouring_chunks_differ_most():
    paper = flat_paper(["tides " * 30, "tides " * 30, "volcano " * 30, "volcano " * 30, "forest " * 30])
    chunks = sorted(paper.chunks, key=lambda c: c.ordinal)
    assert len(chunks) == 5
    assert segment_bounds(chunks, TopicEmbedder(), most=3) == [0, 2, 4, 5]
    assert segment_bounds(chunks, TopicEmbedder(), most=1) == [0, 5]
    assert segment_bounds(chunks[:1], TopicEmbedder(), most=3) == [0, 1]


def test_a_document_without_headings_gets_segment_leaves_titled_by_their_first_words_without_an_llm():
    paper = flat_paper(["The tides of the ocean rise. " * 20, "A volcano erupts with lava. " * 20])
    settings = Settings.load(overrides={"toc.induced_leaves": 2, "index.embedding.threads": 1})
    toc = induce_toc(paper, settings, client=None)
    assert [leaf.title for leaf in toc.leaves()] == ["The tides of the ocean rise.", "A volcano erupts with lava."]
    assert sum(len(chunks) for chunks in toc.leaf_chunks.values()) == len(paper.chunks)
