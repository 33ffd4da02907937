"""Ingest on Ray: parsing and chunking, then embedding, run as Ray Data pipelines; the results land in the same store
and indices as `strata.ingest.ingest`.

The same code runs on a local Ray instance (`address` None: `ray.init(num_cpus=...)` on this machine) and on a cluster
(`address` 'auto' or 'ray://host:10001'; every node needs Strata and the embedding model installed). Workers parse
files and embed chunk texts; the driver alone writes the store (one writer, as locally) and builds the indices from
the workers' vectors. Unchanged files are skipped exactly as by the local ingest.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from strata.config import Settings
from strata.documents.model import Paper
from strata.documents.parsers import ParseError, discover, iter_papers
from strata.index import CorpusIndex
from strata.index.dense import embedding_text
from strata.index.embedder import Embedder
from strata.ingest import FileOutcome, IngestReport, content_hash
from strata.store import AnyStore, open_store
from strata.store.sqlite import StoredChunk

LOCAL_CPUS = 2
EMBED_BATCH = 64


class _ParseFiles:
    """Ray Data batch function: file paths in, each file's papers (as JSON) or its error out."""

    def __init__(self, settings_json: str) -> None:
        self.settings = Settings.model_validate_json(settings_json)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        papers, errors = [], []
        for path in batch["path"]:
            try:
                parsed = list(iter_papers(Path(path), self.settings.parsing))
                papers.append([paper.model_dump_json() for paper in parsed])
                errors.append("")
            except (ParseError, OSError) as error:
                papers.append([])
                errors.append(error.reason if isinstance(error, ParseError) else f"{type(error).__name__}: {error}")
        return {"path": list(batch["path"]), "sha256": list(batch["sha256"]), "papers": papers, "error": errors}


class _EmbedTexts:
    """Ray Data actor: loads the encoder once, then embeds batches of chunk texts."""

    def __init__(self, settings_json: str) -> None:
        self.embedder = Embedder(Settings.model_validate_json(settings_json).index.embedding)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, object]:
        vectors = self.embedder.embed([str(text) for text in batch["text"]])
        return {"key": batch["key"], "vector": list(vectors)}


def ingest_with_ray(paths: Iterable[Path | str], settings: Settings, address: str | None = None) -> IngestReport:
    import ray

    started = time.perf_counter()
    ray.init(address=address, num_cpus=None if address else LOCAL_CPUS, include_dashboard=False,
             ignore_reinit_error=True, log_to_driver=False)
    try:
        with open_store(settings) as store:
            outcomes, stored_papers = _parse_and_store(store, discover(paths), settings)
            parse_seconds = time.perf_counter() - started
            resolved = store.resolve_references()
            index_started = time.perf_counter()
            index = CorpusIndex(store, settings)
            vectors = _embed(stored_papers, settings) if settings.index.dense else {}
            index.sync(vectors_of=_lookup(vectors, index))
    finally:
        if address is None:
            ray.shutdown()
    return IngestReport(files=outcomes, parse_seconds=parse_seconds,
                        index_seconds=time.perf_counter() - index_started, resolved_references=resolved)


def _parse_and_store(store: AnyStore, files: list[Path], settings: Settings) -> tuple[list[FileOutcome], list[Paper]]:
    import ray

    outcomes: dict[str, FileOutcome] = {}
    todo = []
    for path in files:
        key, digest = str(path.resolve()), content_hash(path)
        previous = store.file_record(key)
        if previous and previous.sha256 == digest and previous.status == "ok":
            outcomes[key] = FileOutcome(path=key, status="skipped")
        else:
            todo.append({"path": key, "sha256": digest})
    stored: list[Paper] = []
    if todo:
        parsed = ray.data.from_items(todo).map_batches(
            _ParseFiles, fn_constructor_args=(settings.model_dump_json(),), batch_size=1, concurrency=_cpus()
        )
        for row in parsed.iter_rows():  # streamed: the driver holds one file's papers at a time
            outcomes[row["path"]] = _store_row(store, row, stored)
    return [outcomes[str(path.resolve())] for path in files], stored


def _store_row(store: AnyStore, row: dict, stored: list[Paper]) -> FileOutcome:
    key, digest = row["path"], row["sha256"]
    if row["error"]:
        store.record_file(key, digest, "failed", error=row["error"])
        return FileOutcome(path=key, status="failed", error=row["error"])
    outcome = FileOutcome(path=key, status="ok")
    for text in row["papers"]:
        paper = Paper.model_validate_json(text)
        if store.has_paper(paper.id, digest):
            outcome.papers_unchanged += 1
            continue
        paper.source_path = paper.source_path or key
        store.put_paper(paper, digest)
        stored.append(paper)
        outcome.papers_added += 1
        outcome.chunks += len(paper.chunks)
        outcome.pages += max((chunk.page or 0 for chunk in paper.chunks), default=0)
    store.record_file(key, digest, "ok", paper_count=outcome.papers_added + outcome.papers_unchanged)
    return outcome


def _embed(papers: Sequence[Paper], settings: Settings) -> dict[tuple[str, int], np.ndarray]:
    """Vectors of the new papers' chunks, computed by Ray actors, by (paper id, ordinal)."""
    import ray

    rows = [
        {"key": f"{chunk.ordinal}:{paper.id}",
         "text": embedding_text(StoredChunk(rowid=0, chunk=chunk, paper_title=paper.title), settings.index.embedding)}
        for paper in papers
        for chunk in paper.chunks
    ]
    if not rows:
        return {}
    threads = settings.index.embedding.threads
    embedded = ray.data.from_items(rows).map_batches(
        _EmbedTexts, fn_constructor_args=(settings.model_dump_json(),), batch_size=EMBED_BATCH,
        concurrency=max(1, _cpus() // threads), num_cpus=min(threads, _cpus()),
    )
    vectors = {}
    for row in embedded.iter_rows():
        ordinal, paper_id = str(row["key"]).split(":", 1)
        vectors[(paper_id, int(ordinal))] = np.asarray(row["vector"], dtype=np.float32)
    return vectors


def _cpus() -> int:
    """CPUs of the Ray instance or cluster: how many workers each stage runs."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _lookup(vectors: dict[tuple[str, int], np.ndarray], index: CorpusIndex):
    """Vectors from the Ray run; a chunk it did not embed (stored by an earlier, interrupted run) is embedded here."""

    def vectors_of(batch: Sequence[StoredChunk]) -> np.ndarray:
        missing = [s for s in batch if (s.chunk.paper_id, s.chunk.ordinal) not in vectors]
        if missing:
            local = index.dense.embedder.embed([index.dense.embedding_text(s) for s in missing])
            vectors.update(((s.chunk.paper_id, s.chunk.ordinal), v) for s, v in zip(missing, local))
        return np.stack([vectors[(s.chunk.paper_id, s.chunk.ordinal)] for s in batch])

    return vectors_of
