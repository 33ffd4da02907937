"""Synthesis arithmetic is computed by Strata from the facts' values, never taken from the model."""

import pytest

from strata.read.calculate import calculation_claims, compute, fact_number
from strata.read.model import CalculationDraft, Claim
from strata.read.validate import states_value

FACTS = [
    Claim(text="4.2 cm", citations=[1], value="4.2", unit="cm"),
    Claim(text="9.8 cm", citations=[2], value="9.8 cm", unit="cm"),
    Claim(text="1,250 mg", citations=[3], value="1,250", unit="mg"),
]


def test_an_expression_over_fact_values_is_computed_and_cites_those_facts():
    result, citations = compute("(9.8 - 4.2) / 4.2", FACTS)
    assert result == pytest.approx(5.6 / 4.2) and citations == [1, 2]
    assert compute("1250 / 9.8 ** 4.2", FACTS)[1] == [1, 2, 3]  # "1,250" is the number 1250
    assert compute("-4.2", FACTS) == (-4.2, [1])
    below = [*FACTS, Claim(text="-3 °C", citations=[4], value="−3", unit="°C")]
    assert compute("-3 + 4.2", below) == (pytest.approx(1.2), [1, 4])  # a negative fact, written with its sign


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("9.8 - 3", "3 in"),  # a number no fact states
        ("__import__('os').getcwd()", "not arithmetic"),
        ("9.8 // 4.2", "not arithmetic"),
        ("4.2 / (4.2 - 4.2)", "division by zero"),
        ("9.8 -", "not an arithmetic expression"),
    ],
)
def test_anything_but_arithmetic_over_fact_values_is_refused(expression, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        compute(expression, FACTS)


def test_calculation_claims_keep_the_computable_and_say_why_the_rest_were_dropped():
    drafts = [CalculationDraft(expression="9.8 - 4.2", unit="cm"), CalculationDraft(expression="9.8 - 7")]
    claims, rejected = calculation_claims(drafts, FACTS)
    assert [(c.text, c.value, c.unit, c.citations) for c in claims] == [("9.8 - 4.2 = 5.6 cm", "5.6", "cm", [1, 2])]
    assert len(rejected) == 1 and "7 in '9.8 - 7' is not the value of any fact" in rejected[0]


def test_a_fact_value_without_a_number_matches_nothing():
    assert fact_number("not reported") is None and fact_number("\u22123.5 %") == -3.5
    assert fact_number("IL-6") is None and not states_value("6", "", "it was IL-6 here")  # a name's digits


@pytest.mark.parametrize(
    ("written", "number"),
    [("1,2", 1.0), ("1,200", 1200.0), ("-3", -3.0), ("\u22123 °C", -3.0), (".05", 0.05), ("3.5e-4", 0.00035),
     ("1e-05", 0.00001)],
)
def test_a_fact_number_is_the_number_validation_finds_in_the_passage(written, number):
    """'1,2' is a list (or a decimal comma), not 12; a fact's number and the check that its passage states it read
    numbers by one rule ('1e-05' is how a calculated value may be shown)."""
    assert fact_number(written) == number
    assert states_value(f"{number:g}", "", f"it was {written} here")
