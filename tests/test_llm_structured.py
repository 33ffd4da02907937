import pytest
from pydantic import BaseModel

from strata.llm.structured import StructuredOutputError, extract_json_object, parse_structured


class Answer(BaseModel):
    label: str
    score: int


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"label": "a", "score": 1}', {"label": "a", "score": 1}),
        ('```json\n{"label": "a", "score": 1}\n```', {"label": "a", "score": 1}),
        ('<think>maybe {"label": "x"}</think>\n{"label": "a", "score": 1}', {"label": "a", "score": 1}),
        ('Sure! Here it is: {"label": "a}", "score": 1} Hope this helps {"label": "b"}', {"label": "a}", "score": 1}),
        ('{"broken": \n{"label": "a", "score": 1}', {"label": "a", "score": 1}),
        (
            'see ```{"label": "fenced", "score": 2}``` or {"label": "loose", "score": 3}',
            {"label": "fenced", "score": 2},
        ),
    ],
)
def test_first_json_object_is_recovered_from_wrapped_answers(text, expected):
    assert extract_json_object(text) == expected


def test_an_unclosed_think_block_hides_everything_after_it():
    with pytest.raises(StructuredOutputError, match="no complete JSON object"):
        extract_json_object('<think>{"label": "a", "score": 1}')


def test_validation_errors_name_the_field():
    with pytest.raises(StructuredOutputError, match="score"):
        parse_structured('{"label": "a", "score": "many"}', Answer)


def test_parse_structured_returns_the_model():
    assert parse_structured('[1] {"label": "a", "score": 2}', Answer) == Answer(label="a", score=2)


class Queries(BaseModel):
    subqueries: list[str] = []
    year: int | None = None


def test_a_broken_object_that_closes_is_not_read_from_inside():
    # A trailing comma breaks the outer object; its inner {"reason": ...} validated as an empty answer and no one
    # asked again.
    with pytest.raises(StructuredOutputError, match="no complete JSON object"):
        parse_structured('{"subqueries": ["folding"], "why": {"reason": "x"},}', Queries)


def test_the_first_object_that_validates_is_the_answer_an_empty_one_only_last():
    assert parse_structured('Format: {}. Answer: {"subqueries": ["a"], "year": 2021}', Queries).year == 2021
    assert parse_structured('{"note": 1} then {"label": "ok", "score": 2}', Answer).label == "ok"
    with pytest.raises(StructuredOutputError, match="label"):
        parse_structured('{"note": 1} and {"other": 2}', Answer)  # the first object's errors
    assert parse_structured("{}", Queries) == Queries()
