"""Crash trials: SIGKILL `strata ingest` at seeded random moments, rerun it, and compare with a clean ingest.

A trial kills the same ingest several times in a row (each rerun resumes from what the last one committed), then lets
it finish. After each kill the papers already committed must still be there; at the end the store and every index
must hold each document exactly once and answer searches exactly as a store ingested without interruption.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from strata.config import Settings
from strata.index import is_indexed
from strata.index.bm25 import BM25Index
from strata.index.dense import DenseIndex
from strata.store import open_store

QUERIES = [
    "gene expression in cells",
    "statistical analysis methods",
    "protein binding structure",
    "mouse model experiments",
    "sequencing data analysis",
]
SEARCH_DEPTH = 10


def small_encoder(folder: Path) -> Path:
    """all-MiniLM-L6-v2 cut to its first layer and 64 tokens, saved as a local sentence-transformers folder.

    The dense index code runs unchanged at a fraction of the cost, which crash trials need on a shared 2-core machine
    (they test index writes and recovery, not embedding quality).
    """
    if (folder / "modules.json").is_file():
        return folder
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    from strata.encoders.embedder import resolve_model_path

    model = SentenceTransformer(
        str(resolve_model_path("packaged:all-MiniLM-L6-v2")), device="cpu", local_files_only=True
    )
    bert = model[0].auto_model
    bert.encoder.layer = bert.encoder.layer[:1]
    bert.config.num_hidden_layers = 1
    model.max_seq_length = 64
    model.save(str(folder))
    return folder


def trial_settings(home: Path, encoder: Path | None) -> Settings:
    dense = {"index.dense": True, "index.embedding.model": str(encoder)} if encoder else {"index.dense": False}
    return Settings.load(overrides={"store.home": str(home), **dense})


def ingest_command(source: Path, home: Path, encoder: Path | None) -> list[str]:
    dense = ["--index.dense", "true", "--index.embedding.model", str(encoder)] if encoder else ["--index.dense", "no"]
    return [sys.executable, "-m", "strata.cli", "ingest", str(source), "--quiet", "--store.home", str(home), *dense]


class Snapshot(BaseModel):
    """What a store and its indices hold, in terms that do not depend on row ids."""

    papers: dict[str, str] = Field(description="paper id -> digest of the stored paper (text, chunks, references)")
    store_chunks: int
    bm25_chunks: int = Field(description="Documents in the BM25 index")
    bm25_rowids: list[int] = Field(description="BM25 row ids of the stored papers' chunks, with repeats")
    dense_rowids: list[int] = Field(description="Dense index ids, with repeats (empty when dense is off)")
    store_rowids: list[int]
    indexed_rowids: list[int] = Field(description="Row ids of the stored chunks the indices should hold")
    searches: dict[str, list[tuple[str, int, float]]] = Field(
        description="'bm25:query' / 'dense:query' -> (paper id, chunk ordinal, rounded score), best first"
    )


def snapshot(settings: Settings, with_searches: bool) -> Snapshot:
    folder = settings.store.home / "index"
    bm25 = BM25Index(folder / "bm25")
    dense = DenseIndex(folder / "dense", settings.index) if settings.index.dense else None
    with open_store(settings) as store:
        ids = store.paper_ids()
        papers = {pid: _digest(store.get_paper(pid).model_dump_json()) for pid in ids}
        stored = store.get_chunks(range(1, store.max_chunk_rowid() + 1))
        store_rowids = sorted(stored)
        indexed_rowids = sorted(rowid for rowid, s in stored.items() if is_indexed(s.chunk, settings.index))
        dense_rowids = sorted(hit.rowid for hit in _all_dense(dense)) if dense else []
        searches: dict[str, list[tuple[str, int, float]]] = {}
        if with_searches:
            for query in QUERIES:
                searches[f"bm25:{query}"] = _named_hits(store, bm25.search(query, SEARCH_DEPTH))
                if dense:
                    searches[f"dense:{query}"] = _named_hits(store, dense.search_text(query, SEARCH_DEPTH))
        return Snapshot(
            papers=papers,
            store_chunks=len(store_rowids),
            bm25_chunks=len(bm25),
            bm25_rowids=bm25.rowids_of_papers(ids),
            dense_rowids=dense_rowids,
            store_rowids=store_rowids,
            indexed_rowids=indexed_rowids,
            searches=searches,
        )


def _all_dense(dense: DenseIndex) -> list:
    size = len(dense)
    if size == 0:
        return []
    probe = np.ones(dense.embedder.dimension, dtype=np.float32)
    return dense.search(probe / np.linalg.norm(probe), depth=size + 10)


def _named_hits(store, hits) -> list[tuple[str, int, float]]:
    chunks = store.get_chunks([hit.rowid for hit in hits])
    return [(chunks[h.rowid].chunk.paper_id, chunks[h.rowid].chunk.ordinal, round(h.score, 4)) for h in hits]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def problems_against(clean: Snapshot, final: Snapshot, dense: bool) -> list[str]:
    """Every way `final` differs from the clean ingest or holds a chunk other than exactly once; empty when sound."""
    found: list[str] = []
    if final.papers != clean.papers:
        missing = sorted(set(clean.papers) - set(final.papers))
        extra = sorted(set(final.papers) - set(clean.papers))
        changed = sorted(p for p in set(clean.papers) & set(final.papers) if clean.papers[p] != final.papers[p])
        found.append(f"papers differ: missing {missing}, extra {extra}, changed {changed}")
    if final.store_chunks != clean.store_chunks:
        found.append(f"store holds {final.store_chunks} chunks, clean ingest {clean.store_chunks}")
    indexed = len(final.indexed_rowids)
    if final.bm25_rowids != final.indexed_rowids or final.bm25_chunks != indexed:
        found.append(
            f"BM25 holds {final.bm25_chunks} documents ({len(final.bm25_rowids)} of stored papers, "
            f"{len(set(final.bm25_rowids))} distinct) for {indexed} indexed chunks"
        )
    if dense and final.dense_rowids != final.indexed_rowids:
        found.append(
            f"dense index holds {len(final.dense_rowids)} vectors ({len(set(final.dense_rowids))} distinct) "
            f"for {indexed} indexed chunks"
        )
    for key, expected in clean.searches.items():
        if final.searches.get(key) != expected:
            found.append(f"search {key!r} differs from the clean ingest")
    return found


class KillRecord(BaseModel):
    after_s: float = Field(description="Seconds after the run started")
    papers_committed: int
    bm25_chunks: int
    dense_chunks: int


class TrialResult(BaseModel):
    trial: int
    dense: bool
    kills: list[KillRecord]
    runs_finished_before_their_kill: int
    final_returncode: int
    papers_lost: int = Field(description="Committed papers (seen after a kill) missing later")
    problems: list[str]


def run_trial(
    trial: int,
    source: Path,
    home: Path,
    encoder: Path | None,
    clean: Snapshot,
    clean_seconds: float,
    kills: int,
    seed: int,
    log: Path,
) -> TrialResult:
    """Kill the ingest of `source` into `home` `kills` times at seeded random moments, then let it finish."""
    rng = random.Random(seed * 1000 + trial)
    settings = trial_settings(home, encoder)
    command = ingest_command(source, home, encoder)
    records: list[KillRecord] = []
    committed: dict[str, str] = {}
    finished_early = 0
    lost: set[str] = set()
    for _ in range(kills):
        delay = rng.uniform(0.0, clean_seconds)
        with log.open("a") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            try:
                process.wait(timeout=delay)
                finished_early += 1
                continue
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
        seen = snapshot(settings, with_searches=False)
        lost |= {pid for pid, digest in committed.items() if seen.papers.get(pid) != digest}
        committed.update(seen.papers)
        records.append(
            KillRecord(
                after_s=round(delay, 2),
                papers_committed=len(seen.papers),
                bm25_chunks=seen.bm25_chunks,
                dense_chunks=len(seen.dense_rowids),
            )
        )
    with log.open("a") as out:
        returncode = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
    final = snapshot(settings, with_searches=True)
    lost |= {pid for pid, digest in committed.items() if final.papers.get(pid) != digest}
    problems = problems_against(clean, final, dense=encoder is not None)
    if returncode != 0:
        problems.append(f"the final rerun exited with {returncode}; see {log}")
    return TrialResult(
        trial=trial,
        dense=encoder is not None,
        kills=records,
        runs_finished_before_their_kill=finished_early,
        final_returncode=returncode,
        papers_lost=len(lost),
        problems=problems,
    )


def clean_ingest(source: Path, home: Path, encoder: Path | None, log: Path) -> tuple[Snapshot, float]:
    """A store ingested without interruption, and how long that took."""
    started = time.monotonic()
    with log.open("a") as out:
        subprocess.run(ingest_command(source, home, encoder), stdout=out, stderr=subprocess.STDOUT, check=True,
                       timeout=900)  # fmt: skip
    seconds = time.monotonic() - started
    return snapshot(trial_settings(home, encoder), with_searches=True), seconds
