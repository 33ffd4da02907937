"""One STAIR experiment end to end on a tiny random Llama with a word-level tokenizer (no model file): questions are
generated for leaves without any, both adapters train, every method ranks every question with real leaves only,
checkpoints follow each stage, and a failing stage is recorded while the others still run."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("peft")

from benchmark_support import load_benchmark  # noqa: E402
from toc_support import BOOK, book, tiny_model, tiny_tokenizer, write_openstax_book  # noqa: E402

from strata import cli  # noqa: E402
from strata.config import TocSettings  # noqa: E402
from strata.eval.results import load_result  # noqa: E402
from strata.experiments import stair  # noqa: E402
from strata.experiments.stair import BookJob, JobQuery, StairJob, run_job  # noqa: E402


@pytest.fixture()
def tiny(monkeypatch):
    toc = book()
    tokenizer = tiny_tokenizer(toc)
    model = tiny_model(tokenizer)
    monkeypatch.setattr(stair, "load_base_model", lambda *args: (model, tokenizer, "tiny"))
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

    monkeypatch.setattr("strata.train.toc_lora._train", broken)
    runs = run_job(job(toc), "tiny", tmp_path, "cpu", None, lambda _: None)
    assert runs.errors == ["stair: RuntimeError: out of memory", "dsi: RuntimeError: out of memory"]
    assert [run.method for run in runs.runs] == ["zero-shot", "zero-shot-unconstrained"]
    assert not any("lora" in name for name, _ in model.named_modules())  # the failed adapter was removed


def test_a_rerun_of_the_same_job_ranks_with_the_saved_adapter_and_another_seed_trains_again(tiny, tmp_path, monkeypatch):
    toc, _ = tiny
    answered = job(toc)
    answered.books[0].questions = {leaf.number: [f"What is {leaf.title} ?", f"why {leaf.title} ?"]
                                   for leaf in toc.leaves()}  # fmt: skip
    only_stair = answered.model_copy(update={"modes": ["stair"], "zero_shot": False})
    adapters = tmp_path / "adapters"
    first = run_job(only_stair, "tiny", tmp_path, "cpu", adapters, lambda _: None, reuse=True)
    assert first.reused == [] and first.train[0].steps == 4  # nothing saved yet: trained

    def untrainable(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr("strata.train.toc_lora._train", untrainable)
    again = run_job(only_stair, "tiny", tmp_path, "cpu", adapters, lambda _: None, reuse=True)
    assert again.errors == [] and again.reused == ["stair"]
    assert again.train == first.train  # the report of the run that trained it
    def orders(runs):
        return {q: [leaf.number for leaf in r.leaves] for q, r in runs.runs[0].rankings.items()}

    assert orders(again) == orders(first)  # the saved adapter, not the bare model

    reseeded = run_job(only_stair.model_copy(update={"seed": 4}), "tiny", tmp_path, "cpu", adapters, lambda _: None,
                       reuse=True)  # fmt: skip
    assert reseeded.reused == [] and reseeded.errors == ["stair: AssertionError: trained again"]


def test_strata_eval_toc_ranks_with_a_saved_adapter_of_the_right_mode(tiny, tmp_path, monkeypatch, capsys):
    toc, _ = tiny
    only_stair = job(toc).model_copy(update={"modes": ["stair"], "zero_shot": False})
    runs = run_job(only_stair, "tiny", tmp_path, "cpu", tmp_path / "adapters", lambda _: None)
    assert [run.method for run in runs.runs] == ["stair"]  # no zero-shot stages when the job says so
    monkeypatch.setattr("strata.toc.adapter.load_base_model", stair.load_base_model)  # the tiny model
    chapters = {chapter: {s: f"{s} is a topic of {chapter.lower()} research." for s in sections}
                for chapter, sections in BOOK.items()}
    questions = [(f"What is {s} ?", (chapter, s)) for chapter, sections in BOOK.items() for s in sections]
    data = write_openstax_book(tmp_path / "data", "tiny-book", chapters, questions)
    adapter = tmp_path / "adapters" / "stair"
    argv = ["eval", "toc", "--dataset", str(data), "--adapter", str(adapter), "--output", str(tmp_path / "out")]

    assert cli.main([*argv, "--method", "stair"]) == 0

    [result] = load_result(tmp_path / "out" / "tiny-book-all-stair.json").experiments
    assert result.queries == 4 and set(result.metrics) == {"R@1", "R@3", "nDCG@3", "hallucination"}
    assert result.details["models"] == {"base": "tiny", "adapter": str(adapter)}
    assert result.details["model_use"]["prompt_tokens"] > 0
    leaves = {leaf.path for leaf in toc.leaves()}
    for line in (tmp_path / "out" / "tiny-book-all-stair.predictions.jsonl").read_text().splitlines():
        ranking = json.loads(line)["ranking"]
        assert len(ranking["leaves"]) == 3 and {tuple(leaf["path"]) for leaf in ranking["leaves"]} <= leaves
        assert ranking["raw_output"] is not None  # free generation, for the hallucination rate
    capsys.readouterr()
    assert cli.main([*argv, "--method", "dsi"]) == 2
    assert "a stair adapter, not a dsi one" in capsys.readouterr().err


def test_the_gpu_script_runs_its_plan_and_sends_back_an_adapter_the_cpu_loads(tiny, tmp_path, monkeypatch):
    """The dry run of benchmarks/stair.py gpu on this CPU: jobs in plan order until the deadline, runs.json after
    every stage, the STAIR adapter sent back in parts under the device's file limit and loaded here unchanged."""
    import argparse

    from strata.toc.adapter import load_adapter

    toc, model = tiny
    bench = load_benchmark("stair")
    monkeypatch.setattr(bench, "RETURN_BYTES", 20_000)  # the tiny adapter in several parts, as the 0.5B's are
    plan_dir = tmp_path / "gpu"
    (plan_dir / "jobs").mkdir(parents=True)
    only_stair = job(toc).model_copy(update={"modes": ["stair"], "zero_shot": False})
    for name in ("first", "late"):
        (plan_dir / "jobs" / f"{name}.json").write_text(only_stair.model_dump_json())
    plan = {"scope": "small", "jobs": [{"name": "first", "adapter": True}, {"name": "late", "adapter": True}]}
    (plan_dir / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "out"
    args = argparse.Namespace(plan=str(plan_dir / "plan.json"), model="tiny", out=str(out),
                              adapters=str(tmp_path / "adapters"), budget_s=None, deadline_s=0.0)  # fmt: skip
    bench.run_gpu(args)

    sent = json.loads((out / "runs.json").read_text())
    assert list(sent) == ["first"]  # the deadline passed before the second job could start
    assert [run["method"] for run in sent["first"]["runs"]] == ["stair"]
    parts = sorted(out.glob("first.stair.tar.part-*"))
    assert len(parts) > 1 and all(part.stat().st_size <= 20_000 for part in parts)
    assert bench.unpack_adapter(out, "first.stair", tmp_path / "back")
    assert not bench.unpack_adapter(out, "late.stair", tmp_path / "none")
    probe = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        trained = load_adapter(model, tmp_path / "adapters" / "first" / "stair", "tiny")
        expected = trained(input_ids=probe).logits
        brought = load_adapter(trained.unload(), tmp_path / "back", "tiny")
        # bfloat16 on the way back: the same adapter to bfloat16's precision
        assert torch.allclose(brought(input_ids=probe).logits, expected, atol=1e-2)
        brought.unload()
