"""benchmarks/corank_gpu.py's device side on a scripted fake LLM: the job's papers and rankings are all it reads,
every method ranks every query (features extracted first, in batches), and the deadlines stop work cleanly."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pytest
from benchmark_support import load_benchmark
from test_rerank_unit import HashEmbedder, RankingBackend, first_stage

from strata.config import LLMSettings, RerankSettings
from strata.documents.model import Paper
from strata.llm import LLMClient

corank_gpu = load_benchmark("corank_gpu")
METHODS = ["listwise", "corank", "corank-truncated", "random-pool", "sliding-window"]


class CountingBackend(RankingBackend):
    """RankingBackend that takes batches and counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def generate_batch(self, requests, options):
        self.batches.append(len(requests))
        return [self.generate(system, user, schema, options) for system, user, schema in requests]


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    """Two queries over 12 papers, the best (grade 50) ranked last by the first stage."""
    folder = tmp_path / "job"
    folder.mkdir()
    with gzip.open(folder / "papers.jsonl.gz", "wt") as handle:
        for number in range(12):
            grade = 50 if number == 11 else number % 5
            paper = Paper(id=f"p{number:03d}", title=f"Paper{number:03d} grade{grade:02d}",
                          abstract=" ".join(["word"] * 30) + f" grade{grade:02d}", source_format="test")  # fmt: skip
            handle.write(paper.model_dump_json() + "\n")
    rerank = RerankSettings(pool=12, fine_k=4, listwise_depth=12, sliding_depth=12, window=4, stride=2,
                            fusion_weight=1.0, listwise_answer="first-token")  # fmt: skip
    queries = [{"id": qid, "text": "what is best", "ranking": first_stage(12).model_dump(mode="json")}
               for qid in ("q1", "q2")]  # fmt: skip
    with gzip.open(folder / "job.json.gz", "wt") as handle:
        json.dump({"caps": [], "methods": METHODS, "rerank": rerank.model_dump(mode="json", exclude={"features_path",
                   "cross_encoder_dir"}), "llm": {"model": "fake", "n_ctx": 4096}, "queries": queries}, handle)  # fmt: skip
    return folder


def run_job(job: Path, tmp_path: Path, monkeypatch, **limits: float) -> tuple[dict, CountingBackend]:
    backend = CountingBackend()
    monkeypatch.setattr("strata.llm.make_client", lambda settings: LLMClient(backend, settings.llm))
    monkeypatch.setattr("strata.encoders.embedder.Embedder", lambda settings: HashEmbedder())
    out = tmp_path / "out"
    args = argparse.Namespace(folder=job, model=tmp_path / "model.gguf", encoder=tmp_path, out=out,
                              work=tmp_path / "work", deadline_s=limits.get("deadline_s", 600),
                              features_deadline_s=limits.get("features_deadline_s", 600), batch_size=5,
                              cpu_threads=1, device_name="test", smoke=False)  # fmt: skip
    corank_gpu.run(args)
    return json.loads((out / "runs.json").read_text()), backend


def test_every_method_ranks_every_query_after_features_extracted_in_batches(job, tmp_path, monkeypatch):
    runs, backend = run_job(job, tmp_path, monkeypatch)
    assert runs["features"]["documents"] == 12 and runs["features"]["extracted"] == 12
    assert backend.batches == [5, 5, 2]  # llm.batch_size papers per pass
    assert set(runs["methods"]) == set(METHODS) and "errors" not in runs
    for method, entry in runs["methods"].items():
        assert set(entry["rankings"]) == {"q1", "q2"}
        top = entry["rankings"]["q1"]["candidates"][0]["paper_id"]
        if method != "random-pool":  # the others see the planted best paper; a random draw of 4 of 12 may not
            assert top == "p011", method
        assert entry["llm"]["calls"] > 0 and entry["llm"]["tokens_out"] == 0  # ranked by scores, not features


def test_past_the_deadlines_nothing_more_starts_and_what_ran_is_kept(job, tmp_path, monkeypatch):
    runs, backend = run_job(job, tmp_path, monkeypatch, deadline_s=0, features_deadline_s=0)
    assert runs["features"]["attempted"] == 0 and backend.batches == []
    assert runs["methods"] == {}
