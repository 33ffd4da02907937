"""The packaged GGUF weights dequantised into transformers: the same model as the embedded backend, run where llama.cpp
is slow (a GPU), and batched: `generate_batch` decodes many prompts in one pass, which bulk jobs (`strata features`)
use. With `llm.grammar`, answers are constrained to their JSON schema as the embedded backend's are (llguidance's
token masks, computed for the whole batch in Rust at each step, where llama.cpp compiles the schema to GBNF; both
close objects to the keys the schema names and allow little whitespace, see `schema_grammar`). Prompts longer than
`llm.n_ctx` are refused like the embedded backend's. On a 2-core CPU llama.cpp is faster, batches included."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from typing import Any

from strata.config import LLMSettings
from strata.llm.backend import (
    CHATML,
    ContinuationScore,
    Generation,
    GenerationOptions,
    Scoring,
    with_schema_instruction,
)
from strata.llm.errors import ContextOverflowError, LLMError
from strata.llm.hf import load_base_model, resolve_device
from strata.llm.trace import EvalTiming

Request = tuple[str, str, dict[str, Any] | None]  # (system, user, output JSON schema or None)


class TransformersBackend:
    name = "transformers"

    def __init__(self, settings: LLMSettings) -> None:
        import torch

        started = time.perf_counter()
        self.device = resolve_device(settings.device, "llm.device")
        self._torch = torch
        self._model, self._tokenizer, self.model = load_base_model(
            settings.model, settings.model_dir, self.device, settings.n_threads
        )
        self.load_seconds: float | None = time.perf_counter() - started
        self.n_ctx = settings.n_ctx
        self.batch_size = settings.batch_size
        self._template = self._tokenizer.chat_template or CHATML
        self._stops = sorted(
            {token for token in (self._tokenizer.eos_token_id, self._token("<|im_end|>")) if token is not None}
        )
        self._use_grammar = settings.grammar
        self._grammar_tokenizer: Any = None  # built on the first constrained answer (~1 s)

    def generate(self, system: str, user: str, schema: dict[str, Any] | None, options: GenerationOptions) -> Generation:
        answer = self.generate_batch([(system, user, schema)], options)[0]
        if isinstance(answer, LLMError):
            raise answer
        return answer

    def generate_batch(self, requests: Sequence[Request], options: GenerationOptions) -> list[Generation | LLMError]:
        """Greedy (or sampled) answers to `requests`, `llm.batch_size` prompts per pass, the longest first so each
        pass pads little; a prompt over `n_ctx` gets ContextOverflowError in its place, the others their answer."""
        # With the grammar the schema constrains the answer; without it the system text spells the schema out.
        grammars = [json.dumps(schema) if schema and self._use_grammar else None for _, _, schema in requests]
        prompts = [
            self._prompt_tokens(system, user, None if grammar else schema)
            for (system, user, schema), grammar in zip(requests, grammars, strict=True)
        ]
        answers: list[Generation | LLMError] = [
            ContextOverflowError(f"prompt of {len(tokens)} tokens does not fit n_ctx={self.n_ctx}")
            for tokens in prompts
        ]
        fitting = [index for index, tokens in enumerate(prompts) if len(tokens) < self.n_ctx]
        fitting.sort(key=lambda index: -len(prompts[index]))
        for start in range(0, len(fitting), self.batch_size):
            chunk = fitting[start : start + self.batch_size]
            room = self.n_ctx - max(len(prompts[i]) for i in chunk)
            decoded = self._decode([prompts[i] for i in chunk], [grammars[i] for i in chunk], options, room)
            for index, answer in zip(chunk, decoded, strict=True):
                answers[index] = answer
        return answers

    def _decode(
        self, prompts: list[list[int]], grammars: list[str | None], options: GenerationOptions, room: int
    ) -> list[Generation]:
        torch = self._torch
        started = time.perf_counter()
        width = max(len(tokens) for tokens in prompts)
        pad = self._tokenizer.pad_token_id
        # Left padding, so every answer starts at the same position.
        ids = torch.tensor([[pad] * (width - len(t)) + t for t in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in prompts], device=self.device)
        sampling: dict[str, Any] = {"do_sample": False}
        if options.temperature > 0:
            torch.manual_seed(options.seed)
            sampling = {"do_sample": True, "temperature": options.temperature, "top_k": 0, "top_p": 1.0}
        with torch.inference_mode():
            output = self._model.generate(  # type: ignore[operator]
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=min(options.max_tokens, room),
                eos_token_id=self._stops,
                pad_token_id=pad,
                logits_processor=self._constraints(grammars, width),
                **sampling,
            )
        seconds = (time.perf_counter() - started) / len(prompts)
        answers = []
        for tokens, row in zip(prompts, output[:, width:].tolist(), strict=True):
            generated = self._until_stop(row)
            answers.append(
                Generation(
                    text=str(self._tokenizer.decode(generated, skip_special_tokens=True)),
                    tokens_in=len(tokens),
                    tokens_out=len(generated),
                    # one pass answers the whole batch: each answer is charged its share of the wall clock
                    timing=EvalTiming(
                        prompt_tokens=len(tokens), prompt_s=0.0, generated_tokens=len(generated), generation_s=seconds
                    ),
                )
            )
        return answers

    def _constraints(self, grammars: list[str | None], width: int) -> list[Any] | None:
        """The logits processor that keeps each row inside its JSON schema; None when no row has one."""
        if not any(grammars):
            return None
        import llguidance.hf

        if self._grammar_tokenizer is None:
            self._grammar_tokenizer = llguidance.hf.from_tokenizer(
                self._tokenizer,  # type: ignore[arg-type]  # a fast tokenizer, as GGUF files load into one
                n_vocab=self._model.config.vocab_size,
                eos_token=self._stops,
            )
        return [SchemaConstraint(self._grammar_tokenizer, grammars, width)]

    def _until_stop(self, row: list[int]) -> list[int]:
        for position, token in enumerate(row):
            if token in self._stops:
                return row[:position]
        return row

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        """Summed log-probabilities of each continuation as the start of the answer: the prompt is read once, then
        every non-empty continuation is decoded on a copy of its KV cache in one batch (an empty one scores 0)."""
        prompt = self._prompt_tokens(system, user, None)
        if len(prompt) >= self.n_ctx:
            raise ContextOverflowError(f"prompt of {len(prompt)} tokens does not fit n_ctx={self.n_ctx}")
        pieces = [self.tokenize_answer(text) for text in continuations]
        if len(prompt) + max((len(piece) for piece in pieces), default=0) > self.n_ctx:
            raise ContextOverflowError(f"prompt plus continuation exceed n_ctx={self.n_ctx}")
        logprobs = iter(self._continuation_logprobs(prompt, [piece for piece in pieces if piece]))
        scores = [
            ContinuationScore(continuation=text, logprob=next(logprobs) if piece else 0.0, n_tokens=len(piece))
            for text, piece in zip(continuations, pieces, strict=True)
        ]
        return Scoring(scores=scores, tokens_in=len(prompt) + sum(len(piece) for piece in pieces))

    def _continuation_logprobs(self, prompt: list[int], pieces: list[list[int]]) -> list[float]:
        if not pieces:
            return []
        torch = self._torch
        longest = max(len(piece) for piece in pieces)
        with torch.inference_mode():
            # The prompt's logits are never read: keep one position's, not a vocabulary-wide row per prompt token.
            cached = self._model(
                torch.tensor([prompt[:-1]], device=self.device), use_cache=True, logits_to_keep=1
            ).past_key_values
            cached.batch_repeat_interleave(len(pieces))
            # Each row: the prompt's last token, then the continuation, right-padded; row i of the logits predicts
            # token i of the continuation.
            rows = [[prompt[-1], *piece] + [0] * (longest - len(piece)) for piece in pieces]
            mask = [[1] * len(prompt) + [1] * len(piece) + [0] * (longest - len(piece)) for piece in pieces]
            logits = self._model(
                torch.tensor(rows, device=self.device),
                attention_mask=torch.tensor(mask, device=self.device),
                past_key_values=cached,
                use_cache=True,
            ).logits[:, :-1].float()
            positions = torch.arange(longest, device=self.device)
            targets = torch.tensor([piece + [0] * (longest - len(piece)) for piece in pieces], device=self.device)
            picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(dim=-1)
            lengths = torch.tensor([len(piece) for piece in pieces], device=self.device)
            picked = picked.masked_fill(positions.unsqueeze(0) >= lengths.unsqueeze(1), 0.0)
        return [float(total) for total in picked.sum(dim=1).tolist()]

    def tokenize_answer(self, text: str) -> list[int]:
        """Token ids of `text` written as (part of) an answer, as the embedded backend's `tokenize_answer`: no BOS,
        special-token names kept as plain text."""
        return list(self._tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    def close(self) -> None:
        del self._model
        if self.device == "cuda":
            self._torch.cuda.empty_cache()

    def _prompt_tokens(self, system: str, user: str, schema: dict[str, Any] | None) -> list[int]:
        if schema is not None:
            system = with_schema_instruction(system, schema)
        text = self._tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            chat_template=self._template,
            add_generation_prompt=True,
            tokenize=False,
        )
        # The chat template already wrote any BOS token it wants.
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def _token(self, text: str) -> int | None:
        token = self._tokenizer.convert_tokens_to_ids(text)
        return token if isinstance(token, int) and token != self._tokenizer.unk_token_id else None


# As llama-cpp-python's schema-to-GBNF conversion: at most one space between JSON tokens (llguidance's default is
# unlimited whitespace, which lets a small model pad until max_tokens).
JSON_OPTIONS = {"whitespace_flexible": False, "whitespace_pattern": " ?"}


@functools.lru_cache(maxsize=64)
def schema_grammar(schema: str) -> str:
    """The llguidance grammar of a JSON schema, every object closed to keys it does not name, as llama-cpp-python
    closes an object whose schema says nothing (pydantic writes `additionalProperties` only where a model forbids
    extras; an open object only gives the model room to ramble)."""
    import llguidance

    closed = json.dumps(close_objects(json.loads(schema)))
    return str(llguidance.LLMatcher.grammar_from_json_schema(closed, defaults=JSON_OPTIONS))  # type: ignore[arg-type]


# Where a JSON schema nests schemas (not data: `default`, `examples`, `enum` and `const` values are left as written).
SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_VALUES = ("items", "additionalProperties", "not", "if", "then", "else")


def close_objects(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on every object schema that lists properties and says nothing."""
    if not isinstance(schema, dict):
        return schema
    closed = dict(schema)
    for key in SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            closed[key] = {name: close_objects(value) for name, value in schema[key].items()}
    for key in SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            closed[key] = [close_objects(value) for value in schema[key]]
    for key in SCHEMA_VALUES:
        if isinstance(schema.get(key), dict):
            closed[key] = close_objects(schema[key])
    if "properties" in closed and "additionalProperties" not in closed:
        closed["additionalProperties"] = False
    return closed


class SchemaConstraint:
    """A transformers logits processor: each row's next token limited to those its JSON schema allows after what the
    row has written (a row without a schema is free). llguidance fills the rows' masks in parallel."""

    def __init__(self, tokenizer: Any, grammars: list[str | None], width: int) -> None:
        import llguidance
        import llguidance.torch

        self._torch_ll = llguidance.torch
        self._executor = llguidance.LLExecutor()
        compiled = {grammar: self._matcher(tokenizer, grammar) for grammar in set(grammars) if grammar is not None}
        self._matchers = [None if grammar is None else compiled[grammar].deep_copy() for grammar in grammars]
        self._width = width
        self._mask = llguidance.torch.allocate_token_bitmask(len(grammars), tokenizer.vocab_size)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if input_ids.shape[1] > self._width:  # the token each row wrote last step
            for matcher, token in zip(self._matchers, input_ids[:, -1].tolist(), strict=True):
                if matcher is not None and not matcher.is_stopped():
                    matcher.consume_token(token)
        self._mask.fill_(-1)  # every token allowed, for rows without a schema
        constrained = [(matcher, row) for row, matcher in enumerate(self._matchers) if matcher is not None]
        self._torch_ll.fill_next_token_bitmask_par(self._executor, constrained, self._mask)
        return mask_scores(scores, self._mask.to(scores.device))

    @staticmethod
    def _matcher(tokenizer: Any, grammar: str) -> Any:
        import llguidance

        matcher = llguidance.LLMatcher(tokenizer, schema_grammar(grammar))
        if matcher.is_error():
            raise LLMError(f"the answer's JSON schema cannot be enforced: {matcher.get_error()}")
        return matcher


def mask_scores(scores: Any, bitmask: Any) -> Any:
    """`scores` with every token whose bit is 0 in `bitmask` (32 tokens per int32, low bit first) set to -inf.
    llguidance.torch.apply_token_bitmask_inplace does the same under torch.compile, which needs a C compiler and
    compiles for minutes on a first call; these few tensor operations cost nothing beside a forward pass. Unpacked
    byte by byte (little-endian words: byte k holds tokens 8k..8k+7), so the temporaries are bytes, not int32s."""
    import torch

    packed = bitmask.contiguous().view(torch.uint8)
    bits = torch.arange(8, device=packed.device, dtype=torch.uint8)
    allowed = ((packed.unsqueeze(-1) >> bits) & 1).view(torch.bool).reshape(packed.shape[0], -1)
    vocabulary = scores.shape[1]
    if allowed.shape[1] < vocabulary:  # tokens past the mask's width are never allowed
        allowed = torch.nn.functional.pad(allowed, (0, vocabulary - allowed.shape[1]), value=False)
    return scores.masked_fill(~allowed[:, :vocabulary], float("-inf"))
