"""A document's section tree as a numbered ToC, and the ToC as STAIR prompt text, fitted into a context budget.

Entries are numbered by position, so numbers are unique even where printed numbers are missing or repeat. A leaf
owns the chunks whose section path lies under it; text that an inner section holds before its first subsection
(its lead-in) goes to that section's first leaf, which it precedes in reading order.

A ToC too long for the context is shown level by level: the deepest listing that fits is rendered with the inner
entries at its last level collapsed (selectable, marked with how many entries they hide); choosing one opens its
subtree in a second prompt. A listing that does not fit even at the top level is cut into consecutive windows,
whose best choices then meet in views of their own (`finalist_views`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from strata.documents.model import Chunk, Paper, Section
from strata.toc.model import DocumentToc, TocEntry

TokenCounter = Callable[[str], int]
LEAF_MARK = "leaf"


def document_toc(paper: Paper) -> DocumentToc:
    """The numbered ToC of an ingested paper; a paper without sections gets one leaf holding all its text."""
    sections = paper.sections or [Section(title=paper.title or paper.id, level=1, path=(paper.title or paper.id,))]
    entries = list(_numbered(sections, prefix=""))
    return DocumentToc(
        paper_id=paper.id,
        title=paper.title,
        entries=entries,
        leaf_chunks=_leaf_chunks(entries, paper.chunks, whole_text_path=None if paper.sections else entries[0].path),
    )


def _numbered(sections: Sequence[Section], prefix: str) -> list[TocEntry]:
    entries: list[TocEntry] = []
    for position, section in enumerate(sections, start=1):
        number = f"{prefix}{position}"
        entries.append(TocEntry(number=number, title=section.title, path=section.path, is_leaf=section.is_leaf))
        entries.extend(_numbered(section.children, prefix=f"{number}."))
    return entries


def _leaf_chunks(
    entries: list[TocEntry], chunks: Sequence[Chunk], whole_text_path: tuple[str, ...] | None
) -> dict[str, list[Chunk]]:
    parts: dict[str, list[Chunk]] = {entry.number: [] for entry in entries if entry.is_leaf}
    for chunk in sorted(chunks, key=lambda c: c.ordinal):
        owner = owning_leaf(entries, whole_text_path or chunk.section_path)
        if owner is not None:
            parts[owner.number].append(chunk)
    return parts


def owning_leaf(entries: Sequence[TocEntry], section_path: tuple[str, ...]) -> TocEntry | None:
    """The leaf that owns text at `section_path`: the deepest entry whose path prefixes it, or its first leaf."""
    best: TocEntry | None = None
    for entry in entries:
        if entry.path == section_path[: len(entry.path)] and (best is None or len(entry.path) > len(best.path)):
            best = entry
    if best is None:
        best = next((entry for entry in entries if entry.depth == 1), None)
    return None if best is None else first_leaf(entries, best)


def first_leaf(entries: Sequence[TocEntry], entry: TocEntry) -> TocEntry | None:
    """`entry` when it is a leaf, else the first leaf under it (which owns an inner entry's lead-in text)."""
    if entry.is_leaf:
        return entry
    return next((other for other in entries if other.is_leaf and other.is_under(entry)), None)


class TocView(BaseModel):
    """One prompt's worth of ToC: the lines shown and the entries that may be answered."""

    model_config = ConfigDict(frozen=True)

    text: str
    choices: list[TocEntry] = Field(description="Leaves and collapsed inner entries, in reading order")


def render_line(entry: TocEntry, hidden: int = 0) -> str:
    """'leaf 2.3.1 Title' for a choice, '2.3 Title' for an open inner entry; a collapsed one shows what it hides."""
    if entry.is_leaf:
        return f"{LEAF_MARK} {entry.label}"
    if hidden:
        return f"{LEAF_MARK} {entry.label} [+{hidden} entries]"
    return entry.label


def plan_views(
    toc: DocumentToc, scope: TocEntry | None, budget_tokens: int, count_tokens: TokenCounter
) -> list[TocView]:
    """Views of the entries under `scope` (the whole ToC when None) that each fit `budget_tokens`.

    The deepest level that fits is shown in one view; if even the first level below `scope` does not fit, that
    level is cut into consecutive windows. Never fails: a single line longer than the budget gets a view alone.
    A view's size is the sum of its lines' token counts, each line counted with its newline.
    """
    members, context, hidden = _scope(toc, scope)
    cost = _line_cost(count_tokens)
    budget = budget_tokens - cost(context)
    base = scope.depth if scope else 0
    for depth in range(max((entry.depth for entry in members), default=base + 1), base, -1):
        shown = [entry for entry in members if entry.depth <= depth]
        lines = _lines(shown, depth, hidden)
        if cost(lines) <= budget:
            return [_view(context, shown, lines, depth)]
    return _windows(context, [entry for entry in members if entry.depth == base + 1], base + 1, hidden, budget, cost)


def finalist_views(
    toc: DocumentToc,
    scope: TocEntry | None,
    finalists: Sequence[TocEntry],
    budget_tokens: int,
    count_tokens: TokenCounter,
) -> list[TocView]:
    """Views of `finalists`, entries of the first level below `scope` that won their windows of `plan_views`, in
    reading order and as those windows show them: one view if they fit it, else consecutive windows again."""
    members, context, hidden = _scope(toc, scope)
    cost = _line_cost(count_tokens)
    chosen = {entry.number for entry in finalists}
    shown = [entry for entry in members if entry.number in chosen]
    depth = (scope.depth if scope else 0) + 1
    return _windows(context, shown, depth, hidden, budget_tokens - cost(context), cost)


def _scope(toc: DocumentToc, scope: TocEntry | None) -> tuple[list[TocEntry], list[str], dict[str, int]]:
    """(the entries under `scope`, the lines of its ancestors shown above them, hidden entries per member)."""
    members = [entry for entry in toc.entries if scope is None or (entry.is_under(scope) and entry != scope)]
    context = [render_line(entry) for entry in toc.entries if scope is not None and scope.is_under(entry)]
    return members, context, _descendant_counts(members)


def _line_cost(count_tokens: TokenCounter) -> Callable[[Sequence[str]], int]:
    """Token count of some lines, each counted once with its newline (the same lines are costed at every depth)."""
    line_tokens: dict[str, int] = {}

    def cost(lines: Sequence[str]) -> int:
        for line in lines:
            if line not in line_tokens:
                line_tokens[line] = count_tokens(line + "\n")
        return sum(line_tokens[line] for line in lines)

    return cost


def _windows(
    context: list[str],
    entries: Sequence[TocEntry],
    depth: int,
    hidden: dict[str, int],
    budget: int,
    cost: Callable[[Sequence[str]], int],
) -> list[TocView]:
    """`entries` (all at `depth`) cut into consecutive views of at most `budget` tokens; a longer line stays alone."""
    views: list[TocView] = []
    start, used = 0, 0
    lines = _lines(entries, depth, hidden)
    for index, line in enumerate(lines):
        size = cost([line])
        if index > start and used + size > budget:
            views.append(_view(context, entries[start:index], lines[start:index], depth))
            start, used = index, 0
        used += size
    if entries:
        views.append(_view(context, entries[start:], lines[start:], depth))
    return views


def _descendant_counts(entries: Sequence[TocEntry]) -> dict[str, int]:
    counts = {entry.number: 0 for entry in entries}
    for entry in entries:
        parts = entry.number.split(".")
        for cut in range(1, len(parts)):
            ancestor = ".".join(parts[:cut])
            if ancestor in counts:
                counts[ancestor] += 1
    return counts


def _lines(shown: Sequence[TocEntry], depth: int, hidden: dict[str, int]) -> list[str]:
    return [render_line(entry, hidden[entry.number] if entry.depth == depth else 0) for entry in shown]


def _view(context: list[str], shown: Sequence[TocEntry], lines: list[str], depth: int) -> TocView:
    """Leaves and the inner entries at the view's last level (collapsed) are the choices."""
    choices = [entry for entry in shown if entry.is_leaf or entry.depth == depth]
    return TocView(text="\n".join([*context, *lines]), choices=choices)


def render_toc(toc: DocumentToc) -> str:
    """The whole ToC, every level open (what STAIR is trained on when it fits)."""
    return "\n".join(render_line(entry) for entry in toc.entries)


def toc_digest(toc: DocumentToc) -> str:
    """SHA-256 (16 hex digits) of the ToC as rendered: an adapter learned these leaves and no others."""
    return hashlib.sha256(render_toc(toc).encode()).hexdigest()[:16]
