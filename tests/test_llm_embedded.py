"""The embedded backend on real packaged models: SmolLM2-135M for speed, one check of the default 0.5B model."""

import os

import numpy as np
import pytest

from strata.config import LLMSettings, Settings
from strata.llm import ContextOverflowError, LLMClient, Prompt, Trace, make_client
from strata.llm.backend import GenerationOptions
from strata.llm.check import CHECK_PASSAGE, PaperFacts, check_prompts, format_check, run_check
from strata.llm.embedded import EmbeddedBackend

CONTINUATIONS = ["2 Related Work", "4 Experiments on ArXivSections", "Appendix B: Proofs", "zebra umbrella"]
TOC_PROMPT = Prompt(
    name="toc_pick",
    system="You pick the section of a paper that answers a question.",
    user="Question: Which collections was LatticeRank evaluated on?\nAnswer with the section title.",
)


@pytest.fixture(scope="module")
def smol_settings(tmp_path_factory) -> LLMSettings:
    return LLMSettings(
        model="packaged:smollm2-135m", model_dir=tmp_path_factory.mktemp("models"), cache=False, n_ctx=1024
    )


@pytest.fixture(scope="module")
def smol(smol_settings) -> LLMClient:
    client = make_client(smol_settings)
    yield client
    client.close()


def test_grammar_constrained_answer_is_valid_json_for_the_schema(smol):
    trace = Trace()
    facts = smol.complete(check_prompts().render("check_extract", passage=CHECK_PASSAGE), trace=trace)
    assert isinstance(facts, PaperFacts) and facts.title and len(facts.datasets) <= 4
    (call,) = trace.calls
    assert call.ok and call.tokens_in > 100 and call.tokens_out > 5 and call.timing.generation_tokens_per_s > 0


def test_prompts_are_read_on_every_cpu_and_tokens_generated_on_half_unless_set(smol, smol_settings):
    """Reading a prompt is batched work that gains from every core; generating one token at a time slows down when
    it shares a core with other work, so it keeps half."""
    cpus = os.cpu_count() or 2
    params = smol.backend._llama.context_params
    assert (params.n_threads, params.n_threads_batch) == (max(1, cpus // 2), cpus)
    pinned = EmbeddedBackend(smol_settings.model_copy(update={"n_threads": 1, "n_threads_batch": 1}))
    try:
        assert (pinned._llama.context_params.n_threads, pinned._llama.context_params.n_threads_batch) == (1, 1)
    finally:
        pinned.close()


def test_fast_grammar_path_matches_llama_cpp_grammar_sampling(smol):
    """Checking the grammar only for the greedy token must give what filtering the whole vocabulary gives."""
    backend: EmbeddedBackend = smol.backend
    prompt = check_prompts().render("check_extract", passage="Deep Kelp (2020). We propose KelpNet on OceanSet.")
    schema = PaperFacts.model_json_schema()
    options = GenerationOptions(max_tokens=80, temperature=0.0, seed=0)
    fast = backend.generate(prompt.system, prompt.user, schema, options)
    formatted = backend._formatter(
        messages=[{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
    )
    reference = backend._sampled(
        backend._tokenize_prompt(formatted.prompt), formatted.stop, backend._gbnf(schema), options, 80
    )
    assert fast.text == reference.text and fast.tokens_out == reference.tokens_out


def test_score_equals_log_probabilities_from_a_full_evaluation(smol):
    import llama_cpp

    backend: EmbeddedBackend = smol.backend
    scores = smol.score(TOC_PROMPT, CONTINUATIONS)
    reference = llama_cpp.Llama(
        model_path=str(backend.model_path), n_ctx=1024, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False
    )
    formatted = backend._formatter(
        messages=[{"role": "system", "content": TOC_PROMPT.system}, {"role": "user", "content": TOC_PROMPT.user}]
    )
    prompt = reference.tokenize(formatted.prompt.encode(), add_bos=False, special=True)
    for score in scores:
        tokens = reference.tokenize(score.continuation.encode(), add_bos=False, special=False)
        reference.reset()
        reference.eval(prompt + tokens)
        rows = reference.scores[len(prompt) - 1 : len(prompt) - 1 + len(tokens)].astype(np.float64)
        peak = rows.max(axis=1)
        log_normaliser = peak + np.log(np.exp(rows - peak[:, None]).sum(axis=1))
        expected = float((rows[np.arange(len(tokens)), tokens] - log_normaliser).sum())
        assert score.n_tokens == len(tokens) and score.logprob == pytest.approx(expected, abs=1e-4)
    reference.close()


def test_score_is_identical_across_fresh_models_and_call_histories(smol, smol_settings):
    first = [score.logprob for score in smol.score(TOC_PROMPT, CONTINUATIONS)]
    smol.complete(check_prompts().render("check_extract", passage="Other text (2001). We propose X on Y."))
    after_other_calls = [score.logprob for score in smol.score(TOC_PROMPT, CONTINUATIONS)]
    with make_client(smol_settings) as fresh:
        fresh_run = [score.logprob for score in fresh.score(TOC_PROMPT, CONTINUATIONS)]
    assert first == after_other_calls == fresh_run  # exact equality, hence identical rankings
    assert len(set(first)) == len(CONTINUATIONS)  # and the ranking is not a tie


def test_a_prompt_longer_than_the_context_is_a_clear_error(smol):
    long_prompt = Prompt(name="long", system="s", user="word " * 2000, output_model=PaperFacts)
    with pytest.raises(ContextOverflowError, match="does not fit n_ctx=1024"):
        smol.complete(long_prompt)


def test_check_reports_a_broken_configuration_instead_of_raising(tmp_path):
    report = run_check(LLMSettings(model="packaged:no-such-model", model_dir=tmp_path))
    assert not report.json_ok and "unknown packaged model" in report.error
    assert "JSON valid:     NO" in format_check(report)


@pytest.mark.slow
def test_default_configuration_runs_the_packaged_qwen_model_offline():
    report = run_check(Settings.load())
    assert report.error is None and report.json_ok, format_check(report)
    assert report.model.startswith("packaged:qwen2.5-coder-0.5b")
    assert report.prompt_tokens_per_s > 0 and report.generation_tokens_per_s > 0 and report.load_seconds < 60
