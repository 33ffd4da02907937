"""Shared by the tests of `strata.serve`: a small real corpus, cheap settings for the real pipeline over it, and an
ask function that answers from it.

The corpus is two real LitQA2 PDFs (BM25 only, no table detection, so it builds in seconds), built once per test
session however many modules use it. The fake ask function emits stage events and returns an AskResult whose
evidence is real stored chunks found by real search, so everything the server does with it is real.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from strata.config import Settings
from strata.corpus import Corpus
from strata.read.model import Answer, AskResult, Claim, Evidence, StageEvent

PDFS = ["10.1007%2Fs00125-024-06103-w.pdf", "10.1101%2F2024.02.13.580051.pdf"]
UPLOAD_PDF = "10.1101%2F2024.05.13.593936.pdf"  # not in the corpus until a test uploads it
QUESTION = "Which KCNJ11 mutation causes sulfonylurea-sensitive diabetes?"
# LitQA2 dev question f7346ea0-5f1b-45e9-a1d6-493c754159c1, answered by the first of the corpus's two PDFs.
MC_QUESTION = ("Which of the following processes are impacted by the S118L mutation of the potassium channel Kir6.2 in "
               "humans?")
MC_OPTIONS = ["membrane trafficking", "ATP sensitivity", "metabolic inhibition", "channel stimulation by MgADP"]
MC_PAPER = "10.1007_s00125-024-06103-w"
# The real pipeline (no fake ask) made cheap enough for a test, ~6 LLM calls: the tiny packaged model (SmolLM2-135M),
# no response cache (every call really runs), one retrieval round, two papers read, the option picked by lexical
# grounding. Both papers are judged by Decisions A and B (read.accept_top 0: those are the calls the model makes),
# and every paper is accepted: the 135M model rejects both, which would leave nothing to cite or check.
TINY_PIPELINE = {"llm.model": "packaged:smollm2-135m", "llm.cache": "false", "relate.enabled": "false",
                 "read.llm_retrieval": "false", "read.max_papers": "2", "read.passages_per_paper": "2",
                 "read.choice": "grounding", "read.accept_top": "0", "read.accept_threshold": "0"}


def corpus_settings(home: Path, **overrides: str) -> Settings:
    return Settings.load(overrides={"store.home": str(home), "index.dense": "false", "parsing.pdf_tables": "false",
                                    **overrides})


def build_corpus(base: Path, shared_data: Path) -> Path:
    """The store home of the two-PDF corpus under `base`, built on first call."""
    from strata.pipeline.ingest import ingest

    home = base / "serve-corpus"
    done = home / "built"
    if not done.exists():
        report = ingest([shared_data / "litqa2" / "pdfs" / name for name in PDFS], corpus_settings(home))
        assert not report.errors, report.summary()
        done.touch()
    return home


def fake_ask(question: str, settings: Settings, *, options=None, answer_format="text",
             on_event: Callable[[StageEvent], None] | None = None) -> AskResult:
    """An answer citing the two best chunks that real search finds for the question."""
    started = time.perf_counter()
    events: list[StageEvent] = []

    def emit(stage: str, status: str, detail: str = "") -> None:
        event = StageEvent(stage=stage, status=status, detail=detail, elapsed_s=time.perf_counter() - started)
        events.append(event)
        if on_event:
            on_event(event)

    emit("retrieve", "started")
    with Corpus.open(settings) as corpus:
        ranking = corpus.searcher.search(question, k=2)
    emit("retrieve", "done", f"{len(ranking.candidates)} papers")
    emit("read", "started")
    hits = [(candidate, hit) for candidate in ranking.candidates for hit in candidate.chunks[:1]]
    evidence = [
        Evidence(number=number, paper_id=candidate.paper_id, title=candidate.title, locator=str(hit.locator),
                 section_path=hit.locator.section_path, page=hit.locator.page, text=hit.text,
                 quote=hit.text[:100].strip())
        for number, (candidate, hit) in enumerate(hits, start=1)
    ]
    emit("read", "done", f"{len(evidence)} passages")
    emit("validate", "done", "supported")
    claims = [Claim(text=f"The passage from {e.title or e.paper_id} bears on the question [{e.number}].",
                    citations=[e.number]) for e in evidence]
    answer = Answer(question=question, format=answer_format, text=" ".join(c.text for c in claims),
                    claims=claims, evidence=evidence)
    return AskResult(answer=answer, candidates=ranking, events=events, wall_s=time.perf_counter() - started)


def sse_events(response: httpx.Response) -> list[tuple[str, dict]]:
    """(event name, JSON data) of each server-sent event of a response."""
    events = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        name = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
        data = "\n".join(line[5:].strip() for line in lines if line.startswith("data:"))
        if data:
            events.append((name, json.loads(data)))
    return events
