"""Ingest on a local Ray instance lands the same store and indices as the local ingest, on real LitQA2 PDFs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata.cli import build_parser
from strata.config import Settings
from strata.index import CorpusIndex
from strata.index.migrate import vectors_from
from strata.ingest import ingest
from strata.store import open_store

pytest.importorskip("ray")

# The smallest LitQA2 PDF (7 pages) and a file that is not a PDF at all: parsing, chunking, embedding and a failure.
PDF = "10.1038%2Fs41467-024-44806-1.pdf"


def settings_for(home: Path) -> Settings:
    return Settings.load(overrides={"store.home": str(home), "parsing.pdf_tables": False})


def contents(settings: Settings) -> tuple[dict[str, list[str]], dict[tuple[str, int], np.ndarray]]:
    """(paper id -> chunk texts, (paper id, ordinal) -> vector) of a built store."""
    with open_store(settings) as store:
        texts = {pid: [c.text for c in store.get_paper(pid).chunks] for pid in store.paper_ids()}
        stored = store.chunks_after(0, limit=100_000)
        rows = vectors_from(store, CorpusIndex(store, settings).dense)(stored)
        vectors = {(s.chunk.paper_id, s.chunk.ordinal): row for s, row in zip(stored, rows)}
    return texts, vectors


@pytest.mark.integration
@pytest.mark.slow
def test_ray_ingest_lands_the_same_store_as_local_ingest(shared_data: Path, tmp_path: Path) -> None:
    from strata.ingest_ray import ingest_with_ray

    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 this is not really a PDF")
    files = [shared_data / "litqa2" / "pdfs" / PDF, broken]
    local, distributed = settings_for(tmp_path / "local"), settings_for(tmp_path / "ray")
    local_report = ingest(files, local)
    report = ingest_with_ray(files, distributed)
    assert [(o.status, o.chunks) for o in report.files] == [(o.status, o.chunks) for o in local_report.files]
    assert report.count("ok") == 1 and report.errors[0].path.endswith("broken.pdf")
    local_texts, local_vectors = contents(local)
    ray_texts, ray_vectors = contents(distributed)
    assert ray_texts == local_texts and len(local_texts) == 1
    assert ray_vectors.keys() == local_vectors.keys()
    for key, vector in local_vectors.items():
        assert np.allclose(ray_vectors[key], vector, atol=1e-4), key
    # Unchanged files are skipped on a second run, as locally.
    assert ingest_with_ray(files, distributed).count("skipped") == 1


def test_cli_takes_ray_with_or_without_an_address() -> None:
    parser = build_parser()
    assert parser.parse_args(["ingest", "x.pdf", "--ray"]).ray == "local"
    assert parser.parse_args(["ingest", "x.pdf", "--ray", "ray://head:10001"]).ray == "ray://head:10001"
    assert parser.parse_args(["ingest", "x.pdf"]).ray is None
