"""Prompts as files: `src/strata/prompts/NAME.yaml`, loaded and validated when the registry is built.

A prompt file holds:

    name: the file's stem
    description: what the prompt is for
    system: system text
    user: user template with named fields, e.g. "Passage:\\n{passage}" (literal braces doubled: {{ }})
    fields: {field name: description}, exactly the template's fields
    output: "package.module:PydanticModel", the expected answer; its JSON schema constrains decoding
    examples: synthetic worked examples [{input: {field: value}, output: {...}}], shown in the system message

Everything is checked at load time (missing keys, template fields, the output model, every example), so a broken
prompt stops start-up instead of failing mid-run. No conversation history is ever sent: a rendered prompt is one
system message and one user message.
"""

from __future__ import annotations

import functools
import importlib
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from strata.llm.errors import PromptError

PROMPT_DIR = Path(__file__).resolve().parents[1] / "prompts"


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
    output: str = Field(description="'package.module:Model' reference to the pydantic model of the answer")
    examples: list[PromptExample] = Field(default_factory=list)

    @field_validator("output")
    @classmethod
    def _is_reference(cls, value: str) -> str:
        if value.count(":") != 1:
            raise ValueError(f"expected 'package.module:Model', got {value!r}")
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
    def from_file(cls, path: Path) -> PromptTemplate:
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
            output_model=_import_model(spec.output, path),
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


def _import_model(reference: str, path: Path) -> type[BaseModel]:
    module_name, _, attribute = reference.partition(":")
    try:
        model = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise PromptError(f"prompt file {path}: cannot import output model {reference!r}: {error}") from error
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise PromptError(f"prompt file {path}: output {reference!r} is not a pydantic model")
    return model


class PromptRegistry:
    """All prompt templates by name."""

    def __init__(self, templates: Mapping[str, PromptTemplate]) -> None:
        self._templates = dict(templates)

    @classmethod
    def from_directories(cls, *directories: Path) -> PromptRegistry:
        """Load every *.yaml; all broken files are reported together in one PromptError."""
        templates: dict[str, PromptTemplate] = {}
        problems: list[str] = []
        for directory in directories:
            for path in sorted(directory.glob("*.yaml")):
                try:
                    template = PromptTemplate.from_file(path)
                except PromptError as error:
                    problems.append(str(error))
                    continue
                if template.name in templates:
                    problems.append(
                        f"prompt {template.name!r} defined twice: {templates[template.name].source}, {path}"
                    )
                templates[template.name] = template
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


@functools.cache
def prompt_registry() -> PromptRegistry:
    """The packaged prompts, loaded once; call it at start-up so broken prompt files fail early."""
    return PromptRegistry.from_directories(PROMPT_DIR)
