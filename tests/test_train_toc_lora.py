"""LoRA fine-tuning pieces on a tiny random Llama (no model file): the shared-prefix loss equals the plain loss,
training lowers it, constrained beam search only returns real leaves, and a saved adapter loads back identically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from strata.config import TocSettings  # noqa: E402
from strata.toc.adapter import ADAPTER_META, ANSWER_FORMAT, AdapterMeta, load_adapter, save_adapter  # noqa: E402
from strata.toc.decode import generate_texts, rank_prompts  # noqa: E402
from strata.toc.encode import Example  # noqa: E402
from strata.toc.trie import LabelTrie  # noqa: E402
from strata.train.toc_lora import _loss, train_adapter  # noqa: E402

END, PAD = 2, 0


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny matrices: a second thread only adds synchronisation, which costs seconds on a busy machine.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


LABELS = {"1": [10, 11, 12], "2": [10, 13], "3": [14, 15, 16, 17]}
TOC_PREFIX = [1, 20, 21, 22, 23]


def tiny_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=PAD,
        eos_token_id=END,
    )
    return transformers.LlamaForCausalLM(config).eval()


class Encoder:
    """The parts of PromptEncoder that training and ranking use."""

    end_token = END

    class tokenizer:  # noqa: N801 - mimics the attribute of PromptEncoder
        pad_token_id = PAD

        @staticmethod
        def decode(tokens, skip_special_tokens):
            return " ".join(map(str, tokens))


def example(leaf: str, question: list[int]) -> Example:
    # A shared 'ToC' prefix, then the question, then the label and the end token.
    return Example(
        paper_id="p",
        leaf=leaf,
        prompt_ids=[*TOC_PREFIX, *question],
        answer_ids=[*LABELS[leaf], END],
        query_start=len(TOC_PREFIX),
    )


TRAIN = [example("1", [30, 31]), example("2", [32]), example("3", [33, 34, 35])]


def plain_loss(model, batch) -> float:
    total, count = 0.0, 0
    for item in batch:
        logits = model(input_ids=torch.tensor([item.prompt_ids + item.answer_ids])).logits[0]
        n = len(item.answer_ids)
        answer = torch.tensor(item.answer_ids)
        total += float(torch.nn.functional.cross_entropy(logits[-n - 1 : -1], answer, reduction="sum").detach())
        count += n
    return total / count


def test_shared_prefix_loss_equals_the_loss_of_whole_sequences():
    model = tiny_model()
    with torch.no_grad():
        assert float(_loss(model, TRAIN, PAD, "cpu")) == pytest.approx(plain_loss(model, TRAIN), rel=1e-5)


def test_constrained_beam_search_returns_only_real_leaves_best_first():
    model = tiny_model()
    trie = LabelTrie(LABELS, END)
    ranked = rank_prompts(model, Encoder(), [e.prompt_ids for e in TRAIN], trie, k=3, beam_width=3, batch_size=2)
    for leaves in ranked:
        assert sorted(number for number, _ in leaves) == ["1", "2", "3"]
        scores = [score for _, score in leaves]
        assert scores == sorted(scores, reverse=True) and all(score <= 0 for score in scores)


def test_training_fits_the_examples_and_a_saved_adapter_loads_back_identically(tmp_path: Path):
    settings = TocSettings(
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        learning_rate=5e-2,
        batch_size=3,
        max_steps=30,
        eval_every_steps=10,
        adapt_toc=True,
    )
    trie = LabelTrie(LABELS, END)
    model = tiny_model()
    before = plain_loss(model, TRAIN)
    tuned, report = train_adapter(model, Encoder(), "stair", TRAIN, TRAIN, {"p": trie}, settings, 1, lambda _: None)
    with torch.no_grad():
        after = plain_loss(tuned, TRAIN)
    assert after < before - 0.2 and report.steps == 30 and [c.step for c in report.checks] == [10, 20, 30]
    # Early stopping keeps the weights of the best dev check.
    assert report.best_dev_r1 == max(c.dev_r1 for c in report.checks) > 0
    # Each step runs the shared ToC once and every example's question and answer; dev checks are not training time.
    per_step = len(TOC_PREFIX) + sum(len(e.prompt_ids) - len(TOC_PREFIX) + len(e.answer_ids) for e in TRAIN)
    assert report.tokens == 30 * per_step and 0 < report.train_seconds < report.seconds
    meta = AdapterMeta(
        mode="stair", base_model="tiny", paper_ids=["p"], lora_r=4, lora_alpha=8, answer_format=ANSWER_FORMAT
    )
    save_adapter(tuned, tmp_path / "stair", meta)
    probe = torch.tensor([TRAIN[2].prompt_ids])
    with torch.no_grad():
        expected = tuned(input_ids=probe).logits
        reloaded = load_adapter(tuned.unload(), tmp_path / "stair", "tiny")
        assert torch.allclose(reloaded(input_ids=probe).logits, expected, atol=1e-6)
    with pytest.raises(ValueError, match="trained on tiny"):
        load_adapter(reloaded.unload(), tmp_path / "stair", "other-weights")
    # An adapter saved before the answer format was recorded wrote the number first: refused, not misread.
    older = meta.model_dump(exclude={"answer_format"})
    (tmp_path / "stair" / ADAPTER_META).write_text(json.dumps(older))
    with pytest.raises(ValueError, match="train it again"):
        load_adapter(tiny_model(), tmp_path / "stair", "tiny")


def test_one_prompt_at_a_time_reuses_the_shared_prefix_cache_with_identical_results():
    model = tiny_model()
    trie = LabelTrie(LABELS, END)
    toc_prefix = [1, *range(20, 60)]  # 41 shared tokens: enough to be cached once and copied
    prompts = [toc_prefix + [30, 31], toc_prefix + [32], toc_prefix + [33, 34, 35]]
    alone = rank_prompts(model, Encoder(), prompts, trie, k=3, beam_width=3, batch_size=1)
    batched = rank_prompts(model, Encoder(), prompts, trie, k=3, beam_width=3, batch_size=3)
    assert [[key for key, _ in r] for r in alone] == [[key for key, _ in r] for r in batched]
    for one, many in zip(alone, batched):
        assert [score for _, score in one] == pytest.approx([score for _, score in many], abs=1e-4)
    assert generate_texts(model, Encoder(), prompts, 1, 5) == generate_texts(model, Encoder(), prompts, 3, 5)


def test_a_batch_after_a_given_prefix_cache_answers_as_one_prompt_at_a_time():
    # The GPU path: many questions of different lengths per generate() call on one cached ToC reading, padded
    # between the ToC and each question; ranks, scores and free text must be those of one question at a time.
    from strata.toc.decode import PrefixCache

    model = tiny_model()
    trie = LabelTrie(LABELS, END)
    toc_prefix = [1, *range(20, 60)]
    prompts = [toc_prefix + [30, 31], toc_prefix + [32], toc_prefix + [33, 34, 35], toc_prefix + [36]]
    prefix = PrefixCache(model, toc_prefix, base=False)
    for k, beams in ((1, 1), (3, 3)):
        alone = rank_prompts(model, Encoder(), prompts, trie, k, beams, 1, prefix)
        batched = rank_prompts(model, Encoder(), prompts, trie, k, beams, 3, prefix)
        assert [[key for key, _ in r] for r in alone] == [[key for key, _ in r] for r in batched]
        for one, many in zip(alone, batched):
            assert [score for _, score in one] == pytest.approx([score for _, score in many], abs=1e-4)
    assert generate_texts(model, Encoder(), prompts, 1, 5, prefix) == generate_texts(model, Encoder(), prompts, 3, 5,
                                                                                     prefix)


def base_read_loss(model, batch, adapter: bool = True) -> float:
    """The loss when the base model reads the ToC prefix and the adapter the rest, computed whole per example."""
    from contextlib import nullcontext

    from transformers import DynamicCache

    total, count = 0.0, 0
    for item in batch:
        with model.disable_adapter() if adapter else nullcontext():
            cache = model(input_ids=torch.tensor([TOC_PREFIX]), use_cache=True).past_key_values
        rest = item.prompt_ids[len(TOC_PREFIX) :] + item.answer_ids
        assert isinstance(cache, DynamicCache)
        logits = model(input_ids=torch.tensor([rest]), past_key_values=cache).logits[0]
        n = len(item.answer_ids)
        answer = torch.tensor(item.answer_ids)
        total += float(torch.nn.functional.cross_entropy(logits[-n - 1 : -1], answer, reduction="sum").detach())
        count += n
    return total / count


def test_with_the_toc_read_by_the_base_model_training_fits_only_what_follows_it_and_ranking_reads_it_the_same_way():
    from strata.toc.decode import PrefixCache

    settings = TocSettings(
        lora_r=4, lora_alpha=8, lora_dropout=0.0, learning_rate=1e-2, batch_size=3, max_steps=30, eval_every_steps=10
    )
    assert settings.adapt_toc is False  # the CPU default
    trie = LabelTrie(LABELS, END)
    model = tiny_model()
    with torch.no_grad():
        untrained = base_read_loss(model, TRAIN, adapter=False)
        base_keys = model(input_ids=torch.tensor([TOC_PREFIX]), use_cache=True).past_key_values.layers[0].keys
    tuned, report = train_adapter(model, Encoder(), "stair", TRAIN, TRAIN, {"p": trie}, settings, 1, lambda _: None)
    with torch.no_grad():
        prefix = PrefixCache(tuned, TOC_PREFIX, base=True)
        # The batched loss over the cached base reading equals the loss computed example by example, and fell.
        assert float(_loss(tuned, TRAIN, PAD, "cpu", prefix)) == pytest.approx(base_read_loss(tuned, TRAIN), rel=1e-5)
        assert base_read_loss(tuned, TRAIN) < untrained - 0.3
    # The ToC part of the cache is the base model's: the adapter changed nothing there.
    assert torch.allclose(prefix.cache.layers[0].keys, base_keys, atol=1e-6)
    # Ranking reads the ToC as training did: its R@1 is the dev check's, its scores differ from an adapted reading.
    prompts = [e.prompt_ids for e in TRAIN]
    greedy = rank_prompts(tuned, Encoder(), prompts, trie, 1, 1, 1, prefix)
    assert sum(top[0][0] == e.leaf for top, e in zip(greedy, TRAIN)) / len(TRAIN) == report.best_dev_r1
    based = rank_prompts(tuned, Encoder(), prompts, trie, 3, 3, 1, prefix)
    adapted = rank_prompts(tuned, Encoder(), prompts, trie, 3, 3, 1)
    assert [score for _, score in based[0]] != pytest.approx([score for _, score in adapted[0]], abs=1e-6)
    with pytest.raises(ValueError, match="does not continue the cached ToC prefix"):
        rank_prompts(tuned, Encoder(), [[1, 20, 30, 31]], trie, 1, 1, 1, prefix)
