"""compare_stores tells two stores apart by their papers and chunk texts."""

from __future__ import annotations

from pathlib import Path

from corpus_support import bm25_corpus
from strata.experiments.stores import compare_stores

PAPERS = {
    "p1": ("Statins", "Statins lower LDL cholesterol in adults."),
    "p2": ("Sleep", "Sleep deprivation impairs working memory."),
}


def test_identical_stores_are_the_same_and_differences_are_named(tmp_path: Path) -> None:
    with bm25_corpus(tmp_path / "a", PAPERS) as (left, _), bm25_corpus(tmp_path / "b", PAPERS) as (same, _):
        diff = compare_stores(left, same)
    assert diff.same(vector_tolerance=0.0) and (diff.papers, diff.chunks) == (2, 2)
    changed = {"p2": ("Sleep", "Sleep deprivation improves working memory."), "p3": ("Tea", "Green tea.")}
    with bm25_corpus(tmp_path / "c", {**PAPERS, **changed}) as (right, _):
        diff = compare_stores(left, right)
    assert not diff.same(vector_tolerance=1.0)
    assert (diff.only_left, diff.only_right, diff.different_chunks) == ([], ["p3"], ["p2"])
