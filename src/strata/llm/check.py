"""`strata llm check`: load the configured model, ask one small extraction, report JSON validity and speed."""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import BaseModel, Field

from strata.config import LLMSettings, Settings
from strata.llm.client import make_client
from strata.llm.errors import LLMError
from strata.llm.templates import PromptRegistry
from strata.llm.trace import LLMCall, tracing

CHECK_PROMPT = "check_extract"
# Synthetic passage (an invented paper), so the check needs no corpus.
CHECK_PASSAGE = (
    "Lattice Retrieval: Sparse Term Weights for Long Documents (2022). We present LatticeRank, a sparse retriever "
    "that learns term weights per section, and evaluate it on the ArXivSections and PubMedLong collections."
)


class PaperFacts(BaseModel):
    title: str = Field(description="Title as written in the passage")
    year: int = Field(description="Publication year")
    method: str = Field(description="Name of the proposed method")
    datasets: list[str] = Field(max_length=4, description="Datasets or collections evaluated on")


@functools.cache
def check_prompts() -> PromptRegistry:
    """The check's prompt (`strata/llm/prompts/`), loaded and validated once."""
    return PromptRegistry.from_directory(Path(__file__).with_name("prompts"), [PaperFacts])


class CheckReport(BaseModel):
    backend: str
    model: str = Field(description="Model setting, plus the verified weights' identity when loaded")
    model_path: str | None = Field(default=None, description="GGUF file loaded (embedded backend)")
    load_seconds: float | None = Field(default=None, description="Seconds to verify and load the model (embedded)")
    json_ok: bool = Field(description="The answer parsed into the check schema")
    parsed: PaperFacts | None = None
    error: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    prompt_tokens_per_s: float | None = Field(default=None, description="Prompt reading speed (embedded)")
    generation_tokens_per_s: float | None = Field(
        default=None, description="Generation speed; over HTTP, output tokens over the whole request time"
    )


def run_check(settings: Settings | LLMSettings) -> CheckReport:
    """One uncached extraction with the configured backend; failures are reported, not raised."""
    llm = settings.llm if isinstance(settings, Settings) else settings
    report = CheckReport(backend=llm.backend, model=llm.model, json_ok=False)
    try:
        prompt = check_prompts().render(CHECK_PROMPT, passage=CHECK_PASSAGE)
        # The check measures the model, so it never answers from the response cache.
        with make_client(llm, cache=False) as client, tracing() as trace:
            report.model = f"{llm.model} ({client.model})" if client.model != llm.model else llm.model
            report.model_path = str(getattr(client.backend, "model_path", "")) or None
            report.load_seconds = client.backend.load_seconds
            try:
                report.parsed = client.complete(prompt, PaperFacts)
                report.json_ok = True
            finally:
                _add_costs(report, trace.calls)
    except LLMError as error:
        report.error = str(error)
    return report


def _add_costs(report: CheckReport, calls: list[LLMCall]) -> None:
    report.tokens_in = sum(call.tokens_in for call in calls)
    report.tokens_out = sum(call.tokens_out for call in calls)
    report.latency_s = sum(call.latency_s for call in calls)
    timings = [call.timing for call in calls if call.timing is not None]
    if timings:
        prompt_s = sum(timing.prompt_s for timing in timings)
        generation_s = sum(timing.generation_s for timing in timings)
        prompt_tokens = sum(timing.prompt_tokens for timing in timings)
        report.prompt_tokens_per_s = prompt_tokens / prompt_s if prompt_s > 0 else None
        report.generation_tokens_per_s = report.tokens_out / generation_s if generation_s > 0 else None
    elif report.latency_s > 0 and report.tokens_out:
        report.generation_tokens_per_s = report.tokens_out / report.latency_s


def format_check(report: CheckReport) -> str:
    def number(value: float | None, unit: str) -> str:
        return "n/a" if value is None else f"{value:.1f} {unit}"

    lines = [
        f"backend:        {report.backend}",
        f"model:          {report.model}",
        *([f"model file:     {report.model_path}"] if report.model_path else []),
        f"load:           {number(report.load_seconds, 's')}",
        f"JSON valid:     {'yes' if report.json_ok else 'NO'}",
        f"tokens:         {report.tokens_in} in, {report.tokens_out} out, {report.latency_s:.2f} s",
        f"prompt speed:   {number(report.prompt_tokens_per_s, 'tokens/s')}",
        f"generation:     {number(report.generation_tokens_per_s, 'tokens/s')}",
    ]
    if report.parsed is not None:
        lines.append(f"answer:         {report.parsed.model_dump_json()}")
    if report.error:
        lines.append(f"error:          {report.error}")
    return "\n".join(lines)
