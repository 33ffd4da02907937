"""Tests are hermetic (tests/conftest.py): the user's caches, the working directory's store and the caller's STRATA_*
variables reach no test, nor any process a test starts."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import REPO_ROOT, TEST_SWITCHES

from strata.config import SearchSettings, Settings

USER_CACHE = Path("~/.cache/strata").expanduser()
# What a user's shell might hold; set only for the pytest run started below.
USER_VARIABLES = {"STRATA_SEARCH__K": "7", "STRATA_LLM__CACHE_PATH": str(USER_CACHE / "llm-cache.sqlite")}


def settings_paths(settings: Settings) -> dict[str, Path]:
    return {
        "llm.cache_path": settings.llm.cache_path, "llm.model_dir": settings.llm.model_dir,
        "toc.question_cache": settings.toc.question_cache, "store.home": settings.store.home,
    }  # fmt: skip


def test_user_caches_and_the_store_home_resolve_to_a_temporary_folder():
    temporary = Path(tempfile.gettempdir()).resolve()
    for name, path in settings_paths(Settings.load()).items():
        resolved = path.expanduser().resolve()
        assert resolved.is_relative_to(temporary), (name, resolved)
        assert not resolved.is_relative_to(USER_CACHE.resolve()) and not resolved.is_relative_to(REPO_ROOT), name


def test_no_strata_variable_of_the_caller_reaches_a_test(hermetic_environment: dict[str, str]):
    strata = {name for name in os.environ if name.startswith("STRATA_") and not name.startswith(TEST_SWITCHES)}
    assert strata == {name for name in hermetic_environment if name.startswith("STRATA_")}
    assert Settings.load().search.k == SearchSettings().k
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_a_subprocess_of_a_test_sees_the_same_settings():
    script = "from strata.config import Settings; s = Settings.load(); print(s.llm.cache_path, s.store.home)"
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    settings = Settings.load()
    assert printed.split() == [str(settings.llm.cache_path), str(settings.store.home)]


def test_variables_set_before_pytest_starts_do_not_leak(tmp_path: Path):
    assert SearchSettings().k != int(USER_VARIABLES["STRATA_SEARCH__K"])  # else the leak would go unseen
    tests = [f"{__file__}::{test.__name__}" for test in (
        test_user_caches_and_the_store_home_resolve_to_a_temporary_folder,
        test_no_strata_variable_of_the_caller_reaches_a_test,
    )]  # fmt: skip
    # Its own basetemp: a new numbered folder in the shared one would prune those of concurrent runs.
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'run'}", *tests]
    result = subprocess.run(command, cwd=REPO_ROOT, env=os.environ | USER_VARIABLES, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout + result.stderr
