import pytest
from pydantic import ValidationError

from strata.cli import build_parser, settings_fields, settings_from_args
from strata.config import Settings


def test_defaults_need_no_configuration():
    settings = Settings.load()
    assert settings.search.rrf_k == 60 and settings.llm.backend == "embedded"


def test_every_settings_field_has_a_description():
    missing = [name for name, field in settings_fields(Settings) if not field.description]
    assert missing == []


def test_environment_beats_defaults_and_overrides_beat_environment(monkeypatch):
    monkeypatch.setenv("STRATA_SEARCH__RRF_K", "30")
    assert Settings.load().search.rrf_k == 30
    assert Settings.load(overrides={"search.rrf_k": 7}).search.rrf_k == 7


def test_unknown_setting_is_rejected():
    with pytest.raises(ValidationError):
        Settings.load(overrides={"search.no_such_field": 1})


def test_unknown_preset_names_the_available_ones():
    with pytest.raises(ValueError, match="unknown preset"):
        Settings.load(preset="does-not-exist")


def test_cli_flags_are_derived_from_the_settings_tree():
    args = build_parser().parse_args(["search", "q", "--search.k", "3", "--parsing.chunking.max_words", "99"])
    settings = settings_from_args(args)
    assert settings.search.k == 3 and settings.parsing.chunking.max_words == 99
