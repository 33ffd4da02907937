"""Deterministic arithmetic for synthesis: the model writes an expression over the facts' values and Strata computes
it, so a calculated number never comes from the model's own arithmetic and always rests on cited facts.

A small walk over Python's `ast`, not `eval`: only numbers, + - * / ** and parentheses are allowed, and every number
must be the value of one of the answer's facts (whose citations the result inherits). No dependency evaluates
arithmetic under that restriction, and the whole rule fits in a few lines.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Sequence

from strata.read.grounding import read_numbers
from strata.read.model import CalculationDraft, Claim

OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def fact_number(value: str) -> float | None:
    """The first number a fact's value states ('4.2', '1,250 mg', '−3', '3.5e-4'; '1,2' states 1 and 2), read as
    validation reads the passage it cites, or None when it states none."""
    return next(iter(read_numbers(value)), None)


def compute(expression: str, facts: Sequence[Claim]) -> tuple[float, list[int]]:
    """The expression's value and the citations of the facts it uses; ValueError when it is not arithmetic over
    the facts' values."""
    try:
        tree = ast.parse(expression.replace("\u2212", "-").replace("×", "*"), mode="eval")
    except SyntaxError as error:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from error
    citations: set[int] = set()

    def fact_value(number: float) -> float:
        cited = [n for fact in facts if fact_number(fact.value or "") == number for n in fact.citations]
        if not cited:
            raise ValueError(f"{number:g} in {expression!r} is not the value of any fact")
        citations.update(cited)
        return number

    def value(node: ast.expr) -> float:
        if (number := _number_of(node)) is not None:
            return fact_value(number)
        negated = _number_of(node.operand) if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) else None
        if negated is not None and any(fact_number(fact.value or "") == -negated for fact in facts):
            return fact_value(-negated)  # a fact of '-3', written '-3' in the expression
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            try:
                return OPERATORS[type(node.op)](value(node.left), value(node.right))
            except (ZeroDivisionError, OverflowError) as error:
                raise ValueError(f"{expression!r}: {error}") from error
        raise ValueError(f"{expression!r} is not arithmetic over fact values ({ast.unparse(node)!r})")

    return value(tree.body), sorted(citations)


def calculation_claims(drafts: Sequence[CalculationDraft], facts: Sequence[Claim]) -> tuple[list[Claim], list[str]]:
    """A claim 'EXPRESSION = RESULT UNIT' per computable draft, citing the facts it uses, and why the others were
    dropped."""
    claims, rejected = [], []
    for draft in drafts:
        try:
            result, citations = compute(draft.expression, facts)
        except ValueError as error:
            rejected.append(f"calculation dropped: {error}")
            continue
        shown = f"{result:.6g}"
        claims.append(
            Claim(
                text=f"{draft.expression} = {shown} {draft.unit}".strip(),
                citations=citations,
                value=shown,
                unit=draft.unit or None,
                expression=draft.expression,
            )
        )
    return claims, rejected


def _number_of(node: ast.expr) -> float | None:
    """The node's number when it is a numeric literal (True and False are not numbers here)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None
