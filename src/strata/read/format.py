"""Plain-text rendering of an AskResult for `strata ask`: the answer, numbered citations, optionally the trace."""

from __future__ import annotations

from strata.read.model import AskResult, PaperReading

SNIPPET_CHARS = 400


def format_ask_result(result: AskResult, trace: bool = False) -> str:
    answer = result.answer
    lines = [f"Q: {answer.question}", ""]
    main = next((claim for claim in answer.claims if claim.text == answer.text), None)
    if answer.table:
        lines.extend(" | ".join(row) for row in answer.table)
    else:
        lines.append(answer.text + (" " + _marks(main.citations) if main else ""))
    lines.extend(f"  - {claim.text} {_marks(claim.citations)}" for claim in answer.claims if claim is not main)
    if not answer.supported:
        lines.append("(unsupported: validation removed the evidence this answer rested on)")
    if result.partial:
        lines.append(f"(partial result: {result.error})")
    if answer.evidence:
        lines.extend(["", "Citations:"])
    for item in answer.evidence:
        where = " > ".join(item.section_path) or "-"
        page = f", p. {item.page}" if item.page else ""
        lines.append(f"[{item.number}] {item.title or item.paper_id} — {where}{page}  ({item.locator})")
        lines.append(f'    "{_snippet(item.quote or item.text)}"')
    if result.partial or not answer.answerable:
        lines.extend(["", "Candidate papers:"])
        lines.extend(f"{c.rank:>3}. {c.title or c.paper_id}  ({c.paper_id})" for c in result.candidates.candidates[:10])
    if trace:
        lines.extend(["", "Stages:"])
        lines.extend(f"[{e.elapsed_s:6.1f}s] {e.stage:<10} {e.status:<7} {e.detail}" for e in result.events)
        lines.extend(["", "Papers read:"])
        lines.extend(f"{r.rank:>3}. {_decisions(r)} {'accepted' if r.accepted else 'rejected'}  {r.title or r.paper_id}"
                     for r in result.readings)
        lines.extend(["", "LLM calls:", result.trace.format()])
    lines.append(f"\n{result.wall_s:.1f}s")
    return "\n".join(lines)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def _marks(citations: list[int]) -> str:
    return "".join(f"[{number}]" for number in citations)


def _decisions(reading: PaperReading) -> str:
    """'A=0.62 B=0.55', 'A=0.31 B=-' (B not asked), or 'top rank' for a paper accepted without the decisions."""
    if reading.relevant is None:
        return "top rank"
    return f"A={reading.relevant:.2f} B={'-' if reading.sufficient is None else f'{reading.sufficient:.2f}'}"
