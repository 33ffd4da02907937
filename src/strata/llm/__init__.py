"""The LLM layer: one client for every stage, over an embedded GGUF model (default, offline) or an HTTP server.

from strata.llm import make_client, tracing
from strata.llm.check import check_prompts  # each stage loads its own prompts with PromptRegistry.from_directory

with make_client(settings) as client, tracing() as trace:
    prompt = check_prompts().render("check_extract", passage=text)
    facts = client.complete(prompt)                      # parsed pydantic object
    scores = client.score(prompt, ["Methods", "Results"])  # log-probabilities of continuations
print(trace.format())
"""

from strata.llm.backend import (
    Backend,
    ContinuationScore,
    Generation,
    GenerationOptions,
    Scoring,
    calibrated_logprobs,
)
from strata.llm.cache import ResponseCache
from strata.llm.client import LLMClient, make_client
from strata.llm.errors import (
    ContextOverflowError,
    LLMError,
    LLMOutputError,
    LLMRequestError,
    LLMUnavailableError,
    ModelIntegrityError,
    PromptError,
    ScoringNotSupportedError,
)
from strata.llm.templates import Prompt, PromptRegistry, PromptTemplate
from strata.llm.structured import extract_json_object, parse_structured
from strata.llm.trace import EvalTiming, LLMCall, Trace, TraceSummary, active_trace, tracing

__all__ = [
    "Backend",
    "ContextOverflowError",
    "ContinuationScore",
    "EvalTiming",
    "Generation",
    "GenerationOptions",
    "LLMCall",
    "LLMClient",
    "LLMError",
    "LLMOutputError",
    "LLMRequestError",
    "LLMUnavailableError",
    "ModelIntegrityError",
    "Prompt",
    "PromptError",
    "PromptRegistry",
    "PromptTemplate",
    "ResponseCache",
    "Scoring",
    "ScoringNotSupportedError",
    "Trace",
    "TraceSummary",
    "active_trace",
    "calibrated_logprobs",
    "extract_json_object",
    "make_client",
    "parse_structured",
    "tracing",
]
