"""Two processes on one store home: a busy lock is waited on for a bounded time, then fails naming its holder."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strata.config import Settings
from strata.documents.builder import PaperBuilder
from strata.documents.model import ContentType
from strata.index import CorpusIndex
from strata.store import StoreBusyError, open_store

HOLD_LOCK = """
import sys, time
from pathlib import Path
from strata.store.locking import hold_lock
with hold_lock(Path(sys.argv[1]), 5, "test holder"):
    print("held", flush=True)
    time.sleep(120)
"""


def settings_for(home: Path, lock_timeout_s: float) -> Settings:
    return Settings.load(
        overrides={"store.home": str(home), "store.lock_timeout_s": lock_timeout_s, "index.dense": False}
    )


@pytest.fixture()
def lock_holder():
    """Start a process holding a lock file; yields (start, processes) and kills what it started."""
    started: list[subprocess.Popen] = []

    def start(lock_path: Path) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(lock_path)], stdout=subprocess.PIPE, text=True
        )
        started.append(process)
        assert process.stdout.readline().strip() == "held"
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_index_sync_behind_a_held_lock_fails_in_bounded_time_naming_the_holder(tmp_path, lock_holder, caplog):
    settings = settings_for(tmp_path / "home", lock_timeout_s=1.0)
    lock_path = settings.store.home / "index" / "sync.lock"
    holder = lock_holder(lock_path)
    with open_store(settings) as store:
        started = time.monotonic()
        with pytest.raises(StoreBusyError) as raised:
            CorpusIndex(store, settings).sync()
    waited = time.monotonic() - started
    assert 1.0 <= waited < 5.0
    message = str(raised.value)
    assert str(lock_path) in message and f"pid {holder.pid}" in message and "test holder" in message
    # the wait itself was announced, not silent
    assert any("waiting up to" in record.getMessage() for record in caplog.records)


def test_a_second_ingest_reports_the_busy_index_and_keeps_its_papers(tmp_path, lock_holder, shared_data):
    home = tmp_path / "home"
    holder = lock_holder(home / "index" / "sync.lock")
    source = shared_data / "s2orc-doc2json-samples" / "tests" / "pdf" / "N18-3011.json"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "strata.cli", "ingest", str(source), "--quiet", "--store.home", str(home),
         "--store.lock_timeout_s", "1", "--index.dense", "false"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"pid {holder.pid}" in result.stderr and "sync.lock" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60
    with open_store(settings_for(home, 1.0)) as store:
        assert store.stats().papers == 1  # committed before the index sync gave up; a rerun only syncs


def test_a_killed_holder_releases_the_lock_at_once(tmp_path, lock_holder):
    settings = settings_for(tmp_path / "home", lock_timeout_s=2.0)
    holder = lock_holder(settings.store.home / "index" / "sync.lock")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with open_store(settings) as store:
        started = time.monotonic()
        CorpusIndex(store, settings).sync()
    assert time.monotonic() - started < 1.5


def test_a_write_behind_another_connections_transaction_fails_clearly(tmp_path):
    path = tmp_path / "corpus.sqlite3"
    builder = PaperBuilder("p1", "test")
    builder.open_section("Intro", 1)
    builder.add_block("Some text about locks.", ContentType.TEXT)
    paper = builder.build(title="A paper")
    with open_store(settings_for(tmp_path, 1.0)):
        pass
    from strata.store.sqlite import CorpusStore

    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with CorpusStore(path, busy_timeout_s=0.5) as store:
            started = time.monotonic()
            with pytest.raises(StoreBusyError) as raised:
                store.put_paper(paper, "sha")
            assert time.monotonic() - started < 3
            assert str(path) in str(raised.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    with CorpusStore(path) as store:
        store.put_paper(paper, "sha")  # once the other writer is gone, the same write goes through
        assert store.paper_ids() == ["p1"]


def test_the_holder_record_names_pid_purpose_and_command(tmp_path, lock_holder):
    lock_path = tmp_path / "x.lock"
    holder = lock_holder(lock_path)
    record = json.loads(lock_path.read_text())
    assert record["pid"] == holder.pid and record["purpose"] == "test holder" and "-c" in record["command"]
