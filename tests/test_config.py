from pathlib import Path

import pytest

from strata.cli import build_parser, settings_from_args
from strata.config import Settings, TocSettings, settings_fields


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
    with pytest.raises(ValueError, match="unknown setting 'search.no_such_field'"):
        Settings.load(overrides={"search.no_such_field": 1})


def test_unknown_preset_names_the_available_ones():
    with pytest.raises(ValueError, match="unknown preset"):
        Settings.load(preset="does-not-exist")


def test_cli_flags_are_derived_from_the_settings_tree():
    args = build_parser().parse_args(["search", "q", "--search.k", "3", "--parsing.chunking.max_words", "99"])
    settings = settings_from_args(args)
    assert settings.search.k == 3 and settings.parsing.chunking.max_words == 99


# Bad input gets a clear error naming it, not a traceback or a silent default.


@pytest.mark.parametrize("text", ["search: [\n", "- a list\n", "just text\n"])
def test_a_malformed_preset_file_is_a_clear_error_naming_it(tmp_path, text):
    preset = tmp_path / "mine.yaml"
    preset.write_text(text)
    with pytest.raises(ValueError, match=f"preset {preset}"):
        Settings.load(preset=str(preset))


def test_an_unknown_setting_names_where_it_came_from_and_the_close_one(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"unknown setting 'search.dpeth'.*did you mean 'search.depth'"):
        Settings.load(overrides={"search.dpeth": 5})
    preset = tmp_path / "mine.yaml"
    preset.write_text("serach:\n  depth: 5\n")
    with pytest.raises(ValueError, match=rf"'serach.depth' in preset {preset}.*did you mean 'search.depth'"):
        Settings.load(preset=str(preset))
    monkeypatch.setenv("STRATA_INDEX__EMBEDDING_MODEL", "x")
    with pytest.raises(ValueError, match=r"STRATA_INDEX__EMBEDDING_MODEL.*did you mean 'index.embedding.model'"):
        Settings.load()


def test_a_variable_with_single_underscores_is_not_silently_ignored(monkeypatch):
    monkeypatch.setenv("STRATA_SCREENSHOT_DIR", "/tmp/x")  # not a setting's name: none of Strata's business
    Settings.load()
    monkeypatch.setenv("STRATA_STORE_HOME", "/tmp/elsewhere")
    with pytest.raises(ValueError, match="STRATA_STORE_HOME.*STRATA_STORE__HOME"):
        Settings.load()


def test_a_home_folder_in_a_path_setting_is_expanded(monkeypatch):
    # Unexpanded, '~/corpus' made a folder named '~' in the working directory.
    assert Settings.load(overrides={"store.home": "~/corpus"}).store.home == Path.home() / "corpus"
    monkeypatch.setenv("STRATA_RERANK__FEATURES_PATH", "~/features.sqlite3")
    assert Settings.load().rerank.features_path == Path.home() / "features.sqlite3"
    # A default keeps its '~' (expanded where used): settings sent to a Ray worker name the worker's own home.
    assert str(TocSettings().question_cache).startswith("~")


def test_null_in_a_flag_or_an_environment_variable_unsets_an_optional_setting(monkeypatch):
    args = build_parser().parse_args(["search", "q", "--llm.decide_model", "null", "--llm.n_threads", "null"])
    settings = settings_from_args(args)
    assert settings.llm.decide_model is None and settings.llm.n_threads is None  # not the text 'null'
    monkeypatch.setenv("STRATA_LLM__DECIDE_MODEL", "null")
    assert Settings.load().llm.decide_model is None
