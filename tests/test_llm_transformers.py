"""The transformers backend on the packaged SmolLM2-135M fixture, on the CPU: scores as reading each continuation
whole, batches answering as one prompt at a time, a prompt over n_ctx refused in its place."""

from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from strata.config import LLMSettings
from strata.llm import ContextOverflowError, Generation, LLMClient, Prompt, make_client
from strata.llm.backend import GenerationOptions

GREEDY = GenerationOptions(max_tokens=12, temperature=0, seed=0)


@pytest.fixture(scope="module")
def smol(tmp_path_factory) -> LLMClient:
    settings = LLMSettings(backend="transformers", model="packaged:smollm2-135m", device="cpu", n_threads=2,
                           model_dir=tmp_path_factory.mktemp("models"), cache=False, n_ctx=512, batch_size=2)  # fmt: skip
    client = make_client(settings)
    yield client
    client.close()


def test_scores_equal_reading_the_prompt_and_each_continuation_whole(smol):
    import torch

    backend = smol.backend
    continuations = ["yes", "No", "maybe, it depends"]
    scoring = backend.score("You judge claims.", "Is the sky blue? Answer yes or no.", continuations)
    prompt = backend._prompt_tokens("You judge claims.", "Is the sky blue? Answer yes or no.", None)
    for text, score in zip(continuations, scoring.scores, strict=True):
        piece = backend._tokenizer.encode(text, add_special_tokens=False)
        with torch.inference_mode():
            logits = backend._model(torch.tensor([prompt + piece])).logits.float()
        rows = torch.log_softmax(logits[0, len(prompt) - 1 : -1], dim=-1)
        assert score.n_tokens == len(piece)
        assert score.logprob == pytest.approx(float(rows[torch.arange(len(piece)), torch.tensor(piece)].sum()), abs=1e-3)


def test_a_batch_answers_as_one_prompt_at_a_time_and_an_overlong_prompt_gets_its_error_in_place(smol):
    backend = smol.backend
    requests = [
        ("You are terse.", "Name a colour.", None),
        ("You are terse.", "Write the number seven as JSON.", {"type": "object", "properties": {"n": {}}}),
        ("You are terse.", "word " * 600, None),
        ("You are terse.", "Say hello to the reader of this long and winding question, please.", None),
    ]
    answers = backend.generate_batch(requests, GREEDY)
    assert isinstance(answers[2], ContextOverflowError)
    for request, answer in zip(requests[:2] + requests[3:], answers[:2] + answers[3:], strict=True):
        assert isinstance(answer, Generation) and 0 < answer.tokens_out <= GREEDY.max_tokens
        assert backend.generate(*request, GREEDY).text == answer.text


class Bounded(BaseModel):
    colour: str = Field(max_length=12)
    words: list[Annotated[str, Field(max_length=16)]] = Field(min_length=1, max_length=3)


def test_answers_keep_to_their_schema_as_the_embedded_grammar_makes_them(smol):
    """The tiny model writes malformed JSON when free (MODELS.md); the schema's token masks make it valid, bounds
    included."""
    prompt = Prompt(name="bounded", system="You answer in JSON.", user="Describe the sea in a colour and words.")
    answers = smol.complete_many([(prompt, Bounded), (prompt.model_copy(update={"user": "Describe a forest."}), Bounded)])
    assert all(isinstance(answer, Bounded) and 1 <= len(answer.words) <= 3 for answer in answers)
