"""The numbered ToC of a paper, and fitting long ToCs into a context budget (collapsed levels, then windows)."""

from __future__ import annotations

from strata.documents.builder import PaperBuilder
from strata.documents.model import Paper, Section
from strata.toc.model import DocumentToc, TocEntry
from strata.toc.tree import document_toc, owning_leaf, plan_views, render_line, render_toc


def words(text: str) -> int:
    return len(text.split())


def small_paper() -> Paper:
    builder = PaperBuilder("book", "test")
    builder.open_section("Cells", 1)
    builder.add_block("Cells are the units of life.")  # lead-in of an inner section
    builder.open_section("Membranes", 2)
    builder.add_block("Membranes separate inside from outside.")
    builder.open_section("Nucleus", 2)
    builder.add_block("The nucleus holds DNA.")
    builder.open_section("Tissues", 1)
    builder.add_block("Tissues are groups of cells.")
    return builder.build(title="Biology")


def test_entries_are_numbered_by_position_and_leaves_own_their_text():
    toc = document_toc(small_paper())
    assert [(e.number, e.title, e.is_leaf) for e in toc.entries] == [
        ("1", "Cells", False),
        ("1.1", "Membranes", True),
        ("1.2", "Nucleus", True),
        ("2", "Tissues", True),
    ]
    # The inner section's lead-in goes to its first leaf, which it precedes in reading order.
    assert toc.leaf_text("1.1") == "Cells are the units of life.\n\nMembranes separate inside from outside."
    assert toc.leaf_text("1.2") == "The nucleus holds DNA."
    assert render_toc(toc).splitlines() == ["1 Cells", "leaf 1.1 Membranes", "leaf 1.2 Nucleus", "leaf 2 Tissues"]


def test_a_paper_without_sections_is_one_leaf_holding_all_text():
    builder = PaperBuilder("flat", "test")
    builder.add_block("Only text.")
    toc = document_toc(builder.build(title="Flat"))
    assert [e.label for e in toc.leaves()] == ["1 Flat"] and toc.leaf_text("1") == "Only text."


def test_owning_leaf_of_an_unknown_path_is_the_first_leaf_of_the_first_root():
    entries = document_toc(small_paper()).entries
    assert owning_leaf(entries, ("Elsewhere",)).number == "1.1"
    assert owning_leaf(entries, ("Tissues", "Deeper")).number == "2"


def big_toc(chapters: int = 40, sections: int = 12, subsections: int = 8) -> DocumentToc:
    """About an 800-page textbook's ToC: 40 chapters, 480 sections, 3,840 leaves."""
    roots = [
        Section(
            title=f"Chapter about topic {c}",
            level=1,
            path=(f"c{c}",),
            children=[
                Section(
                    title=f"Section {c}.{s} on a subject",
                    level=2,
                    path=(f"c{c}", f"s{s}"),
                    children=[
                        Section(title=f"Subsection {c}.{s}.{u} detail", level=3, path=(f"c{c}", f"s{s}", f"u{u}"))
                        for u in range(subsections)
                    ],
                )
                for s in range(sections)
            ],
        )
        for c in range(chapters)
    ]
    return document_toc(Paper(id="big", title="Big", source_format="test", sections=roots))


def covered_leaves(toc: DocumentToc, choices: list[TocEntry]) -> set[str]:
    return {leaf.number for choice in choices for leaf in toc.leaves_under(choice)}


def test_a_long_toc_is_collapsed_to_the_deepest_level_that_fits_and_every_leaf_stays_reachable():
    toc = big_toc()
    assert words(render_toc(toc)) > 20_000
    (view,) = plan_views(toc, None, budget_tokens=5000, count_tokens=words)
    assert words(view.text) <= 5000
    assert {choice.depth for choice in view.choices} == {2}  # sections collapsed, subsections hidden
    assert "leaf 1.1 Section 0.0 on a subject [+8 entries]" in view.text.splitlines()
    assert covered_leaves(toc, view.choices) == {leaf.number for leaf in toc.leaves()}
    opened = plan_views(toc, view.choices[5], budget_tokens=5000, count_tokens=words)
    assert len(opened) == 1 and all(choice.is_leaf for choice in opened[0].choices)
    assert opened[0].text.splitlines()[:2] == ["1 Chapter about topic 0", "1.6 Section 0.5 on a subject"]


def test_a_first_level_too_long_for_the_budget_is_cut_into_windows_that_each_fit():
    toc = big_toc()
    views = plan_views(toc, None, budget_tokens=60, count_tokens=words)
    assert len(views) > 1 and all(words(view.text) <= 60 for view in views)
    assert [c.number for view in views for c in view.choices] == [str(n) for n in range(1, 41)]
    assert covered_leaves(toc, [c for view in views for c in view.choices]) == {leaf.number for leaf in toc.leaves()}


def test_a_budget_smaller_than_one_line_still_gives_every_entry_a_view():
    toc = big_toc(chapters=3, sections=2, subsections=2)
    views = plan_views(toc, None, budget_tokens=1, count_tokens=words)
    assert [len(view.choices) for view in views] == [1, 1, 1]


def test_render_line_marks_choices():
    leaf = TocEntry(number="2.1", title="Methods", path=("A", "Methods"), is_leaf=True)
    inner = TocEntry(number="2", title="A", path=("A",), is_leaf=False)
    assert render_line(leaf) == "leaf 2.1 Methods"
    assert render_line(inner) == "2 A"
    assert render_line(inner, hidden=3) == "leaf 2 A [+3 entries]"
