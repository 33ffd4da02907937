import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

import strata
from strata.llm.check import PaperFacts, check_prompts
from strata.llm.errors import PromptError
from strata.llm.templates import PromptRegistry, PromptTemplate
from strata.read.model import read_prompts
from strata.rerank.model import rerank_prompts
from strata.retrieve.rounds import retrieve_prompts
from strata.toc.model import toc_prompts
from strata.train.pairs import training_prompts

MODELS = {"PaperFacts": PaperFacts}
STAGE_REGISTRIES = [check_prompts, read_prompts, rerank_prompts, retrieve_prompts, toc_prompts, training_prompts]

VALID = {
    "name": "toy",
    "description": "a toy prompt",
    "system": "Extract facts.",
    "user": 'Passage:\n{passage}\nJSON like {{"a": 1}}',
    "fields": {"passage": "the text"},
    "output": "PaperFacts",
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
    prompt = check_prompts().render("check_extract", passage="Some passage.")
    assert prompt.output_model is PaperFacts
    assert prompt.user.endswith("Some passage.")
    assert '"method":"TideGNN"' in prompt.system  # the worked example, serialised by the output model


def test_every_packaged_prompt_file_loads_into_its_stage_registry_under_a_unique_name():
    names = [name for registry in STAGE_REGISTRIES for name in registry().names()]
    assert len(names) == len(set(names))
    files = sorted(path.stem for path in Path(strata.__file__).parent.glob("*/prompts/*.yaml"))
    assert sorted(names) == files


def test_the_llm_layer_imports_no_stage():
    code = (
        "import pkgutil, importlib, sys, strata.llm\n"
        "for module in pkgutil.iter_modules(strata.llm.__path__):\n"
        "    importlib.import_module(f'strata.llm.{module.name}')\n"
        "strata.llm.check.check_prompts()\n"  # loading prompts is where stages were once imported
        "print(' '.join(sorted(name for name in sys.modules if name.startswith('strata.'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    stages = ("read", "rerank", "retrieve", "relate", "toc", "pipeline", "train", "experiments")
    assert "strata.llm.check" in loaded
    assert [name for name in loaded if name.split(".")[1] in stages] == []


def test_a_valid_file_renders_examples_and_literal_braces(tmp_path):
    template = PromptTemplate.from_file(write_prompt(tmp_path), MODELS)
    prompt = template.render(passage="P")
    assert prompt.user == 'Passage:\nP\nJSON like {"a": 1}'
    assert "Input:\nPassage:\nInvented (2001). We propose Foo on Bar.\n" in prompt.system


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"system": None}, "system"),
        ({"user": "Passage: {passage} and {section}"}, "unknown \\['section'\\]"),
        ({"fields": {"passage": "x", "query": "y"}}, "missing \\['query'\\]"),
        ({"output": "NoSuchModel"}, "output model 'NoSuchModel' is not one of this stage's models: PaperFacts"),
        ({"output": "strata.llm.check:PaperFacts"}, "expected a model's class name"),
        ({"examples": [{"input": {"passage": "x"}, "output": {"title": "t"}}]}, "example 1 output"),
        ({"examples": [{"input": {"text": "x"}, "output": {}}]}, "inputs of example 1"),
        ({"user": "{0}"}, "plain names"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_broken_prompt_files_fail_at_load_naming_the_problem(tmp_path, changes, message):
    path = write_prompt(tmp_path, **changes)
    with pytest.raises(PromptError, match=message):
        PromptTemplate.from_file(path, MODELS)


def test_registry_reports_every_broken_file_and_the_file_name(tmp_path):
    write_prompt(tmp_path, name="good")
    write_prompt(tmp_path, name="bad", system=None)
    (tmp_path / "mismatch.yaml").write_text(yaml.safe_dump({**VALID, "name": "other"}))
    with pytest.raises(PromptError) as error:
        PromptRegistry.from_directory(tmp_path, [PaperFacts])
    assert "bad.yaml" in str(error.value) and "mismatch" in str(error.value) and "good" not in str(error.value)


def test_a_registry_refuses_models_that_are_not_pydantic_or_that_no_prompt_answers_in(tmp_path):
    class Unused(BaseModel):
        note: str

    write_prompt(tmp_path)
    with pytest.raises(PromptError, match="not a pydantic model"):
        PromptRegistry.from_directory(tmp_path, [PaperFacts, dict])  # type: ignore[list-item]
    with pytest.raises(PromptError, match="no prompt answers in Unused"):
        PromptRegistry.from_directory(tmp_path, [PaperFacts, Unused])


def test_rendering_with_missing_or_extra_values_is_an_error(tmp_path):
    registry = PromptRegistry.from_directory(write_prompt(tmp_path).parent, [PaperFacts])
    with pytest.raises(PromptError, match="missing \\['passage'\\]"):
        registry.render("toy")
    with pytest.raises(PromptError, match="unknown \\['other'\\]"):
        registry.render("toy", passage="p", other="o")
    with pytest.raises(PromptError, match="no prompt named 'nope'; known: toy"):
        registry.get("nope")
