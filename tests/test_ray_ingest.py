"""Ingest on a local Ray instance lands the same store and indices as the local ingest, on real LitQA2 PDFs."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from fuzz.hostile import pages_pdf
from strata.cli import build_parser
from strata.config import Settings
from strata.experiments.stores import compare_stores
from strata.pipeline.ingest import ingest
from strata.rerank.features import feature_cache
from strata.rerank.texts import PaperTexts
from strata.store import open_store

pytest.importorskip("ray")

# The smallest LitQA2 PDF (7 pages) and a file that is not a PDF at all: parsing, chunking, embedding and a failure.
PDF = "10.1038%2Fs41467-024-44806-1.pdf"


def settings_for(home: Path) -> Settings:
    # The packaged 135M model keeps feature extraction quick; no response cache, so both runs really call the LLM.
    return Settings.load(overrides={
        "store.home": str(home), "parsing.pdf_tables": False, "llm.model": "packaged:smollm2-135m",
        "llm.cache": False, "rerank.features_input_words": 60,
    })


def features_of(settings: Settings) -> dict[str, tuple[str, bytes, bytes]]:
    with open_store(settings) as store:
        texts, cache = PaperTexts(store), feature_cache(settings)
        found = {pid: cache.get(pid, texts.content_hash(pid)) for pid in store.paper_ids()}
        cache.close()
    return {pid: stored.packed() for pid, stored in found.items() if stored is not None}


@pytest.mark.slow
def test_ray_ingest_lands_the_same_store_as_local_ingest(shared_data: Path, tmp_path: Path) -> None:
    from strata.pipeline.ingest_ray import ingest_with_ray

    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 this is not really a PDF")
    files = [shared_data / "litqa2" / "pdfs" / PDF, broken]
    local, distributed = settings_for(tmp_path / "local"), settings_for(tmp_path / "ray")
    local_report = ingest(files, local, features=True)
    report = ingest_with_ray(files, distributed, features=True)
    assert [(o.status, o.chunks) for o in report.files] == [(o.status, o.chunks) for o in local_report.files]
    assert report.count("ok") == 1 and report.errors[0].path.endswith("broken.pdf")
    diff = compare_stores(local, distributed)
    assert diff.papers == 1 and diff.chunks > 10
    assert diff.same(vector_tolerance=1e-4), diff
    # CoRank features extracted by a Ray actor land in the same cache rows as the local extraction's.
    assert report.features.documents == local_report.features.documents == 1
    assert report.features.extracted == local_report.features.extracted
    assert features_of(distributed) == features_of(local)
    # Unchanged files are skipped on a second run, as locally, and current features are not extracted again.
    again = ingest_with_ray(files, distributed, features=True)
    assert again.count("skipped") == 1
    assert (again.features.cached, again.features.extracted) == (report.features.extracted, 0)


def test_cli_takes_ray_with_or_without_an_address() -> None:
    parser = build_parser()
    assert parser.parse_args(["ingest", "x.pdf", "--ray"]).ray == "local"
    assert parser.parse_args(["ingest", "x.pdf", "--ray", "ray://head:10001"]).ray == "ray://head:10001"
    assert parser.parse_args(["ingest", "x.pdf"]).ray is None
    with_features = parser.parse_args(["ingest", "x.pdf", "--ray", "--features"])
    assert (with_features.ray, with_features.features) == ("local", True)


def test_ray_parse_workers_cut_off_a_file_past_the_per_file_limit(tmp_path: Path) -> None:
    """The Ray worker's batch function applies parsing.per_file_timeout_s as the local ingest does."""
    from strata.pipeline.ingest_ray import _ParseFiles

    slow = tmp_path / "slow.pdf"
    slow.write_bytes(pages_pdf(300, with_text=True, distinct_lines=True))
    settings = Settings.load(overrides={"parsing.per_file_timeout_s": 0.5})
    parse = _ParseFiles(settings.model_dump_json())
    started = time.perf_counter()
    row = parse({"path": np.array([str(slow)]), "sha256": np.array(["x"])})
    assert "per_file_timeout_s" in row["error"][0] and row["papers"] == [[]]
    assert time.perf_counter() - started < 4.0
