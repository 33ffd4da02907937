"""Embedded LLM speed on this machine: prompt and generation tokens/s, and how structured output is best obtained.

    python benchmarks/llm.py [--models qwen2.5-coder-0.5b smollm2-135m] [--repeats 3]

For each packaged model it runs the `check_extract` prompt (uncached, KV cache dropped before every run so the whole
prompt is read) four ways:
  grammar            Strata's path: greedy decoding that checks the JSON-schema grammar only for the chosen token
  llama_cpp_grammar  llama-cpp-python's sampler chain with the same grammar (filters the whole vocabulary per token)
  response_format    llama-cpp-python's JSON mode with the schema (MODELS.md found it slow)
  plain              no constraint: schema spelled out in the prompt, answer parsed afterwards
and the first model also with 2 threads. Writes benchmarks/results/llm.json and prints a table. Other work sharing
the CPU skews absolute numbers (the load average is recorded); compare ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from pydantic import BaseModel

from strata.config import LLMSettings
from strata.eval.results import Experiment, new_result, write_result
from strata.llm import LLMError, parse_structured
from strata.llm.backend import GenerationOptions
from strata.llm.check import CHECK_PASSAGE, CHECK_PROMPT, PaperFacts, check_prompts
from strata.llm.embedded import EmbeddedBackend
from strata.llm.trace import EvalTiming

RESULTS = Path(__file__).resolve().parent / "results" / "llm.json"
MODES = ("grammar", "llama_cpp_grammar", "response_format", "plain")


class Row(BaseModel):
    model: str
    mode: str
    n_threads: int
    n_threads_batch: int
    load_s: float
    runs: int
    json_ok: int
    prompt_tokens: int
    prompt_tokens_per_s: float
    generated_tokens: float
    generation_tokens_per_s: float
    latency_s: float


class Config(BaseModel):
    model: str
    mode: str
    threads: int | None = None


def measure_model(model: str, configs: list[Config], repeats: int) -> list[Row]:
    """All configurations of one model, interleaved run by run so that changing load hits them alike."""
    backends = [
        EmbeddedBackend(
            LLMSettings(
                model=f"packaged:{model}",
                n_threads=config.threads,
                n_threads_batch=config.threads,
                grammar=config.mode != "plain",
                cache=False,
            )
        )
        for config in configs
    ]
    runs: list[list[tuple[str, EvalTiming, float]]] = [[] for _ in configs]
    try:
        for _ in range(repeats):
            for config, backend, results in zip(configs, backends, runs, strict=True):
                results.append(_run_once(backend, config.mode))
    finally:
        for backend in backends:
            backend.close()
    return [_row(config, backend, results) for config, backend, results in zip(configs, backends, runs, strict=True)]


def _run_once(backend: EmbeddedBackend, mode: str) -> tuple[str, EvalTiming, float]:
    prompt = check_prompts().render(CHECK_PROMPT, passage=CHECK_PASSAGE)
    schema = PaperFacts.model_json_schema()
    options = GenerationOptions(max_tokens=256, temperature=0.0, seed=0)
    backend.forget_prompt_cache()
    started = time.perf_counter()
    if mode in ("grammar", "plain"):
        generation = backend.generate(prompt.system, prompt.user, schema, options)
        text, timing = generation.text, generation.timing
    else:
        text, timing = _llama_cpp_chat_run(backend, mode, prompt.system, prompt.user, schema, options)
    assert timing is not None
    return text, timing, time.perf_counter() - started


def _row(config: Config, backend: EmbeddedBackend, results: list[tuple[str, EvalTiming, float]]) -> Row:
    timings = [timing for _, timing, _ in results]
    llama = backend._llama  # the thread counts "unset" resolved to on this machine
    return Row(
        model=config.model,
        mode=config.mode,
        n_threads=llama.n_threads,
        n_threads_batch=llama.n_threads_batch,
        load_s=round(backend.load_seconds or 0.0, 2),
        runs=len(results),
        json_ok=sum(_parses(text) for text, _, _ in results),
        prompt_tokens=timings[-1].prompt_tokens,
        prompt_tokens_per_s=round(statistics.median(t.prompt_tokens_per_s or 0.0 for t in timings), 1),
        generated_tokens=statistics.median(t.generated_tokens for t in timings),
        generation_tokens_per_s=round(statistics.median(t.generation_tokens_per_s or 0.0 for t in timings), 1),
        latency_s=round(statistics.median(latency for _, _, latency in results), 2),
    )


def _llama_cpp_chat_run(
    backend: EmbeddedBackend, mode: str, system: str, user: str, schema: dict, options: GenerationOptions
) -> tuple[str, EvalTiming]:
    """llama-cpp-python's own structured-output paths, for comparison; timed from llama.cpp's counters."""
    import llama_cpp
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    llama = backend._llama  # the comparison needs the raw Llama object; Strata itself never takes these paths
    constraint: dict = (
        {"response_format": {"type": "json_object", "schema": schema}}
        if mode == "response_format"
        else {"grammar": llama_cpp.LlamaGrammar.from_string(json_schema_to_gbnf(json.dumps(schema)), verbose=False)}
    )
    llama_cpp.llama_perf_context_reset(llama.ctx)
    started = time.perf_counter()
    result = llama.create_chat_completion(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        **constraint,
    )
    elapsed = time.perf_counter() - started
    assert isinstance(result, dict)  # not streamed
    perf = llama_cpp.llama_perf_context(llama.ctx)
    prompt_s = perf.t_p_eval_ms / 1000
    timing = EvalTiming(
        prompt_tokens=perf.n_p_eval,
        prompt_s=prompt_s,
        generated_tokens=result["usage"]["completion_tokens"],
        generation_s=elapsed - prompt_s,
    )
    return result["choices"][0]["message"]["content"] or "", timing


def _parses(text: str) -> bool:
    try:
        parse_structured(text, PaperFacts)
    except ValueError:
        return False
    return True


def experiment(row: Row) -> Experiment:
    return Experiment(
        name=f"{row.model} {row.mode} {row.n_threads} threads",
        method=row.mode,
        metrics=row.model_dump(include={"json_ok", "runs", "prompt_tokens_per_s", "generation_tokens_per_s"}),
        cost=row.model_dump(include={"latency_s", "load_s", "prompt_tokens", "generated_tokens"}),
        details=row.model_dump(include={"model", "n_threads", "n_threads_batch"}),
    )


def format_table(rows: list[Row]) -> str:
    header = (
        f"{'model':<20} {'mode':<18} {'thr':>3} {'load s':>6} {'json ok':>7} {'prompt tok':>10} {'prompt t/s':>10} "
        f"{'gen tok':>7} {'gen t/s':>7} {'latency s':>9}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.model:<20} {row.mode:<18} {row.n_threads:>3} {row.load_s:>6.2f} {f'{row.json_ok}/{row.runs}':>7} "
            f"{row.prompt_tokens:>10} {row.prompt_tokens_per_s:>10.1f} {row.generated_tokens:>7.0f} "
            f"{row.generation_tokens_per_s:>7.1f} {row.latency_s:>9.2f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "smollm2-135m"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows: list[Row] = []
    for model in args.models:
        configs = [Config(model=model, mode=mode) for mode in MODES]
        if model == args.models[0]:
            configs.append(Config(model=model, mode="grammar", threads=2))
        print(
            f"measuring {model}: {len(configs)} configurations x {args.repeats} runs ...", file=sys.stderr, flush=True
        )
        try:
            rows += measure_model(model, configs, args.repeats)
        except LLMError as error:
            print(f"  skipped: {error}", file=sys.stderr)
    write_result(new_result("benchmarks/llm.py", [experiment(row) for row in rows]), RESULTS)
    print(format_table(rows))
    print(f"\nwritten to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
