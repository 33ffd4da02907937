"""benchmarks/stair.py's results file: each invocation merges its parts into it, and every row keeps the command of
the run that measured it, whatever later runs re-write around it (paired tests added, books pooled)."""

from __future__ import annotations

import shlex

import pytest

from benchmark_support import load_benchmark
from strata.eval.results import command_line, load_result, write_result
from strata.eval.toc import TocQuery
from strata.toc.model import LeafRanking, ScoredLeaf

BOOKS = {"book-a": ("Memory",), "book-b": ("Sleep",)}
FILE = "stair-cpu.json"


@pytest.fixture()
def stair(tmp_path, monkeypatch):
    bench = load_benchmark("stair")
    monkeypatch.setattr(bench, "REPO", tmp_path)
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(bench, "PER_QUERY", tmp_path / "results" / "stair")
    monkeypatch.setattr(bench, "SMALL_BOOKS", BOOKS)
    return bench


def questions(*books: str) -> list[TocQuery]:
    return [TocQuery(query_id=f"{book}-{i}", book=book, question=f"question {i}", gold_path=(BOOKS[book][0], f"s{i}"))
            for book in books for i in range(4)]  # fmt: skip


def ranked(question: TocQuery, right: bool) -> LeafRanking:
    path = question.gold_path if right else ("Elsewhere", "s9")
    return LeafRanking(query=question.question, method="m", leaves=[ScoredLeaf(number="1.1", label=path[-1],
                                                                              path=path, score=1.0)])  # fmt: skip


def methods(bench, asked: list[TocQuery], tag: str, hits: dict[str, int]) -> dict:
    return {method: bench.by_scope(method, asked, [ranked(q, i % 4 < hit) for i, q in enumerate(asked)], tag)
            for method, hit in hits.items()}  # fmt: skip


def small_part(bench, book: str, key: str) -> dict:
    return {"kind": "small-book", "book": book, "questions_test": 4, "settings": {"questions_per_leaf": 8},
            "methods": methods(bench, questions(book), f"small-{key}", {"bm25": 3, "stair": 2})}  # fmt: skip


def forget_commands(bench, group: str) -> None:
    """The part as a run that recorded no command per row left it."""
    path = bench.RESULTS / FILE
    result = load_result(path)
    rows = [e.model_copy(update={"command": None}) if e.group == group else e for e in result.experiments]
    write_result(result.model_copy(update={"experiments": rows}), path)


def invocation(*words: str):
    return command_line(["python", "benchmarks/stair.py", "cpu", *words])


def test_each_row_keeps_the_command_of_the_run_that_measured_it_and_a_pooled_row_those_of_its_books(stair) -> None:
    first, second = ("--parts", "small", "--small-books", "book-a"), ("--parts", "small", "--small-books", "book-b")
    with invocation(*first):
        stair.write_results(FILE, {"small_book-a": small_part(stair, "book-a", "book-a")})
        stair.write_results(FILE, {"small_book-a-tiny": small_part(stair, "book-a", "book-a-tiny")})
        zero_shot = methods(stair, questions(*BOOKS), "zs", {"zero-shot-llm": 1})
        stair.write_results(FILE, {"zero_shot_llm_small_book": {"kind": "zero-shot-small", "methods": zero_shot}})
    for group in ("small_book-a-tiny", "zero_shot_llm_small_book"):
        forget_commands(stair, group)
    with invocation(*second):
        stair.pool_small_books(stair.write_results(FILE, {"small_book-b": small_part(stair, "book-b", "book-b")}))
    a, b = (shlex.join(["python", "benchmarks/stair.py", "cpu", *words]) for words in (first, second))

    result = load_result(stair.RESULTS / FILE)
    commands = {e.name: e.command for e in result.experiments}
    assert commands["small_book-a/stair/all"] == a and commands["small_book-b/stair/all"] == b
    # re-written by the second run with its paired tests against the book's default part, measured by neither
    assert result.details["parts"]["small_book-a-tiny"]["comparisons"]
    assert {commands[f"small_book-a-tiny/{m}/all"] for m in ("bm25", "stair")} == {None}
    # pooled by the second run: the books' rows as their runs measured them, the pooled row from both runs
    assert commands["small_books_overall/stair/book-a"] == a and commands["small_books_overall/stair/book-b"] == b
    pooled = result.experiment("small_books_overall/stair/all")
    assert pooled.command == f"{a}; {b}" == load_result(stair.REPO / pooled.per_query).experiments[0].command
    assert commands["small_books_overall/zero-shot-llm/all"] is None

    with command_line(["python", "benchmarks/stair.py", "cpu", "--parts", "overall"]):
        stair.pool_small_books(None)
    assert load_result(stair.RESULTS / FILE).experiment("small_books_overall/stair/all") == pooled  # pooled as before
