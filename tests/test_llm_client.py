"""The client's own logic (cache, repair, re-ask, tracing, settings) on a scripted fake backend."""

import gzip
from collections.abc import Sequence

import pytest
from pydantic import BaseModel, SecretStr

from strata.config import LLMSettings, Settings
from strata.llm import (
    ContextOverflowError,
    ContinuationScore,
    Generation,
    LLMClient,
    LLMOutputError,
    LLMUnavailableError,
    Prompt,
    ResponseCache,
    Scoring,
    Trace,
    TraceSummary,
    tracing,
)
from strata.llm import cache as cache_module
from strata.llm.backend import probabilities
from strata.llm.client import make_client, shared_latencies


class Verdict(BaseModel):
    label: str
    confidence: float


class ScriptedBackend:
    """Answers from a list, one per request, and remembers every request."""

    name = "scripted"
    model = "scripted-1"
    load_seconds = None

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, str]] = []

    def generate(self, system, user, schema, options) -> Generation:
        self.requests.append((system, user))
        return Generation(text=self.answers.pop(0), tokens_in=len(user.split()), tokens_out=7)

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        self.requests.append((system, user))
        scores = [ContinuationScore(continuation=c, logprob=-float(len(c)), n_tokens=len(c)) for c in continuations]
        return Scoring(scores=scores, tokens_in=10)

    def close(self) -> None:
        pass


PROMPT = Prompt(name="judge", system="Judge it.", user="Claim: the sky is green.", output_model=Verdict)


def client_for(answers: list[str], tmp_path=None, **settings) -> tuple[LLMClient, ScriptedBackend]:
    backend = ScriptedBackend(answers)
    cache = ResponseCache(tmp_path / "cache.sqlite") if tmp_path else None
    return LLMClient(backend, LLMSettings(**settings), cache), backend


def test_a_wrapped_answer_is_repaired_without_asking_again():
    client, backend = client_for(['Sure:\n```json\n{"label": "false", "confidence": 0.9}\n```\nAnything else?'])
    with tracing() as trace:
        assert client.complete(PROMPT) == Verdict(label="false", confidence=0.9)
    assert len(backend.requests) == 1 and trace.summary().retries == 0


def test_an_invalid_answer_is_re_asked_once_with_the_validation_error():
    client, backend = client_for(['{"label": "false"}', '{"label": "false", "confidence": 0.5}'])
    trace = Trace()
    assert client.complete(PROMPT, trace=trace).confidence == 0.5
    retry_user = backend.requests[1][1]
    assert retry_user.startswith(PROMPT.user) and "confidence: Field required" in retry_user
    assert [call.attempt for call in trace.calls] == [0, 1] and [call.ok for call in trace.calls] == [False, True]
    summary = trace.summary()
    assert (summary.calls, summary.tokens_out, summary.retries, summary.failures) == (2, 14, 1, 1)


def test_a_hopeless_answer_raises_llm_output_error_with_the_raw_text():
    client, backend = client_for(["I cannot do that.", "Still no."])
    with pytest.raises(LLMOutputError) as error:
        client.complete(PROMPT)
    assert error.value.raw_text == "Still no." and error.value.prompt_name == "judge"
    assert "no complete JSON object" in str(error.value) and len(backend.requests) == 2


def test_repair_retries_zero_means_a_single_request():
    client, backend = client_for(["nope"], repair_retries=0)
    with pytest.raises(LLMOutputError):
        client.complete(PROMPT)
    assert len(backend.requests) == 1


def test_the_cache_replays_answers_and_the_trace_marks_hits(tmp_path):
    answer = '{"label": "false", "confidence": 0.75}'
    first, _ = client_for([answer], tmp_path)
    with tracing() as cold:
        first.complete(PROMPT)
    first.close()
    second, backend = client_for([], tmp_path)  # a backend with no answers left: everything must come from the cache
    with tracing() as warm:
        assert second.complete(PROMPT).confidence == 0.75
    assert [call.cache_hit for call in cold.calls] == [False]
    assert warm.calls[0].cache_hit and warm.calls[0].tokens_out == 7


def test_a_committed_journal_replays_answers_on_a_machine_with_an_empty_cache(tmp_path):
    journal = tmp_path / "repo" / "answers.jsonl"
    answers = ['{"label": "a", "confidence": 1}', '{"label": "b", "confidence": 1}']
    other = PROMPT.model_copy(update={"user": "Claim: water is wet."})
    first = LLMClient(ScriptedBackend(answers), LLMSettings(), ResponseCache(tmp_path / "one.sqlite", journal))
    first.complete(PROMPT)
    first.complete(PROMPT)  # a hit: journaled once
    first.close()
    lines = journal.read_text().splitlines()
    assert len(lines) == 1
    journal.write_text(lines[0] + "\n" + lines[0][:40])  # a run killed mid-write leaves a cut line
    backend = ScriptedBackend(answers[1:])
    second = LLMClient(backend, LLMSettings(), ResponseCache(tmp_path / "fresh.sqlite", journal))
    assert second.complete(PROMPT).label == "a" and backend.requests == []  # replayed from the journal
    assert second.complete(other).label == "b" and len(backend.requests) == 1  # asked, and journaled on a new line
    second.close()
    third = LLMClient(ScriptedBackend([]), LLMSettings(), ResponseCache(tmp_path / "third.sqlite", journal))
    assert [third.complete(prompt).label for prompt in (PROMPT, other)] == ["a", "b"]


def test_a_long_journal_is_folded_into_its_gzip_sibling_and_still_replays(tmp_path, monkeypatch):
    """Past COMPACT_BYTES the plain journal is compressed on opening, so a committed journal stays small; new answers
    go to a fresh plain journal beside it, and both replay."""
    monkeypatch.setattr(cache_module, "COMPACT_BYTES", 10)
    journal = tmp_path / "answers.jsonl"
    answers = ['{"label": "a", "confidence": 1}', '{"label": "b", "confidence": 1}']
    other = PROMPT.model_copy(update={"user": "Claim: water is wet."})
    first = LLMClient(ScriptedBackend(answers[:1]), LLMSettings(), ResponseCache(tmp_path / "one.sqlite", journal))
    first.complete(PROMPT)
    first.close()
    second = LLMClient(ScriptedBackend(answers[1:]), LLMSettings(), ResponseCache(tmp_path / "two.sqlite", journal))
    folded = journal.with_name("answers.jsonl.gz")
    assert folded.is_file() and not journal.exists()
    assert second.complete(PROMPT).label == "a" and second.complete(other).label == "b"
    second.close()
    assert len(journal.read_text().splitlines()) == 1  # only the new answer: the folded one is not written twice
    third = LLMClient(ScriptedBackend([]), LLMSettings(), ResponseCache(tmp_path / "three.sqlite", journal))
    assert [third.complete(prompt).label for prompt in (PROMPT, other)] == ["a", "b"]
    assert len(gzip.decompress(folded.read_bytes()).splitlines()) == 2 and not journal.exists()


def test_a_journal_cut_inside_a_character_or_holding_a_line_separator_still_replays(tmp_path):
    journal = tmp_path / "answers.jsonl"
    answers = ['{"label": "10 \u00b5m\u2028apart", "confidence": 1}']
    first = LLMClient(ScriptedBackend(answers), LLMSettings(), ResponseCache(tmp_path / "one.sqlite", journal))
    first.complete(PROMPT)
    first.close()
    cut = '{"key": "k", "value": "10 \u00b5'.encode()[:-1]  # killed inside the two bytes of a '\u00b5'
    journal.write_bytes(journal.read_bytes() + cut)
    replay = LLMClient(ScriptedBackend([]), LLMSettings(), ResponseCache(tmp_path / "two.sqlite", journal))
    assert replay.complete(PROMPT).label == "10 \u00b5m\u2028apart"  # not asked again


def test_cache_keys_separate_models_schemas_and_prompts(tmp_path):
    answers = ['{"label": "x", "confidence": 1}', '{"label": "y", "confidence": 1}']
    client, backend = client_for(answers, tmp_path)
    client.complete(PROMPT)
    other = PROMPT.model_copy(update={"user": "Claim: water is wet."})
    assert client.complete(other).label == "y" and len(backend.requests) == 2


def test_score_goes_through_the_cache_and_the_trace(tmp_path):
    client, backend = client_for([], tmp_path)
    with tracing() as trace:
        first = client.score(PROMPT, ["Methods", "Results section"])
        second = client.score(PROMPT, ["Methods", "Results section"])
    assert first == second and [s.logprob for s in first] == [-7.0, -15.0]
    assert len(backend.requests) == 1 and [call.cache_hit for call in trace.calls] == [False, True]
    assert trace.calls[0].kind == "score"


def test_a_backend_scoring_another_way_does_not_replay_cached_scores(tmp_path):
    from strata.llm.openai_http import OpenAIBackend

    client, backend = client_for([], tmp_path)
    client.score(PROMPT, ["Methods"])
    backend.scoring_identity = "### {system}\n{user}\n### Answer:"  # e.g. a non-ChatML completion template
    client.score(PROMPT, ["Methods"])
    assert len(backend.requests) == 2  # scored again, not replayed
    default = OpenAIBackend(LLMSettings(backend="openai", base_url="http://127.0.0.1:9/v1"))
    custom = OpenAIBackend(LLMSettings(backend="openai", base_url="http://127.0.0.1:9/v1", completion_template="{user}"))
    assert default.scoring_identity == "" and custom.scoring_identity == "{user}"  # the default keeps old keys


def test_an_explicit_trace_wins_over_the_active_one():
    client, _ = client_for(['{"label": "a", "confidence": 0}'])
    explicit = Trace()
    with tracing() as active:
        client.complete(PROMPT, trace=explicit)
    assert len(explicit.calls) == 1 and active.calls == []
    assert "judge" in explicit.format() and "total" in explicit.format()


def test_traces_sum_across_requests():
    one = TraceSummary(calls=1, tokens_in=10, tokens_out=2, latency_s=0.5)
    two = TraceSummary(calls=2, cache_hits=1, tokens_in=5, tokens_out=1, latency_s=0.25)
    assert TraceSummary.total([one, two]) == TraceSummary(
        calls=3, cache_hits=1, tokens_in=15, tokens_out=3, latency_s=0.75
    )


def test_llm_settings_come_from_presets_and_the_environment(monkeypatch):
    monkeypatch.setenv("STRATA_LLM__BASE_URL", "http://gpu-box:9000/v1")
    monkeypatch.setenv("STRATA_LLM__API_KEY", "sk-test")
    settings = Settings.load(preset="openai-compatible")
    assert settings.llm.backend == "openai" and settings.llm.base_url == "http://gpu-box:9000/v1"
    assert settings.llm.api_key == SecretStr("sk-test") and "sk-test" not in repr(settings.llm)
    quality = Settings.load(preset="quality").llm  # the 1.5B decides, the 0.5B default filters
    assert quality.decide_model == "packaged:qwen2.5-coder-1.5b" and quality.model == Settings.load().llm.model
    monkeypatch.delenv("STRATA_LLM__BASE_URL")
    monkeypatch.delenv("STRATA_LLM__API_KEY")
    default = Settings.load()
    assert default.llm == Settings.load(preset="embedded").llm and default.llm.temperature == 0


class BatchingBackend(ScriptedBackend):
    """A ScriptedBackend that takes batches (as the transformers backend does) and records their sizes."""

    def __init__(self, answers: list[str]) -> None:
        super().__init__(answers)
        self.batches: list[int] = []

    def generate_batch(self, requests, options) -> list[Generation]:
        self.batches.append(len(requests))
        return [self.generate(system, user, schema, options) for system, user, schema in requests]


def test_complete_many_asks_the_uncached_prompts_in_one_batch_and_re_asks_only_the_unparsed(tmp_path):
    good = '{"label": "%s", "confidence": 0.5}'
    prompts = [PROMPT.model_copy(update={"user": f"Claim {n}."}) for n in range(4)]
    backend = BatchingBackend([good % "cached"])
    client = LLMClient(backend, LLMSettings(), ResponseCache(tmp_path / "cache.sqlite"))
    client.complete(prompts[2])  # answered before: a cache hit below
    backend.answers = [good % "a", "no json", good % "d", good % "b again"]
    answers = client.complete_many([(prompt, None) for prompt in prompts])
    assert [answer.label for answer in answers] == ["a", "b again", "cached", "d"]
    assert backend.batches == [1, 3, 1]  # the earlier call, the three uncached prompts, the one re-asked
    assert "Your previous answer could not be used" in backend.requests[-1][1]


def test_a_batch_round_charges_its_wait_to_its_fresh_answers_and_nothing_to_cache_hits(tmp_path):
    good = '{"label": "%s", "confidence": 0.5}'
    prompts = [PROMPT.model_copy(update={"user": f"Claim {n}."}) for n in range(3)]
    backend = BatchingBackend([good % "cached"])
    client = LLMClient(backend, LLMSettings(), ResponseCache(tmp_path / "cache.sqlite"))
    client.complete(prompts[0])
    backend.answers = [good % "b", good % "c"]
    trace = Trace()
    client.complete_many([(prompt, None) for prompt in prompts], trace=trace)
    hit, *fresh = trace.calls
    assert hit.cache_hit and hit.latency_s == 0.0
    assert fresh[0].latency_s == fresh[1].latency_s > 0
    failed = LLMOutputError("p", "", "x")
    assert shared_latencies([(failed, False), (Generation(text="", tokens_in=1, tokens_out=1), False)], 2.0) == [0, 2]
    assert shared_latencies([(Generation(text="", tokens_in=1, tokens_out=1), True)] * 2, 1.0) == [0.5, 0.5]


def test_complete_many_puts_each_failure_in_its_place():
    client, _ = client_for(['{"label": "x", "confidence": 1}', "no", "still no"], repair_retries=1)
    first, second = client.complete_many([(PROMPT, None), (PROMPT.model_copy(update={"user": "Other."}), None)])
    assert first == Verdict(label="x", confidence=1.0)
    assert isinstance(second, LLMOutputError) and second.raw_text == "still no"


class FailingBackend(ScriptedBackend):
    """A backend whose every call fails, as a dead server's or an overflowing prompt's does."""

    def generate(self, system, user, schema, options) -> Generation:
        raise LLMUnavailableError("server at 127.0.0.1:9 refused the connection")

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        raise ContextOverflowError("prompt of 9000 tokens over n_ctx 4096")


def test_a_failed_backend_call_is_traced_with_its_error_and_counted_as_a_failure():
    client = LLMClient(FailingBackend([]), LLMSettings())
    with tracing() as trace:
        (answer,) = client.complete_many([(PROMPT, None)])
        with pytest.raises(ContextOverflowError):
            client.score(PROMPT, ["yes", "no"])
        with pytest.raises(LLMUnavailableError):
            client.complete_text(PROMPT)
    assert isinstance(answer, LLMUnavailableError)
    assert [(call.kind, call.ok, (call.error or "").split(":")[0]) for call in trace.calls] == [
        ("complete", False, "LLMUnavailableError"),
        ("score", False, "ContextOverflowError"),
        ("complete", False, "LLMUnavailableError"),
    ]
    assert "refused the connection" in trace.calls[0].error
    summary = trace.summary()
    assert (summary.calls, summary.failures, summary.tokens_in) == (3, 3, 0)
    assert "failed: ContextOverflowError" in trace.format()


class ImpossibleBackend(ScriptedBackend):
    """Scores every continuation impossible (log-probability -inf), as a grammar that masks them all does."""

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        scores = [ContinuationScore(continuation=c, logprob=float("-inf"), n_tokens=1) for c in continuations]
        return Scoring(scores=scores, tokens_in=10)


def test_continuations_all_scored_impossible_share_evenly_instead_of_nan_and_p_yes_is_no():
    client = LLMClient(ImpossibleBackend([]), LLMSettings())
    assert client.p_yes(PROMPT) == 0.0  # 0.5 would pass Read's default threshold
    assert probabilities(client.score(PROMPT, ["A", "B", "C", "D"])) == [0.25] * 4


class BrokenBatchBackend(BatchingBackend):
    """A batching backend whose whole batch fails (its server or device gave out)."""

    def generate_batch(self, requests, options) -> list[Generation]:
        raise LLMUnavailableError("the batch failed")


def test_a_failed_batch_puts_its_error_in_each_requests_place_and_traces_each():
    client = LLMClient(BrokenBatchBackend([]), LLMSettings())
    prompts = [PROMPT, PROMPT.model_copy(update={"user": "Other."})]
    with tracing() as trace:
        answers = client.complete_many([(prompt, None) for prompt in prompts])
    assert [type(answer) for answer in answers] == [LLMUnavailableError, LLMUnavailableError]
    assert [call.error for call in trace.calls] == ["LLMUnavailableError: the batch failed"] * 2


def test_make_client_closes_the_loaded_backend_when_the_cache_cannot_open(tmp_path, monkeypatch):
    closed: list[str] = []

    class ClosingBackend(ScriptedBackend):
        def __init__(self, settings: LLMSettings) -> None:
            super().__init__([])

        def close(self) -> None:
            closed.append(self.model)

    monkeypatch.setattr("strata.llm.openai_http.OpenAIBackend", ClosingBackend)
    (tmp_path / "file").write_text("not a folder")
    settings = LLMSettings(backend="openai", cache=True, cache_path=tmp_path / "file" / "cache.sqlite")
    with pytest.raises(OSError):
        make_client(settings)
    assert closed == ["scripted-1"]
