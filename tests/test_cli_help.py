"""`strata CMD --help` fits a screen and names the settings sections CMD reads; `--help-all` lists every flag; every
command still accepts every setting flag."""

import argparse
from collections import Counter
from collections.abc import Iterator

import pytest

from strata.cli import build_parser, settings_from_args
from strata.config import Settings, settings_fields

FLAGS = [f"--{dotted}" for dotted, _ in settings_fields(Settings)]
FLAGS_PER_SECTION = Counter(flag.removeprefix("--").split(".")[0] for flag in FLAGS)


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The argv prefix of every runnable command (`search`, `eval qa`, `llm check`, ...)."""
    groups = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not groups:
        yield prefix
    for group in groups:
        for name, sub in group.choices.items():
            yield from leaf_commands(sub, (*prefix, name))


COMMANDS = list(leaf_commands(build_parser()))


def help_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal; line counts are for an 80-column screen


def test_the_commands_are_found() -> None:
    assert {("search",), ("ask",), ("eval", "qa"), ("llm", "check")} <= set(COMMANDS) and len(COMMANDS) > 15


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_fits_a_screen_and_names_no_setting_flag(command: tuple[str, ...], capsys) -> None:
    text = help_text([*command, "--help"], capsys)
    assert len(text.splitlines()) <= 40, text
    assert "--preset" in text and "--help-all" in text
    assert not [flag for flag in FLAGS if flag in text.split()]


def test_help_lists_the_sections_the_command_reads_with_their_flag_counts(capsys) -> None:
    text = " ".join(help_text(["search", "--help"], capsys).split())
    for section in ("store", "index", "search", "rerank"):
        assert f"--{section}.* ({FLAGS_PER_SECTION[section]})" in text
    assert "--toc.*" not in text and "--serve.*" not in text
    assert "--store.* (" in " ".join(help_text(["show", "--help"], capsys).split())


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_all_lists_every_setting_flag(command: tuple[str, ...], capsys) -> None:
    words = help_text([*command, "--help-all"], capsys).split()
    assert [flag for flag in FLAGS if flag not in words] == []


def test_help_all_shows_descriptions_and_defaults_the_read_sections_first(capsys) -> None:
    text = help_text(["search", "--help-all"], capsys)
    flat = " ".join(text.split())
    assert "--search.k VALUE Papers returned (default: 10)" in flat
    assert flat.index("--search.k") < flat.index("--toc.top_k")
    assert "(accepted, not read by this command)" in flat


def test_every_command_accepts_flags_of_sections_it_does_not_read() -> None:
    args = build_parser().parse_args(["search", "q", "--llm.backend", "x", "--serve.port", "9"])
    assert (vars(args)["setting:llm.backend"], vars(args)["setting:serve.port"]) == ("x", "9")
    args = build_parser().parse_args(["stats", "--toc.top_k", "5", "--preset", "embedded"])
    settings = settings_from_args(args)
    assert settings.toc.top_k == 5
