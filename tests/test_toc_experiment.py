"""One STAIR experiment end to end on a tiny random Llama with a word-level tokenizer (no model file): questions are
generated for leaves without any, both adapters train, every method ranks every question with real leaves only,
checkpoints follow each stage, and a failing stage is recorded while the others still run."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("peft")

from strata.config import TocSettings  # noqa: E402
from strata.documents.builder import PaperBuilder  # noqa: E402
from strata.llm import prompt_registry  # noqa: E402
from strata.toc import experiment  # noqa: E402
from strata.toc.experiment import BookJob, JobQuery, StairJob, run_job  # noqa: E402
from strata.toc.tree import document_toc, render_toc  # noqa: E402

CHAT = (
    "{% for m in messages %}<start> {{ m['role'] }} {{ m['content'] }} <end> {% endfor %}"
    "{% if add_generation_prompt %}<start> assistant {% endif %}"
)


def book():
    builder = PaperBuilder("tiny-book", "test")
    for chapter, sections in {"Sleep": ["Dreams", "Insomnia"], "Memory": ["Encoding", "Forgetting"]}.items():
        builder.open_section(chapter, 1)
        for section in sections:
            builder.open_section(section, 2)
            builder.add_block(f"{section} is a topic of {chapter.lower()} research.")
    return document_toc(builder.build(title="Tiny Psychology"))


def tiny_tokenizer(toc):
    """Word-level: every word of the prompts, the ToC and the answers is in the vocabulary."""
    registry = prompt_registry()
    prompts = [f"{registry.get(name).system} {registry.get(name).user}" for name in registry.names()]
    text = " ".join([render_toc(toc), *prompts, "0 1 2 3 4 5 6 7 8 9"])
    words = ["<pad>", "<unk>", "<start>", "<end>", "system", "user", "assistant"]
    pre = tokenizers.pre_tokenizers.Whitespace()
    for word, _ in pre.pre_tokenize_str(text + ' questions What is why ? " [ ] { } : ,'):
        if word not in words:
            words.append(word)
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = pre
    tokenizer.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<end>", pad_token="<pad>", unk_token="<unk>", chat_template=CHAT
    )


@pytest.fixture()
def tiny(monkeypatch):
    toc = book()
    tokenizer = tiny_tokenizer(toc)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    monkeypatch.setattr(experiment, "load_base_model", lambda *args: (model, tokenizer, "tiny"))
    torch.set_num_threads(1)
    return toc, model


def job(toc) -> StairJob:
    leaves = toc.leaves()
    questions = {leaf.number: [f"What is {leaf.title} ?", f"why {leaf.title} ?"] for leaf in leaves[1:]}
    return StairJob(
        books=[
            BookJob(
                toc=toc,
                questions=questions,  # the first leaf has none: the run must generate its questions
                queries=[
                    JobQuery(query_id=f"q{i}", question=f"What is {leaf.title} ?") for i, leaf in enumerate(leaves)
                ],
            )
        ],
        settings=TocSettings(batch_size=2, max_steps=4, eval_every_steps=2, lora_r=4, lora_alpha=8),
        seed=3,
        dev_limit=4,
        inference_batch=2,
    )


def test_a_run_ranks_every_question_with_every_method_and_checkpoints_each_stage(tiny, tmp_path):
    toc, model = tiny
    checkpoints = []
    runs = run_job(job(toc), "tiny", tmp_path, "cpu", tmp_path / "adapters", lambda _: None, None, checkpoints.append)
    assert runs.errors == [] and len(checkpoints) == 5
    assert list(runs.generated_questions["tiny-book"]) == ["1.1"]  # only the leaf without questions
    assert [run.method for run in runs.runs] == ["zero-shot", "zero-shot-unconstrained", "stair", "dsi"]
    leaves = {leaf.number for leaf in toc.leaves()}
    for run in runs.runs:
        assert set(run.rankings) == {"q0", "q1", "q2", "q3"}
        for ranking in run.rankings.values():
            assert {leaf.number for leaf in ranking.leaves} <= leaves
            if run.method != "zero-shot-unconstrained":
                assert len(ranking.leaves) == 3
            if run.method != "zero-shot":
                assert ranking.raw_output is not None
    assert [report.mode for report in runs.train] == ["stair", "dsi"] and all(r.steps == 4 for r in runs.train)
    assert (tmp_path / "adapters" / "stair" / "adapter_config.json").is_file()
    assert not any("lora" in name for name, _ in model.named_modules())  # adapters were unloaded


def test_a_failing_stage_is_recorded_and_the_next_stages_still_run(tiny, tmp_path, monkeypatch):
    toc, model = tiny

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr("strata.toc.finetune._train", broken)
    runs = run_job(job(toc), "tiny", tmp_path, "cpu", None, lambda _: None)
    assert runs.errors == ["stair: RuntimeError: out of memory", "dsi: RuntimeError: out of memory"]
    assert [run.method for run in runs.runs] == ["zero-shot", "zero-shot-unconstrained"]
    assert not any("lora" in name for name, _ in model.named_modules())  # the failed adapter was removed
