"""Hostile and broken files through ingest's per-file path: each gives a parsed document or a clear per-file error,
never a crash of the run, never a hang past the per-file time limit, in bounded memory.

CI runs the named cases and a small hypothesis budget; `python benchmarks/reliability.py fuzz` runs thousands.
"""

from __future__ import annotations

import resource
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.hostile import FuzzRun, HostileInput, pages_pdf, mutations, named_cases, seeds

PER_FILE_TIMEOUT_S = 20.0
LIMIT_S = 0.5  # the per-file limit in the tests of the limit itself
MAX_RSS_BYTES = 3 * 1024**3


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory):
    run = FuzzRun(tmp_path_factory.mktemp("fuzz"), PER_FILE_TIMEOUT_S)
    yield run
    run.close()


def test_named_hostile_files_give_a_document_or_a_clear_error(fuzz_run, shared_data):
    outcomes = {case.family: fuzz_run.run(case) for case in named_cases(data=shared_data)}
    assert {o.status for o in outcomes.values()} <= {"parsed", "error"}, [
        o for o in outcomes.values() if o.status not in ("parsed", "error")
    ]
    assert "encrypted" in outcomes["pdf:encrypted"].detail
    assert outcomes["pdf:owner-password-only"].status == "parsed"  # readable without a password
    assert "no pages" in outcomes["pdf:zero-pages"].detail
    for family in ("pdf:plain-text", "pdf:png-bytes", "pdf:zip-bytes", "pdf:html"):
        assert "not a PDF" in outcomes[family].detail
    assert outcomes["tei:billion-laughs"].status == "error"
    assert outcomes["s2orc:lone-surrogates"].status == "parsed"
    assert outcomes["s2orc:huge-string"].status == "parsed"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < MAX_RSS_BYTES


def test_no_external_entity_is_read_into_the_store(fuzz_run, shared_data):
    (case,) = [case for case in named_cases(data=shared_data) if case.family == "tei:external-entity"]
    fuzz_run.run(case)
    texts = [fuzz_run.store.paper_text(pid) for pid in fuzz_run.store.paper_ids()]
    assert not any("root:" in text for text in texts)


@pytest.fixture(scope="module")
def slow_pdf() -> HostileInput:
    """A 300-page PDF with text on every page: parsing it takes far longer than LIMIT_S."""
    return HostileInput(family="pdf:slow", suffix=".pdf", data=pages_pdf(300, with_text=True, distinct_lines=True))


def test_a_parse_past_the_per_file_limit_is_cut_off_with_a_clear_error(tmp_path, slow_pdf):
    run = FuzzRun(tmp_path, per_file_timeout_s=LIMIT_S)
    try:
        outcome = run.run(slow_pdf)
    finally:
        run.close()
    assert outcome.status == "error" and "per_file_timeout_s" in outcome.detail
    assert outcome.seconds < LIMIT_S + 3.0


@pytest.fixture(scope="module")
def hostile_seeds(shared_data) -> list[HostileInput]:
    return seeds(shared_data)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())  # drawn inside the test: the seeds come from the shared_data fixture
def test_mutated_files_never_crash_or_hang(fuzz_run, hostile_seeds, data):
    outcome = fuzz_run.run(data.draw(mutations(hostile_seeds), label="case"))
    assert outcome.status in ("parsed", "error"), outcome


def test_the_per_file_limit_also_holds_off_the_main_thread(tmp_path, slow_pdf, shared_data):
    """The server ingests in a worker thread, where SIGALRM cannot reach; the limit must still cut a slow file."""
    (quick,) = [case for case in named_cases(data=shared_data) if case.family == "s2orc:lone-surrogates"]
    run = FuzzRun(tmp_path, per_file_timeout_s=LIMIT_S)
    outcomes = []
    worker = threading.Thread(target=lambda: outcomes.extend([run.run(slow_pdf), run.run(quick)]))
    worker.start()
    worker.join(60)
    run.close()
    slow_outcome, quick_outcome = outcomes
    assert slow_outcome.status == "error" and "per_file_timeout_s" in slow_outcome.detail
    assert slow_outcome.seconds < LIMIT_S + 3.0
    assert quick_outcome.status == "parsed"  # no timeout left pending from the file before
