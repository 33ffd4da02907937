"""Scoring leaf rankings against section-level gold, and reading free generations as leaves (or hallucinations)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from strata.eval.toc import TocQuery, load_toc_queries, score_rankings, summarise
from strata.toc.model import DocumentToc, LeafRanking, TocEntry
from strata.toc.retriever import match_generation

ENTRIES = [
    TocEntry(number="1", title="Memory", path=("Memory",), is_leaf=False),
    TocEntry(number="1.1", title="Encoding", path=("Memory", "Encoding"), is_leaf=False),
    TocEntry(number="1.1.1", title="Sensory input", path=("Memory", "Encoding", "Sensory input"), is_leaf=True),
    TocEntry(number="1.1.2", title="Rehearsal", path=("Memory", "Encoding", "Rehearsal"), is_leaf=True),
    TocEntry(number="1.2", title="Forgetting", path=("Memory", "Forgetting"), is_leaf=True),
    TocEntry(number="2", title="Sleep", path=("Sleep",), is_leaf=False),
    TocEntry(number="2.1", title="Introduction", path=("Sleep", "Introduction"), is_leaf=True),
    TocEntry(number="2.2", title="Dreams", path=("Sleep", "Dreams"), is_leaf=True),
]
TOC = DocumentToc(paper_id="book", title="Psych", entries=ENTRIES, leaf_chunks={})
LEAF = {entry.number: entry for entry in ENTRIES}


def ranking(*numbers: str, raw: str | None = None) -> LeafRanking:
    return LeafRanking(
        query="q",
        method="m",
        leaves=[LEAF[n].scored(-i) for i, n in enumerate(numbers)],
        raw_output=raw,
        hallucinated=raw is not None and not numbers,
    )


def query(gold: tuple[str, ...], query_id: str = "q1") -> TocQuery:
    return TocQuery(query_id=query_id, book="b", question="?", gold_path=gold)


def test_a_leaf_under_the_gold_section_is_a_hit_and_repeats_of_the_same_section_count_once():
    gold = ("Memory", "Encoding")
    # Two leaves of the gold section, then others: the section is retrieved at rank 1.
    (first,) = score_rankings([query(gold)], [ranking("1.1.2", "1.1.1", "2.2")])
    assert first.metrics == {"R@1": 1.0, "R@3": 1.0, "nDCG@3": 1.0}
    # Gold section second in the unit ranking (1.2, then 1.1.x; 2.1 third).
    (second,) = score_rankings([query(gold)], [ranking("1.2", "1.1.1", "2.1")])
    assert second.metrics["R@1"] == 0.0 and second.metrics["R@3"] == 1.0
    assert second.metrics["nDCG@3"] == pytest.approx(1 / math.log2(3))


def test_misses_empty_rankings_and_hallucination_are_scored():
    results = score_rankings(
        [query(("Sleep", "Dreams"), "a"), query(("Sleep", "Dreams"), "b")],
        [ranking("1.2", "2.1", "1.1.1"), ranking(raw="7.7 Made-up Section")],
    )
    assert results[0].metrics == {"R@1": 0.0, "R@3": 0.0, "nDCG@3": 0.0}
    assert results[1].metrics == {"R@1": 0.0, "R@3": 0.0, "nDCG@3": 0.0, "hallucination": 1.0}
    summary = summarise("m", "all", results)
    assert summary.queries == 2 and summary.metrics["hallucination"] == 1.0  # mean over generating queries


def test_free_text_names_a_leaf_only_by_its_exact_label_number_or_unique_title():
    assert match_generation(TOC, "leaf 1.1.2 Rehearsal\nbecause ...").number == "1.1.2"
    assert match_generation(TOC, "  1.2  forgetting. ").number == "1.2"
    assert match_generation(TOC, "2.2").number == "2.2"
    assert match_generation(TOC, "Dreams").number == "2.2"
    assert match_generation(TOC, "1.1 Encoding") is None  # an inner entry is not a leaf
    assert match_generation(TOC, "2.2 Dreams and nightmares") is None  # a made-up title
    assert match_generation(TOC, "") is None


def test_real_queries_load_with_their_gold_paths(shared_data: Path):
    queries = load_toc_queries(shared_data / "openstax-toc-qa" / "psychology-2e")
    assert len(queries) == 589 and len({q.query_id for q in queries}) == 589
    assert queries[0].gold_path == ("Introduction to Psychology", "What Is Psychology?")


def test_a_folder_without_queries_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no OpenStax book"):
        load_toc_queries(tmp_path)
