"""In-process backend: a packaged GGUF model run by llama-cpp-python, output constrained by a JSON-schema grammar."""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

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
from strata.llm.packaged import resolve_model
from strata.llm.trace import EvalTiming

class EmbeddedBackend:
    name = "embedded"

    def __init__(self, settings: LLMSettings) -> None:
        import llama_cpp  # heavy native import, paid only by code that runs a local model

        self._llama_cpp = llama_cpp
        started = time.perf_counter()
        resolved = resolve_model(settings.model, settings.model_dir)
        threads = settings.n_threads or max(1, (os.cpu_count() or 2) // 2)
        self.model = resolved.identity
        self.model_path = resolved.path
        self._llama = llama_cpp.Llama(
            model_path=str(resolved.path),
            n_ctx=settings.n_ctx,
            n_threads=threads,
            n_threads_batch=settings.n_threads_batch or os.cpu_count() or threads,
            seed=settings.seed,
            verbose=False,
        )
        self.load_seconds: float | None = time.perf_counter() - started
        try:
            self._prepare(settings)
        except BaseException:  # no backend is returned to close: free the model now, not whenever __del__ runs
            self._llama.close()
            raise

    def _prepare(self, settings: LLMSettings) -> None:
        from llama_cpp._internals import LlamaTokenDataArray

        llama_cpp = self._llama_cpp

        self._use_grammar = settings.grammar
        self._formatter = self._chat_formatter()
        self._grammars: dict[str, str] = {}
        self._vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        self._vocab_size = self._llama.n_vocab()
        # Reused candidate buffers for grammar checks: the whole vocabulary, and a single token.
        self._candidates = LlamaTokenDataArray(n_vocab=self._vocab_size)
        self._single = LlamaTokenDataArray(n_vocab=1).candidates_data
        self._single_array = llama_cpp.llama_token_data_array(
            data=self._single.ctypes.data_as(llama_cpp.llama_token_data_p), size=1, selected=-1, sorted=False
        )
        # llama.cpp contexts are not thread-safe; one call at a time.
        self._lock = threading.Lock()

    def generate(self, system: str, user: str, schema: dict[str, Any] | None, options: GenerationOptions) -> Generation:
        grammar = None
        if schema is not None:
            if self._use_grammar:
                grammar = self._gbnf(schema)
            else:
                system = with_schema_instruction(system, schema)
        formatted = self._formatter(messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        tokens = self._tokenize_prompt(formatted.prompt)
        room = self._llama.n_ctx() - len(tokens)
        if room < 1:
            raise ContextOverflowError(f"prompt of {len(tokens)} tokens does not fit n_ctx={self._llama.n_ctx()}")
        max_tokens = min(options.max_tokens, room)
        with self._lock:
            if grammar is not None and options.temperature == 0:
                return self._greedy_constrained(tokens, grammar, max_tokens)
            return self._sampled(tokens, formatted.stop, grammar, options, max_tokens)

    def _sampled(
        self, tokens: list[int], stop: Any, grammar: str | None, options: GenerationOptions, max_tokens: int
    ) -> Generation:
        """llama-cpp-python's own sampling loop (temperature > 0, or no grammar)."""
        started = time.perf_counter()
        evaluated = self._load_prompt(tokens)  # so create_completion finds the prompt cached and samples at once
        prompt_s = time.perf_counter() - started
        result = self._llama.create_completion(  # not streamed, so one response
            prompt=tokens,
            max_tokens=max_tokens,
            temperature=options.temperature,
            seed=options.seed,
            grammar=self._llama_cpp.LlamaGrammar.from_string(grammar, verbose=False) if grammar else None,
            stop=stop,
        )
        assert isinstance(result, dict)
        usage = result["usage"]
        return Generation(
            text=result["choices"][0]["text"],
            tokens_in=usage["prompt_tokens"],
            tokens_out=usage["completion_tokens"],
            timing=EvalTiming(
                prompt_tokens=evaluated,
                prompt_s=prompt_s,
                generated_tokens=usage["completion_tokens"],
                generation_s=time.perf_counter() - started - prompt_s,
            ),
        )

    def _greedy_constrained(self, prompt: list[int], grammar: str, max_tokens: int) -> Generation:
        """Greedy decoding under a grammar, checking the grammar only when it matters.

        llama-cpp-python puts the grammar sampler in front of greedy selection, so every token pays for matching the
        whole vocabulary (150k entries for Qwen) against the grammar, which made decoding several times slower here
        (benchmarks/llm.py). Like llama.cpp's own common sampler, this takes the most likely token, asks the grammar
        about that one token, and filters the whole vocabulary only when it is rejected. The result is identical to
        grammar-then-greedy.
        """
        llama_cpp, llama = self._llama_cpp, self._llama
        sampler = llama_cpp.llama_sampler_init_grammar(self._vocab, grammar.encode(), b"root")
        if not sampler:
            raise LLMError("llama.cpp rejected the grammar compiled from the output schema")
        generated: list[int] = []
        try:
            started = time.perf_counter()
            evaluated = self._load_prompt(prompt)
            prompt_s = time.perf_counter() - started
            for _ in range(max_tokens):
                logits = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(self._vocab_size,))
                token = int(np.argmax(logits))
                if not self._grammar_allows(sampler, token):
                    token = self._best_allowed(sampler, logits)
                if token < 0 or llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    break
                llama_cpp.llama_sampler_accept(sampler, token)
                generated.append(token)
                llama.eval([token])
            generation_s = time.perf_counter() - started - prompt_s
        finally:
            llama_cpp.llama_sampler_free(sampler)
        return Generation(
            text=llama.detokenize(generated).decode("utf-8", errors="replace"),
            tokens_in=len(prompt),
            tokens_out=len(generated),
            timing=EvalTiming(
                prompt_tokens=evaluated, prompt_s=prompt_s, generated_tokens=len(generated), generation_s=generation_s
            ),
        )

    def _grammar_allows(self, sampler: Any, token: int) -> bool:
        self._single.id[0], self._single.logit[0], self._single.p[0] = token, 0.0, 0.0
        self._single_array.size, self._single_array.sorted = 1, False
        self._llama_cpp.llama_sampler_apply(sampler, ctypes.byref(self._single_array))
        return bool(np.isfinite(self._single.logit[0]))

    def _best_allowed(self, sampler: Any, logits: np.ndarray) -> int:
        """Most likely token the grammar accepts; -1 when it accepts none."""
        self._candidates.copy_logits(logits)
        self._llama_cpp.llama_sampler_apply(sampler, ctypes.byref(self._candidates.candidates))
        allowed = self._candidates.candidates_data.logit
        best = int(np.argmax(allowed))
        return int(self._candidates.candidates_data.id[best]) if np.isfinite(allowed[best]) else -1

    def score(self, system: str, user: str, continuations: Sequence[str]) -> Scoring:
        """Summed log-probabilities of each continuation as the start of the assistant's answer.

        The prompt is evaluated once; each continuation is decoded on top of its KV cache and then removed from it,
        so scoring N continuations costs one prompt plus N short decodes. llama-cpp-python's high-level API only
        keeps per-position logits for models loaded with logits_all (which slows every prompt), so this uses its
        context and batch objects directly (pinned llama-cpp-python 0.3.36).
        """
        formatted = self._formatter(messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        prompt = self._tokenize_prompt(formatted.prompt)
        if len(prompt) >= self._llama.n_ctx():
            raise ContextOverflowError(f"prompt of {len(prompt)} tokens does not fit n_ctx={self._llama.n_ctx()}")
        scores: list[ContinuationScore] = []
        with self._lock:
            self._load_prompt(prompt[:-1])
            for continuation in continuations:
                tokens = self._llama.tokenize(continuation.encode(), add_bos=False, special=False)
                scores.append(
                    ContinuationScore(
                        continuation=continuation,
                        logprob=self._continuation_logprob(prompt, tokens),
                        n_tokens=len(tokens),
                    )
                )
        return Scoring(scores=scores, tokens_in=len(prompt) + sum(score.n_tokens for score in scores))

    def tokenize_answer(self, text: str) -> list[int]:
        """Token ids of `text` written as (part of) an answer: no BOS, special-token names kept as plain text."""
        return self._llama.tokenize(text.encode(), add_bos=False, special=False)

    @property
    def end_of_answer_token(self) -> int:
        return int(self._llama.token_eos())

    def next_token_logprobs(self, system: str, user: str, answer: Sequence[int]) -> np.ndarray:
        """Natural-log probabilities over the vocabulary of the answer's next token, after its first tokens `answer`.

        The KV cache keeps the longest prefix shared with the previous call, so a search through allowed answers
        (a trie of section labels) on one prompt, or prompts that share a long beginning (a document's table of
        contents before different questions), evaluate only the tokens that differ.
        """
        formatted = self._formatter(messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        tokens = self._tokenize_prompt(formatted.prompt) + list(answer)
        if len(tokens) >= self._llama.n_ctx():
            raise ContextOverflowError(f"prompt of {len(tokens)} tokens does not fit n_ctx={self._llama.n_ctx()}")
        with self._lock:
            self._load_prompt(tokens)
            logits = np.ctypeslib.as_array(self._llama._ctx.get_logits_ith(-1), shape=(self._vocab_size,))
            row = logits.astype(np.float64)
        peak = row.max()
        return row - (peak + np.log(np.exp(row - peak).sum()))

    def forget_prompt_cache(self) -> None:
        """Drop the KV cache so the next call reads its whole prompt again (for speed measurements)."""
        with self._lock:
            self._llama.reset()

    def close(self) -> None:
        self._llama.close()

    def _load_prompt(self, tokens: list[int]) -> int:
        """Make the KV cache hold exactly `tokens`, reusing the prefix it already holds; returns tokens evaluated.

        At least the last two tokens are evaluated again: the context's logits are then those after `tokens`, and
        the batch is never a single token, whose different matrix kernel would shift log-probabilities slightly
        (scores would then depend on what was cached before; with batches of two or more they are identical).
        """
        llama = self._llama
        cached = llama.input_ids[: llama.n_tokens].tolist()
        shared = 0
        for old, new in zip(cached, tokens[: max(len(tokens) - 2, 0)], strict=False):
            if old != new:
                break
            shared += 1
        llama.n_tokens = shared
        llama.eval(tokens[shared:])  # eval first drops KV entries at and after n_tokens
        return len(tokens) - shared

    def _continuation_logprob(self, prompt: list[int], continuation: list[int]) -> float:
        """Decode the prompt's last token plus the continuation; row i of the logits predicts continuation[i]."""
        if not continuation:
            return 0.0
        llama = self._llama
        start = len(prompt) - 1
        batch_tokens = [prompt[-1], *continuation]
        if len(batch_tokens) > llama.n_batch:
            raise LLMError(f"continuation of {len(continuation)} tokens exceeds n_batch={llama.n_batch}")
        if start + len(batch_tokens) > llama.n_ctx():
            raise ContextOverflowError(f"prompt plus continuation exceed n_ctx={llama.n_ctx()}")
        context, batch = llama._ctx, llama._batch
        context.kv_cache_seq_rm(-1, start, -1)
        batch.set_batch(batch=batch_tokens, n_past=start, logits_all=True)
        context.decode(batch)
        logits = np.ctypeslib.as_array(context.get_logits(), shape=(len(batch_tokens), self._vocab_size))
        rows = logits[: len(continuation)].astype(np.float64)
        peak = rows.max(axis=1, keepdims=True)
        log_normaliser = (peak + np.log(np.exp(rows - peak).sum(axis=1, keepdims=True)))[:, 0]
        token_logprobs = rows[np.arange(len(continuation)), continuation] - log_normaliser
        # Leave the cache holding the prompt minus its last token, so the next call re-decodes from a valid state.
        context.kv_cache_seq_rm(-1, start, -1)
        return float(token_logprobs.sum())

    def _tokenize_prompt(self, text: str) -> list[int]:
        # The chat template already wrote any BOS token it wants.
        return self._llama.tokenize(text.encode(), add_bos=False, special=True)

    def _chat_formatter(self) -> Any:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama = self._llama
        eos, bos = llama.token_eos(), llama.token_bos()
        return Jinja2ChatFormatter(
            template=llama.metadata.get("tokenizer.chat_template", CHATML),
            eos_token=llama.detokenize([eos], special=True).decode(errors="replace") if eos != -1 else "",
            bos_token=llama.detokenize([bos], special=True).decode(errors="replace") if bos != -1 else "",
        )

    def _gbnf(self, schema: dict[str, Any]) -> str:
        """GBNF grammar text for a JSON schema (llama.cpp's converter), compiled once per schema."""
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        key = json.dumps(schema)  # property order is kept: the grammar makes the model write fields in that order
        if key not in self._grammars:
            self._grammars[key] = json_schema_to_gbnf(key)
        return self._grammars[key]
