"""Failing LLM servers: every fault is retried within bounds, then ends in a clear error, in bounded total time."""

from __future__ import annotations

import time

import pytest

from fuzz.llm_server import HostileLLMServer, refused_url
from test_reliability_injection import ask, corpus  # noqa: F401  (fixtures: a small corpus and the real pipeline)
from strata.config import LLMSettings
from strata.llm import LLMError, LLMOutputError, LLMUnavailableError, make_client
from strata.llm.check import CHECK_PASSAGE, check_prompts

CHECK = check_prompts().render("check_extract", passage=CHECK_PASSAGE)
TIMEOUT_S, RETRIES, BACKOFF_S = 1.0, 2, 0.1


def settings_for(base_url: str) -> LLMSettings:
    return LLMSettings(
        backend="openai", base_url=base_url, model="fake", cache=False, timeout_s=TIMEOUT_S, max_retries=RETRIES,
        backoff_s=BACKOFF_S, response_format="none", repair_retries=1,
    )  # fmt: skip


# The most a call may take: every attempt running to its timeout, plus the backoffs between them, plus slack.
BOUND_S = (RETRIES + 1) * (TIMEOUT_S + 0.5) + sum(BACKOFF_S * 2**i for i in range(RETRIES)) + 2.0


@pytest.fixture()
def server():
    started: list[HostileLLMServer] = []

    def start(*script: str) -> HostileLLMServer:
        started.append(HostileLLMServer(list(script)))
        return started[-1]

    yield start
    for each in started:
        each.close()


def complete(base_url: str):
    started = time.monotonic()
    try:
        with make_client(settings_for(base_url)) as client:
            client.complete(CHECK)
    finally:
        elapsed = time.monotonic() - started
        assert elapsed < BOUND_S, f"took {elapsed:.1f}s, more than the {BOUND_S:.1f}s bound"


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        ("hang", "ReadTimeout"),
        ("http-500", "HTTP 500: internal error"),
        ("http-503", "HTTP 503: overloaded"),
        ("truncated-body", "RemoteProtocolError"),
        ("not-json", "answer is not JSON"),
        ("endless", "did not finish within"),
        ("huge", "grew past"),
    ],
)
def test_transport_faults_are_retried_then_reported_with_the_url(server, fault, problem):
    hostile = server(fault)
    with pytest.raises(LLMUnavailableError) as raised:
        complete(hostile.base_url)
    assert hostile.requests == RETRIES + 1
    message = str(raised.value)
    assert hostile.base_url in message and f"failed {RETRIES + 1} times" in message and problem in message


def test_a_refused_connection_is_retried_then_reported(server):
    url = refused_url()
    with pytest.raises(LLMUnavailableError, match="ConnectError") as raised:
        complete(url)
    assert url in str(raised.value)


@pytest.mark.parametrize("fault", ["truncated-answer", "wrong-schema"])
def test_unusable_answers_are_re_asked_once_then_raise_an_output_error(server, fault):
    hostile = server(fault)
    with pytest.raises(LLMOutputError) as raised:
        complete(hostile.base_url)
    assert hostile.requests == 2  # the answer plus one re-ask (llm.repair_retries = 1)
    assert "check_extract" in str(raised.value) and raised.value.raw_text


def test_an_answer_without_choices_is_a_clear_error(server):
    hostile = server("no-choices")
    with pytest.raises(LLMError, match="without choices"):
        complete(hostile.base_url)


@pytest.mark.parametrize("fault", ["hang", "http-503", "truncated-body", "endless", "truncated-answer"])
def test_a_fault_followed_by_a_good_answer_recovers(server, fault):
    hostile = server(fault, "ok")
    complete(hostile.base_url)
    assert hostile.requests == 2


def test_a_failing_llm_during_ask_keeps_the_candidates_as_a_partial_result(ask, server):
    """Retrieval done, the answer failed: the result still carries the candidates and readings, marked partial,
    naming the error (the top papers are accepted without a call, so synthesis makes the first)."""
    from strata.llm.openai_http import OpenAIBackend

    hostile = server("http-503")
    result = ask(OpenAIBackend(settings_for(hostile.base_url)))
    assert result.partial and "LLMUnavailableError" in result.error and hostile.base_url in result.error
    assert result.candidates.candidates and result.answer.evidence == []
    assert (result.events[-1].stage, result.events[-1].status) == ("synthesize", "failed")
    assert result.readings and all(reading.accepted for reading in result.readings)
