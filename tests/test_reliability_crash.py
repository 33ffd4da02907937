"""Crash safety: `strata ingest` killed with SIGKILL at seeded random moments loses nothing and duplicates nothing;
index updates are atomic for readers, also when the writer is killed mid-sync.

CI runs a few trials; `python benchmarks/reliability.py crash` runs the full count.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuzz.crash import clean_ingest, problems_against, run_trial, small_encoder, snapshot, trial_settings
from strata.documents.parsers import iter_papers
from strata.index import CorpusIndex
from strata.index.bm25 import BM25Index
from strata.index.dense import DenseIndex
from strata.store import open_store

# The two quickest LitQA2 PDFs to parse (84 and 132 chunks).
CI_PDFS = ["10.1038%2Fs41467-024-44806-1.pdf", "10.1101%2F2024.02.13.580051.pdf"]
SEED = 10


def pdf_folder(tmp: Path, shared_data: Path, names: list[str]) -> Path:
    """A folder of links to real PDFs (read in place, never copied)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in names:
        (tmp / name).symlink_to(shared_data / "litqa2" / "pdfs" / name)
    return tmp


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return small_encoder(tmp_path_factory.mktemp("encoder") / "minilm-1layer")


def assert_trials_sound(results) -> None:
    for result in results:
        assert result.final_returncode == 0, result
        assert result.papers_lost == 0, result
        assert result.problems == [], result
    assert sum(len(result.kills) for result in results) >= len(results)  # faults were really injected


def test_ingest_killed_at_random_moments_bm25_only(tmp_path, shared_data):
    source = pdf_folder(tmp_path / "pdfs", shared_data, CI_PDFS)
    clean, seconds = clean_ingest(source, tmp_path / "clean", None, tmp_path / "clean.log")
    # reference-list entries are stored, not indexed
    assert len(clean.papers) == 2 and clean.bm25_chunks == len(clean.indexed_rowids) > 0
    assert 0 < len(clean.indexed_rowids) < clean.store_chunks
    results = [
        run_trial(trial, source, tmp_path / f"trial{trial}", None, clean, seconds, kills=2, seed=SEED,
                  log=tmp_path / f"trial{trial}.log")
        for trial in range(2)
    ]  # fmt: skip
    assert_trials_sound(results)


def test_ingest_killed_at_random_moments_with_dense(tmp_path, shared_data, encoder):
    source = pdf_folder(tmp_path / "pdfs", shared_data, CI_PDFS[:1])
    clean, seconds = clean_ingest(source, tmp_path / "clean", encoder, tmp_path / "clean.log")
    assert clean.dense_rowids == clean.indexed_rowids
    result = run_trial(0, source, tmp_path / "trial", encoder, clean, seconds, kills=1, seed=SEED,
                       log=tmp_path / "trial.log")  # fmt: skip
    assert_trials_sound([result])


def test_comparison_catches_a_duplicated_and_a_lost_document(tmp_path, shared_data):
    """The trial check itself can fail: a chunk indexed twice or a paper missing is reported."""
    source = pdf_folder(tmp_path / "pdfs", shared_data, CI_PDFS[:1])
    clean, _ = clean_ingest(source, tmp_path / "clean", None, tmp_path / "clean.log")
    doubled = clean.model_copy(update={"bm25_rowids": clean.bm25_rowids + clean.bm25_rowids[:1]})
    assert any("BM25" in problem for problem in problems_against(clean, doubled, dense=False))
    emptied = clean.model_copy(update={"papers": {}})
    assert any("missing" in problem for problem in problems_against(clean, emptied, dense=False))


# Atomic index updates: a sync of new chunks runs in another process while this one reads.

SYNC_SCRIPT = """
import sys
from strata.config import Settings
from strata.index import CorpusIndex
from strata.store import open_store
settings = Settings.load(overrides={"store.home": sys.argv[1], "index.embedding.model": sys.argv[2]})
with open_store(settings) as store:
    CorpusIndex(store, settings).sync(lambda name, done, expected: print(name, done, flush=True))
print("synced", flush=True)
"""


def beir_slice(shared_data: Path, path: Path, start: int, stop: int) -> Path:
    lines = (shared_data / "scifact" / "beir" / "corpus.jsonl").read_text().splitlines()[start:stop]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def half_synced(tmp_path, shared_data, encoder):
    """A store whose indices hold 100 SciFact abstracts and whose database holds 300 more, not yet indexed (more
    than one dense batch)."""
    settings = trial_settings(tmp_path / "home", encoder)
    first = beir_slice(shared_data, tmp_path / "first.jsonl", 0, 100)
    second = beir_slice(shared_data, tmp_path / "second.jsonl", 100, 400)
    with open_store(settings) as store:
        for paper in iter_papers(first, settings.parsing):
            store.put_paper(paper, "first")
        CorpusIndex(store, settings).sync()
        old = store.max_chunk_rowid()
        for paper in iter_papers(second, settings.parsing):
            store.put_paper(paper, "second")
        new = store.max_chunk_rowid()
    return settings, old, new


def start_sync(settings, encoder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SYNC_SCRIPT, str(settings.store.home), str(encoder)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def read_consistently(settings, sizes: set[int], readers: tuple[BM25Index, DenseIndex] | None = None) -> None:
    """Open the indices (fresh, or reuse long-lived readers), check each holds one of `sizes` and answers searches
    with live chunks only."""
    folder = settings.store.home / "index"
    bm25, dense = readers or (BM25Index(folder / "bm25"), DenseIndex(folder / "dense", settings.index))
    assert len(bm25) in sizes and len(dense) in sizes
    with open_store(settings) as store:
        for hits in (bm25.search("cell", 20), dense.search_text("cell", 20)):
            assert hits and set(store.get_chunks([hit.rowid for hit in hits])) == {hit.rowid for hit in hits}


def test_readers_see_the_old_index_or_the_new_one_while_a_sync_runs(half_synced, encoder):
    settings, old, new = half_synced
    folder = settings.store.home / "index"
    long_lived = (BM25Index(folder / "bm25"), DenseIndex(folder / "dense", settings.index))
    sync = start_sync(settings, encoder)
    reads = 0
    while sync.poll() is None:
        read_consistently(settings, {old, new})
        read_consistently(settings, {old, new}, long_lived)
        reads += 1
        time.sleep(0.2)  # leave the CPU to the sync; reading flat out only slows it down
    assert sync.returncode == 0 and "synced" in sync.stdout.read()
    assert reads >= 2
    read_consistently(settings, {new}, long_lived)  # long-lived readers pick up the new commit


def test_a_sync_killed_mid_write_leaves_the_previous_index_readable(half_synced, encoder):
    settings, old, new = half_synced
    # Killed once while BM25 writes (its documents added, commit pending), once while dense embeds (BM25 done).
    for killed_in in ("bm25", "dense"):
        sync = start_sync(settings, encoder)
        for line in sync.stdout:
            if line.startswith(killed_in):
                sync.send_signal(signal.SIGKILL)
                break
        sync.wait()
        assert sync.returncode == -signal.SIGKILL, f"the sync finished before it could be killed in {killed_in}"
        read_consistently(settings, {old, new})
    with open_store(settings) as store:
        report = CorpusIndex(store, settings).sync()  # the rerun completes what the killed ones started
    assert report.bm25_size == report.dense_size == new
    after = snapshot(settings, with_searches=False)
    assert after.bm25_rowids == after.dense_rowids == after.store_rowids
