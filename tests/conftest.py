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
