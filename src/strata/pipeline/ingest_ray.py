"""Ingest on Ray: the plan of `strata.pipeline.ingest`, with parsing, embedding and (asked for) CoRank feature
extraction run as Ray Data pipelines; the results land in the same store, indices and feature cache as the local
ingest.

The same code runs on a local Ray instance (`address` None: `ray.init(num_cpus=...)` on this machine) and on a cluster
(`address` 'auto' or 'ray://host:10001'; every node needs Strata and the embedding model installed). Workers parse
files and embed chunk texts; the driver alone writes the store (one writer, as locally) and builds the indices from
the workers' vectors, and alone writes the workers' features into the cache. Unchanged files are skipped by the same
test as locally, and papers with current features are not sent to the LLM.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from strata.config import Settings
from strata.corpus import Corpus
from strata.documents.model import Paper
from strata.encoders.embedder import Embedder
from strata.index import CorpusIndex, is_indexed
from strata.index.dense import embedding_text
from strata.index.state import ChunkVectors
from strata.llm import make_client
from strata.pipeline.ingest import (
    FILE_ERRORS,
    FileOutcome,
    IngestReport,
    content_hash,
    failure_reason,
    parse_file,
    record_failure,
    run,
    store_file,
    unchanged,
)
from strata.rerank.features import ExtractionReport, StoredFeatures, extract_document_features, feature_cache
from strata.rerank.texts import PaperTexts
from strata.store.base import StoredChunk
from strata.store.protocol import WritableStore

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
                parsed = list(parse_file(Path(path), self.settings))
                papers.append([paper.model_dump_json() for paper in parsed])
                errors.append("")
            except FILE_ERRORS as error:
                papers.append([])
                errors.append(failure_reason(error))
        return {"path": list(batch["path"]), "sha256": list(batch["sha256"]), "papers": papers, "error": errors}


class _EmbedTexts:
    """Ray Data actor: loads the encoder once, then embeds batches of chunk texts."""

    def __init__(self, settings_json: str) -> None:
        self.embedder = Embedder(Settings.model_validate_json(settings_json).index.embedding)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, object]:
        vectors = self.embedder.embed([str(text) for text in batch["text"]])
        return {"key": batch["key"], "vector": list(vectors)}


class _ExtractFeatures:
    """Ray Data actor: loads the LLM and the encoder once, then extracts CoRank features document by document."""

    def __init__(self, settings_json: str) -> None:
        settings = Settings.model_validate_json(settings_json)
        self.client = make_client(settings)
        self.embedder = Embedder(settings.index.embedding)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        packed = []
        for document in batch["document"]:
            stored = extract_document_features(self.client, self.embedder, str(document))
            packed.append(stored.packed() if stored else ("", b"", b""))  # "" features: no usable answer
        return {
            "paper_id": list(batch["paper_id"]),
            "content_hash": list(batch["content_hash"]),
            "model": [self.client.model] * len(packed),
            "features": [features for features, _, _ in packed],
            "section_vectors": [sections for _, sections, _ in packed],
            "keyword_vectors": [keywords for _, _, keywords in packed],
        }


def ingest_with_ray(
    paths: Iterable[Path | str], settings: Settings, address: str | None = None, features: bool = False
) -> IngestReport:
    import ray

    ray.init(address=address, num_cpus=None if address else LOCAL_CPUS, include_dashboard=False,
             ignore_reinit_error=True, log_to_driver=False)
    try:
        return run(paths, settings, RayExecutor(settings), features)
    finally:
        if address is None:
            ray.shutdown()


class RayExecutor:
    """Parsing, embedding and feature extraction on Ray Data workers; the driver runs the other steps."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.stored: list[Paper] = []  # papers this run wrote: what `vectors` embeds

    def store_files(self, store: WritableStore, files: list[Path]) -> list[FileOutcome]:
        return _parse_and_store(store, files, self.settings, self.stored)

    def vectors(self, index: CorpusIndex) -> ChunkVectors | None:
        return _lookup(_embed(self.stored, self.settings), index) if self.settings.index.dense else None

    def features(self, corpus: Corpus) -> ExtractionReport:
        return _extract_features(corpus.store, self.settings)


def _parse_and_store(
    store: WritableStore, files: list[Path], settings: Settings, stored: list[Paper]
) -> list[FileOutcome]:
    import ray

    outcomes: dict[str, FileOutcome] = {}
    todo = []
    for path in files:
        key, digest = str(path.resolve()), content_hash(path)
        if unchanged(store, key, digest):
            outcomes[key] = FileOutcome(path=key, status="skipped")
        else:
            todo.append({"path": key, "sha256": digest})
    if todo:
        parsed = ray.data.from_items(todo).map_batches(
            _ParseFiles, fn_constructor_args=(settings.model_dump_json(),), batch_size=1, concurrency=_cpus()
        )
        for row in parsed.iter_rows():  # streamed: the driver holds one file's papers at a time
            outcomes[row["path"]] = _store_row(store, row, stored)
    return [outcomes[str(path.resolve())] for path in files]


def _store_row(store: WritableStore, row: dict, stored: list[Paper]) -> FileOutcome:
    key, digest = row["path"], row["sha256"]
    if row["error"]:
        return record_failure(store, key, digest, row["error"])
    papers = (Paper.model_validate_json(text) for text in row["papers"])
    return store_file(store, key, digest, papers, added=stored)


def _embed(papers: Sequence[Paper], settings: Settings) -> dict[tuple[str, int], np.ndarray]:
    """Vectors of the new papers' chunks, computed by Ray actors, by (paper id, ordinal)."""
    import ray

    rows = [
        {"key": f"{chunk.ordinal}:{paper.id}",
         "text": embedding_text(StoredChunk(rowid=0, chunk=chunk, paper_title=paper.title), settings.index.embedding)}
        for paper in papers
        for chunk in paper.chunks
        if is_indexed(chunk, settings.index)
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


def _extract_features(store: WritableStore, settings: Settings) -> ExtractionReport:
    """Features of every stored paper without current ones, extracted by LLM actors (each with `llm.n_threads`
    CPUs, half a node's by default)."""
    import ray

    started = time.perf_counter()
    cache = feature_cache(settings)
    try:
        paper_ids, texts = store.paper_ids(), PaperTexts(store)
        words = settings.rerank.features_input_words
        # Documents are read here: the workers may not see the store.
        todo = [
            {"paper_id": paper_id, "content_hash": digest, "document": texts.document(paper_id, words)}
            for paper_id, digest in cache.stale(paper_ids, texts).items()
        ]
        failed = []
        if todo:
            threads = min(settings.llm.n_threads or max(1, _cpus() // 2), _cpus())
            # Each actor reads prompts on its own CPUs too (alone, the embedded model reads them on all).
            llm = settings.llm.model_copy(update={"n_threads_batch": settings.llm.n_threads_batch or threads})
            actor_settings = settings.model_copy(update={"llm": llm})
            extracted = ray.data.from_items(todo).map_batches(
                _ExtractFeatures, fn_constructor_args=(actor_settings.model_dump_json(),), batch_size=1,
                concurrency=max(1, _cpus() // threads), num_cpus=threads,
            )
            for row in extracted.iter_rows():
                if not row["features"]:
                    failed.append(row["paper_id"])
                    continue
                stored = StoredFeatures.unpacked(row["features"], row["section_vectors"], row["keyword_vectors"])
                cache.put(row["paper_id"], row["content_hash"], row["model"], stored)
    finally:
        cache.close()
    return ExtractionReport.of_run(len(paper_ids), len(todo), sorted(failed), started)


def _cpus() -> int:
    """CPUs of the Ray instance or cluster: how many workers each stage runs."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _lookup(vectors: dict[tuple[str, int], np.ndarray], index: CorpusIndex) -> ChunkVectors:
    """Vectors from the Ray run; a chunk it did not embed (stored by an earlier, interrupted run) is embedded here."""

    def vectors_of(batch: Sequence[StoredChunk]) -> np.ndarray:
        missing = [s for s in batch if (s.chunk.paper_id, s.chunk.ordinal) not in vectors]
        if missing:
            local = index.dense.embedder.embed([index.dense.embedding_text(s) for s in missing])
            vectors.update(((s.chunk.paper_id, s.chunk.ordinal), v) for s, v in zip(missing, local))
        return np.stack([vectors[(s.chunk.paper_id, s.chunk.ordinal)] for s in batch])

    return vectors_of
