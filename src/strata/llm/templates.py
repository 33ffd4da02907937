"""Prompts as files, kept by the stage that owns them (`strata/read/prompts/NAME.yaml`, ...) and loaded by it:
`PromptRegistry.from_directory(folder, models)` with the pydantic models its prompts answer in. The LLM layer imports
no stage: a stage hands over its own models.

A prompt file holds:

    name: the file's stem
    description: what the prompt is for
    system: system text
    user: user template with named fields, e.g. "Passage:\\n{passage}" (literal braces doubled: {{ }})
    fields: {field name: description}, exactly the template's fields
    output: the name of one of the stage's models, the expected answer; its JSON schema constrains decoding
    examples: synthetic worked examples [{input: {field: value}, output: {...}}], shown in the system message

Everything is checked at load time (missing keys, template fields, the output model, every example, models no prompt
answers in), so a broken prompt stops start-up instead of failing mid-run. No conversation history is ever sent: a
rendered prompt is one system message and one user message.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from strata.llm.errors import PromptError


class Prompt(BaseModel):
    """A rendered prompt: what one call sends, plus the model its answer must parse into."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Template name, recorded in traces")
    system: str
    user: str
    output_model: type[BaseModel] | None = Field(default=None, description="Expected answer, unless given per call")


class PromptExample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: dict[str, str]
    output: dict[str, Any]

    @field_validator("input")
    @classmethod
    def _strip(cls, values: dict[str, str]) -> dict[str, str]:
        # YAML block scalars end in a newline that would otherwise leak into the rendered example.
        return {name: value.strip() for name, value in values.items()}


class PromptFile(BaseModel):
    """The YAML file as written."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    system: str
    user: str
    fields: dict[str, str]
    output: str = Field(description="Name of the pydantic model of the answer, one of the loading stage's models")
    examples: list[PromptExample] = Field(default_factory=list)

    @field_validator("output")
    @classmethod
    def _is_name(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"expected a model's class name, got {value!r}")
        return value


class PromptTemplate(BaseModel):
    """A validated prompt file, ready to render."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    system: str
    user: str
    fields: dict[str, str]
    output_model: type[BaseModel]
    examples: tuple[PromptExample, ...]
    source: Path

    @classmethod
    def from_file(cls, path: Path, models: Mapping[str, type[BaseModel]]) -> PromptTemplate:
        """The prompt in `path`, whose `output` names one of `models` (by class name)."""
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            spec = PromptFile.model_validate(raw)
        except (OSError, yaml.YAMLError, ValidationError) as error:
            raise PromptError(f"prompt file {path}: {error}") from error
        if spec.name != path.stem:
            raise PromptError(f"prompt file {path}: name {spec.name!r} must equal the file name {path.stem!r}")
        template = cls(
            name=spec.name,
            description=spec.description,
            system=spec.system.strip(),
            user=spec.user.strip(),
            fields=spec.fields,
            output_model=_output_model(spec.output, models, path),
            examples=tuple(spec.examples),
            source=path,
        )
        template._check(path)
        return template

    def render(self, **values: str) -> Prompt:
        """The prompt for these field values; every declared field must be given, and no other."""
        _check_fields(self.name, set(self.fields), set(values), "values")
        return Prompt(
            name=self.name,
            system=self._system_with_examples(),
            user=self.user.format(**values),
            output_model=self.output_model,
        )

    def _system_with_examples(self) -> str:
        blocks = [self.system]
        for number, example in enumerate(self.examples, start=1):
            answer = self.output_model.model_validate(example.output).model_dump_json()
            blocks.append(f"Example {number}.\nInput:\n{self.user.format(**example.input)}\nOutput:\n{answer}")
        return "\n\n".join(blocks)

    def _check(self, path: Path) -> None:
        placeholders = template_fields(self.user, path)
        _check_fields(self.name, set(self.fields), placeholders, f"placeholders of the user template in {path}")
        for number, example in enumerate(self.examples, start=1):
            _check_fields(self.name, set(self.fields), set(example.input), f"inputs of example {number} in {path}")
            try:
                self.output_model.model_validate(example.output)
            except ValidationError as error:
                raise PromptError(
                    f"prompt file {path}: example {number} output does not fit the model: {error}"
                ) from error


def template_fields(template: str, path: Path | None = None) -> set[str]:
    """Named fields of a str.format template; positional or attribute fields are errors."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise PromptError(f"prompt {path or ''}: bad user template: {error}") from error
    names = {field for _, field, _, _ in parsed if field is not None}
    bad = sorted(name for name in names if not name.isidentifier())
    if bad:
        raise PromptError(f"prompt {path or ''}: template fields must be plain names, got {bad}")
    return names


def _check_fields(prompt: str, declared: set[str], given: set[str], what: str) -> None:
    missing, unknown = sorted(declared - given), sorted(given - declared)
    if missing or unknown:
        raise PromptError(
            f"prompt {prompt!r}: {what} do not match its declared fields {sorted(declared)}"
            f"{f'; missing {missing}' if missing else ''}{f'; unknown {unknown}' if unknown else ''}"
        )


def _output_model(name: str, models: Mapping[str, type[BaseModel]], path: Path) -> type[BaseModel]:
    try:
        return models[name]
    except KeyError:
        raise PromptError(
            f"prompt file {path}: output model {name!r} is not one of this stage's models: {', '.join(sorted(models))}"
        ) from None


def _models_by_name(models: Iterable[type[BaseModel]], directory: Path) -> dict[str, type[BaseModel]]:
    by_name: dict[str, type[BaseModel]] = {}
    for model in models:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise PromptError(f"prompts in {directory}: output model {model!r} is not a pydantic model")
        by_name[model.__name__] = model
    return by_name


class PromptRegistry:
    """All prompt templates by name."""

    def __init__(self, templates: Mapping[str, PromptTemplate]) -> None:
        self._templates = dict(templates)

    @classmethod
    def from_directory(cls, directory: Path, models: Iterable[type[BaseModel]]) -> PromptRegistry:
        """Load every *.yaml of a stage's folder, answering in the stage's `models`; all broken files (and models no
        prompt answers in) are reported together in one PromptError."""
        by_name = _models_by_name(models, directory)
        templates: dict[str, PromptTemplate] = {}
        problems: list[str] = []
        for path in sorted(directory.glob("*.yaml")):
            try:
                templates[path.stem] = PromptTemplate.from_file(path, by_name)
            except PromptError as error:
                problems.append(str(error))
        unused = sorted(set(by_name) - {template.output_model.__name__ for template in templates.values()})
        if unused and not problems:  # a broken file's model would look unused
            problems.append(f"prompts in {directory}: no prompt answers in {', '.join(unused)}")
        if problems:
            raise PromptError("\n".join(problems))
        return cls(templates)

    def get(self, name: str) -> PromptTemplate:
        try:
            return self._templates[name]
        except KeyError:
            raise PromptError(f"no prompt named {name!r}; known: {', '.join(self.names()) or 'none'}") from None

    def render(self, name: str, **values: str) -> Prompt:
        return self.get(name).render(**values)

    def names(self) -> list[str]:
        return sorted(self._templates)

    def __contains__(self, name: object) -> bool:
        return name in self._templates
