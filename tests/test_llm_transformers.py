"""The transformers backend on the packaged SmolLM2-135M fixture, on the CPU: scores as reading each continuation
whole, batches answering as one prompt at a time, a prompt over n_ctx refused in its place, answers kept to closed
JSON objects."""

import json
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from strata.config import LLMSettings
from strata.llm import ContextOverflowError, Generation, LLMClient, Prompt, make_client
from strata.llm.backend import GenerationOptions
from strata.llm.transformers_backend import close_objects, mask_scores

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
    continuations = ["yes", "", "No", "maybe, it depends", "<|im_end|>"]
    scoring = backend.score("You judge claims.", "Is the sky blue? Answer yes or no.", continuations)
    prompt = backend._prompt_tokens("You judge claims.", "Is the sky blue? Answer yes or no.", None)
    assert scoring.scores[1].logprob == 0.0 and scoring.scores[1].n_tokens == 0
    assert scoring.scores[4].n_tokens > 1  # a special token's name, scored as the text it is
    for text, score in zip(continuations, scoring.scores, strict=True):
        if not text:
            continue
        piece = backend._tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        with torch.inference_mode():
            logits = backend._model(torch.tensor([prompt + piece])).logits.float()
        rows = torch.log_softmax(logits[0, len(prompt) - 1 : -1], dim=-1)
        assert score.n_tokens == len(piece)
        whole = float(rows[torch.arange(len(piece)), torch.tensor(piece)].sum())
        assert score.logprob == pytest.approx(whole, abs=1e-3)


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
    forest = prompt.model_copy(update={"user": "Describe a forest."})
    answers = smol.complete_many([(prompt, Bounded), (forest, Bounded)])
    assert all(isinstance(answer, Bounded) and 1 <= len(answer.words) <= 3 for answer in answers)


def test_a_schema_answer_is_a_closed_object_with_little_whitespace(smol):
    """pydantic writes no additionalProperties: the grammar still admits only the named key, then the end."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    options = GenerationOptions(max_tokens=40, temperature=0, seed=0)
    asked = "Give a and b, two numbers, and a list of fruits."
    answer = smol.backend.generate("You answer in JSON.", asked, schema, options)
    assert set(json.loads(answer.text)) == {"a"}
    assert "  " not in answer.text


def test_close_objects_closes_only_objects_that_say_nothing():
    schema = {
        "type": "object",
        "properties": {
            "inner": {"$ref": "#/$defs/Inner"},
            "free": {"type": "object", "additionalProperties": True},
            "properties": {"type": "array", "items": {"type": "object", "properties": {"y": {"type": "integer"}}}},
        },
        "$defs": {"Inner": {"anyOf": [{"type": "object", "properties": {"x": {}}}, {"type": "null"}]}},
    }
    closed = close_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["$defs"]["Inner"]["anyOf"][0]["additionalProperties"] is False
    assert closed["properties"]["free"]["additionalProperties"] is True
    # a field named "properties" is a schema, not a list of properties: closed inside, never given a fake field
    assert set(closed["properties"]) == {"inner", "free", "properties"}
    assert closed["properties"]["properties"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # the caller's schema is left as it was


def test_mask_scores_keeps_exactly_the_tokens_whose_bits_are_set():
    import torch

    scores = torch.zeros(2, 70)
    bitmask = torch.zeros(2, 2, dtype=torch.int32)  # 64 tokens' bits: tokens 64..69 lie past the mask
    bitmask[0, 0] = 0b101  # tokens 0 and 2
    bitmask[1, 1] = -(2**31)  # token 63, the sign bit
    masked = mask_scores(scores, bitmask)
    assert torch.isfinite(masked[0]).nonzero().flatten().tolist() == [0, 2]
    assert torch.isfinite(masked[1]).nonzero().flatten().tolist() == [63]


def test_every_prompt_answer_schema_compiles_to_a_token_mask(smol):
    from strata.llm.check import check_prompts
    from strata.read.model import read_prompts
    from strata.rerank.model import rerank_prompts
    from strata.retrieve.rounds import retrieve_prompts
    from strata.toc.model import toc_prompts
    from strata.train.pairs import training_prompts

    registries = [loader() for loader in (check_prompts, read_prompts, rerank_prompts, retrieve_prompts, toc_prompts,
                                          training_prompts)]  # fmt: skip
    models = {registry.get(name).output_model for registry in registries for name in registry.names()}
    assert len(models) > 5
    for model in sorted(models, key=lambda model: model.__name__):
        assert smol.backend._constraints([json.dumps(model.model_json_schema())], width=1), model.__name__
