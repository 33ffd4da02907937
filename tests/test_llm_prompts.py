from pathlib import Path

import pytest
import yaml

from strata.llm.check import PaperFacts
from strata.llm.errors import PromptError
from strata.llm.prompts import PromptRegistry, PromptTemplate, prompt_registry

VALID = {
    "name": "toy",
    "description": "a toy prompt",
    "system": "Extract facts.",
    "user": 'Passage:\n{passage}\nJSON like {{"a": 1}}',
    "fields": {"passage": "the text"},
    "output": "strata.llm.check:PaperFacts",
    "examples": [
        {
            "input": {"passage": "Invented (2001). We propose Foo on Bar."},
            "output": {"title": "Invented", "year": 2001, "method": "Foo", "datasets": ["Bar"]},
        }
    ],
}


def write_prompt(folder: Path, **changes) -> Path:
    spec = {**VALID, **changes}
    spec = {key: value for key, value in spec.items() if value is not None}
    path = folder / f"{spec.get('name', 'toy')}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_packaged_prompts_load_and_render():
    registry = prompt_registry()
    prompt = registry.render("check_extract", passage="Some passage.")
    assert prompt.output_model is PaperFacts
    assert prompt.user.endswith("Some passage.")
    assert '"method":"TideGNN"' in prompt.system  # the worked example, serialised by the output model


def test_a_valid_file_renders_examples_and_literal_braces(tmp_path):
    template = PromptTemplate.from_file(write_prompt(tmp_path))
    prompt = template.render(passage="P")
    assert prompt.user == 'Passage:\nP\nJSON like {"a": 1}'
    assert "Input:\nPassage:\nInvented (2001). We propose Foo on Bar.\n" in prompt.system


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"system": None}, "system"),
        ({"user": "Passage: {passage} and {section}"}, "unknown \\['section'\\]"),
        ({"fields": {"passage": "x", "query": "y"}}, "missing \\['query'\\]"),
        ({"output": "strata.llm.check:NoSuchModel"}, "cannot import output model"),
        ({"output": "strata.llm.check:CHECK_PASSAGE"}, "not a pydantic model"),
        ({"examples": [{"input": {"passage": "x"}, "output": {"title": "t"}}]}, "example 1 output"),
        ({"examples": [{"input": {"text": "x"}, "output": {}}]}, "inputs of example 1"),
        ({"user": "{0}"}, "plain names"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_broken_prompt_files_fail_at_load_naming_the_problem(tmp_path, changes, message):
    path = write_prompt(tmp_path, **changes)
    with pytest.raises(PromptError, match=message):
        PromptTemplate.from_file(path)


def test_registry_reports_every_broken_file_and_the_file_name(tmp_path):
    write_prompt(tmp_path, name="good")
    write_prompt(tmp_path, name="bad", system=None)
    (tmp_path / "mismatch.yaml").write_text(yaml.safe_dump({**VALID, "name": "other"}))
    with pytest.raises(PromptError) as error:
        PromptRegistry.from_directories(tmp_path)
    assert "bad.yaml" in str(error.value) and "mismatch" in str(error.value) and "good" not in str(error.value)


def test_rendering_with_missing_or_extra_values_is_an_error(tmp_path):
    registry = PromptRegistry.from_directories(write_prompt(tmp_path).parent)
    with pytest.raises(PromptError, match="missing \\['passage'\\]"):
        registry.render("toy")
    with pytest.raises(PromptError, match="unknown \\['other'\\]"):
        registry.render("toy", passage="p", other="o")
    with pytest.raises(PromptError, match="no prompt named 'nope'; known: toy"):
        registry.get("nope")
