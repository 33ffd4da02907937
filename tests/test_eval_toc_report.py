"""benchmarks/RESULTS.md's ToC, scale, load and reliability tables come from the experiments and details of their
result files: every part, metric, training run and test, with titles written from structured fields."""

from __future__ import annotations

from pathlib import Path

from benchmark_support import load_benchmark
from strata.eval.results import DatasetRef, Experiment, ResultFile, new_result

TOC = DatasetRef(name="openstax-toc-qa")


def load_report():
    return load_benchmark("report")


def cell(group: str, method: str, scope: str, r1: float, hallucination: float | None = None,
         queries: int = 60) -> Experiment:
    metrics = {"R@1": r1, "R@3": 0.9, "nDCG@3": 0.8}
    if hallucination is not None:
        metrics["hallucination"] = hallucination
    return Experiment(
        name=f"{group}/{method}/{scope}", method=method, dataset=TOC.name, subset=scope, group=group, queries=queries,
        metrics=metrics, cost={"latency_ms_mean": 1234.0, "latency_ms_p50": 1000.0}, per_query=f"x/{scope}.json",
    )  # fmt: skip


def test_every_stair_part_is_rendered_with_training_and_the_randomization_test() -> None:
    comparison = {"metric": "R@1", "queries": 120, "system_file": "x/small-all-stair.json", "system_mean": 0.2,
                  "baseline_file": "x/small-all-bm25.json", "baseline_mean": 0.7, "mean_delta": -0.5, "p_value": 0.0001,
                  "permutations": 10000, "seed": 7, "wins": 1, "ties": 20, "losses": 39, "baseline": "bm25"}
    training = {"mode": "stair", "device": "cpu", "train_examples": 102, "dev_examples": 24, "steps": 6, "epochs": 0.24,
                "seconds": 600.0, "seconds_per_step": 100.0, "train_seconds": 480.0, "tokens": 12000,
                "best_dev_r1": 0.0, "best_step": 6, "stopped_early": False}
    fusion = {"weight": 0.3, "metric": "dev R@1", "queries": 24, "curve": {"0": 0.5, "0.3": 0.625, "1": 0.25}}
    gated = {**fusion, "weight": 0.0, "best_weight": 0.3, "p_value": 0.25}
    parts = {
        "full_books": {"kind": "baselines", "device": "cpu"},
        "small_psych": {"kind": "small-book", "device": "cpu", "book": "psych", "chapters": ["Memory", "Sleep"],
                        "leaves": 42, "sample": {"questions": 60, "of": 120, "seed": 7},
                        "train_budget_s_per_adapter": 600, "training": [training], "comparisons": [comparison],
                        "train_model": "packaged:tiny", "settings": {"fusion_candidates": 10}, "fusion": fusion},
        "small_psych-q24p8": {"kind": "small-book", "device": "cpu", "book": "psych", "chapters": ["Memory"],
                              "leaves": 42, "sample": {"questions": 60, "of": 120, "seed": 7}, "training": [],
                              "train_model": "packaged:tiny", "fusion": gated,
                              "settings": {"fusion_candidates": 10, "questions_per_leaf": 24, "passages_per_leaf": 8}},
        "zero_shot_llm": {"kind": "zero-shot", "device": "cpu", "model": "tiny", "partial": True,
                          "sample": {"questions": 60, "seed": 7}},
        "full_books_fused": {"kind": "full-books-fused", "device": "cpu", "model": "tiny@1", "fusion_candidates": 10,
                             "books": {"psych": {"fusion": gated, "questions": 589, "of": 589}}, "dev_questions": "the small-book dev split"},
    }  # fmt: skip
    experiments = [
        *(cell("full_books", "bm25", scope, r1) for scope, r1 in (("all", 0.719), ("psych", 0.784), ("soc", 0.65))),
        cell("small_psych", "stair", "psych", 0.2, 0.05),
        cell("zero_shot_llm", "llm", "all", 0.0, 1.0),
    ]
    result = new_result("benchmarks/stair.py", experiments, datasets=[TOC], details={"parts": parts})

    text = load_report().toc_sections({"stair-cpu.json": result})

    assert text.index("### ToC retrieval: Whole books, all questions (CPU)") < text.index(
        "### ToC retrieval: Small book: psych, chapters Memory, Sleep (42 leaves), base packaged:tiny, CPU"
    )
    assert "### ToC retrieval: Zero-shot LLM (tiny, llama.cpp), 60 sampled questions per book (CPU)" in text
    assert "| bm25 | all | 60 | 0.719 | 0.900 | 0.800 | 0 (by construction) | 1234 |" in text
    assert "| bm25 | psych | 60 | 0.784 |" in text and "| bm25 | soc | 60 | 0.650 |" in text
    # One book: its row only, not an 'all' row repeating it.
    assert "| stair | psych | 60 | 0.200 | 0.900 | 0.800 | 0.050 |" in text and "| stair | all |" not in text
    assert "Training stair (packaged:tiny on cpu): 102 synthetic questions (24 dev), 6 steps (0.24 epochs) in 600 s" \
        in text
    assert "at step 6; without dev checks 2000 s/epoch, 25 tokens/s." in text  # 480 s / 0.24 epochs; 12,000 / 480 s
    assert "the hybrid top 10 leaves ordered by the STAIR adapter, fused by rank at weight 0.3, chosen on 24 " \
        "synthetic dev questions (dev R@1 by weight: 0: 0.500, 0.3: 0.625, 1: 0.250)" in text
    assert "base packaged:tiny, 24 questions asked per leaf over 8 passages, CPU" in text
    assert "at weight 0, chosen on 24 synthetic dev questions, its best weight 0.3 not taken (paired p 0.250: " \
        "too little evidence)" in text
    assert "### ToC retrieval: Whole books: hybrid leaf search fused with the zero-shot tiny@1 (CPU)" in text
    assert "stair-fused (psych, 589 of its 589 questions): the hybrid top 10 leaves ordered by the bare tiny@1 (no adapter), fused by rank at " \
        "weight 0, chosen on 24 synthetic dev questions, its best weight 0.3 not taken" in text
    assert "Dev questions: the small-book dev split." in text
    assert "small-all-stair 0.200 vs small-all-bm25 0.700 (delta -0.500), p = 0.0001 (10,000 permutations, " \
        "seed 7)" in text
    assert "Questions: 60 of the 120 questions of these chapters, random.Random(7).sample" in text
    assert "600 wall seconds per adapter" in text and "Partial: the run stopped" in text
    assert text.count("stair: rankings decode through the trie of leaves") == 1  # the part with a fine-tuned method
    assert text.count("(`python benchmarks/stair.py`, exact command not recorded)") == 0  # the writer recorded it


def load_run(method: str, p50: float, errors: int, details: dict | None = None) -> ResultFile:
    run = Experiment(
        name=method, method=method, dataset="litqa2", queries=23,
        command=f"python benchmarks/load.py --method {method}",
        metrics={"requests_ok": 100, "errors": errors, "throughput_rps": 3.3},
        cost={"latency_p50_ms": p50, "latency_p95_ms": 2 * p50, "latency_p99_ms": 3 * p50}, details=details or {},
    )  # fmt: skip
    return new_result(
        "benchmarks/load.py", [run], datasets=[DatasetRef(name="litqa2")],
        settings={"clients": 50, "seconds": 30.0, "k": 10}, details={"corpus": {"papers": 39, "chunks": 5673}},
    )  # fmt: skip


def scale_size(chunks: int, kind: str) -> list[Experiment]:
    build = Experiment(
        name=f"build {chunks}", method="build", dataset="scale", group="build",
        command=f"python benchmarks/scale.py --sizes {chunks}",
        cost={"build_seconds": chunks / 100, "store_seconds": 1.0, "bm25_seconds": 2.0, "dense_seconds": 3.0,
              "peak_rss_mb": 500.0, "source_rss_mb": 100.0, "disk_mb": 300.0},
        details={"chunks": chunks, "papers": chunks // 93, "dense_kind": kind, "load_average_1min": 2.0},
    )  # fmt: skip
    search = Experiment(
        name=f"search {chunks}", method="hybrid", dataset="scale", group="search", queries=100,
        command=f"python benchmarks/scale.py --sizes {chunks}",
        cost={"strata_p50_ms": 42.0, "strata_p95_ms": 60.0, "direct_p50_ms": 30.0, "direct_p95_ms": 50.0,
              "ratio_p50": 1.4, "ratio_p95": 1.2},
        details={"chunks": chunks, "depth": 1000, "load_average_1min": 8.0},
    )  # fmt: skip
    return [build, search]


def test_scale_load_and_reliability_results_are_rendered_with_extrapolation_marked(tmp_path: Path) -> None:
    backends = [
        Experiment(name=f"{store}/{method}", method=method, dataset="scifact", group="backends", subset=store,
                   queries=300, metrics={"nDCG@10": 0.7}, cost={"p50_ms": 100.0, "p95_ms": 200.0})
        for store in ("sqlite", "postgres") for method in ("bm25", "dense", "hybrid")
    ]  # fmt: skip
    scale = new_result(
        "benchmarks/scale.py",
        [*scale_size(100_000, "flat"), *scale_size(500_000, "hnsw"), *backends],
        datasets=[DatasetRef(name="scale"), DatasetRef(name="scifact")],
        details={"extrapolated": {"chunks": 2_500_000, "build_seconds": 25_000.0, "peak_rss_mb": 8000.0,
                                  "disk_mb": 10000.0},
                 "backends": {"migrate_seconds": 5.0, "delta": dict.fromkeys(("bm25", "dense", "hybrid"), 0.0)}},
    )  # fmt: skip
    reliability = new_result("benchmarks/reliability.py", [
        Experiment(name="crash", method="crash", metrics={"trials": 20, "dense_trials": 3, "kills": 38,
                                                          "papers_lost": 0, "failed_trials": 1}),
        Experiment(name="fuzz", method="fuzz", metrics={"inputs": 1529, "parsed": 621, "error": 907, "hang": 1},
                   cost={"peak_rss_mb": 300}, details={"worker_returncode": 0, "per_file_timeout_s": 30.0,
                                                       "memory_limit_mb": 6144}),
    ])  # fmt: skip
    cacheless = {"warmup_s": 5.0, "settings": ["serve.query_cache=0"]}
    results = {"scale.json": scale, "load.json": load_run("hybrid", 900.0, 0, cacheless),
               "load-bm25.json": load_run("bm25", 200.0, 2), "reliability.json": reliability}  # fmt: skip

    text = load_report().render_page(results, tmp_path)

    # Growth per 1k chunks: 10 s and (500 - 100) MB over 100k chunks -> 10.00 s / 4.00 MB; over 500k -> 10.00 / 0.80.
    assert "| 100,000 | flat | 1,000 (store 1, BM25 2, vectors 3) | 500 | 300 | 10.00 / 4.00 | 42 / 60 | 30 / 50 | " \
        "1.40 / 1.20 |" in text
    assert "| 500,000 | hnsw | 5,000 (store 1, BM25 2, vectors 3) | 500 | 300 | 10.00 / 0.80 |" in text
    assert "| 2,500,000 (extrapolated, not measured) | hnsw | ~25,000 | ~8,000 | ~10,000 | - | - | - | - |" in text
    (source,) = [line for line in text.splitlines() if line.startswith("Source: `benchmarks/results/scale.json`")]
    assert "`python benchmarks/scale.py --sizes 100000`" in source and "--sizes 500000`" in source
    assert "| hybrid | 0.7000 | 0.7000 | +0.0000 | 100 / 100 |" in text
    assert "| bm25 | 50 | litqa2 (23) | 0 | - | 100 | 2 | 3.3 | 200 | 400 | 600 |" in text
    assert "| hybrid | 50 | litqa2 (23) | 5 | serve.query_cache=0 | 100 | 0 | 3.3 | 900 |" in text
    assert "| documents lost | 0 |" in text and "| hangs (past the per-file limit) | 1 |" in text
    assert "| LLM calls ending in a clear error | - |" in text  # no LLM part in this file
    assert "### Figures" not in text  # none drawn in this folder


def test_a_summary_row_takes_the_paired_test_of_its_own_system_not_another_against_the_same_baseline() -> None:
    def test(system_file: str, p: float, **named: str) -> dict:
        return {"metric": "R@1", "baseline": "hybrid", "system_file": system_file, "p_value": p, **named}

    group = "small_psychology-2e"
    experiments = [
        cell(group, method, "all", r1, queries=120).model_copy(  # under 100 questions no p-value is shown
            update={"per_query": f"stair/small-psychology-2e-all-{method}.json"})
        for method, r1 in (("stair", 0.5), ("stair-fused", 0.883), ("hybrid", 0.883), ("dense", 0.867))
    ]
    comparisons = [  # STAIR's tests name no system (older files); the fused retriever's name it
        test("stair/small-psychology-2e-all-stair.json", 0.0002),
        test("stair/small-psychology-2e-all-stair-fused.json", 1.0, system="stair-fused"),
    ]
    parts = {group: {"kind": "small-book", "comparisons": comparisons}}
    result = new_result("benchmarks/stair.py", experiments, datasets=[TOC], details={"parts": parts})

    summary = load_report().render_summary({"stair-cpu.json": result})
    rows = [row for row in summary.splitlines() if "hybrid leaves" in row]

    assert any("STAIR fused" in row and "+0.000 (p 1.0000)" in row for row in rows)
    assert any(row.startswith("| STAIR (LoRA") and "-0.383 (p 0.0002)" in row for row in rows)


def test_a_summary_row_takes_no_paired_test_made_against_another_part() -> None:
    # The GPU-trained part is tested against two CPU parts' STAIR (another recipe, the same recipe): each summary
    # row must show the p of the part it compares with, not the first test whose method names match.
    gpu, cpu, default = "small_psychology-2e-q24p8-gpu", "small_psychology-2e-q24p8", "small_psychology-2e"
    experiments = [cell(part, method, "all", r1, queries=120)  # under 100 questions no p-value is shown
                   for part, method, r1 in ((gpu, "stair", 0.5), (gpu, "dense", 0.867), (cpu, "stair", 0.667),
                                            (default, "stair", 0.567))]  # fmt: skip
    comparisons = [
        {"metric": "R@1", "system": "stair", "baseline": "stair", "baseline_part": default, "p_value": 0.5035},
        {"metric": "R@1", "system": "stair", "baseline": "stair", "baseline_part": cpu, "p_value": 0.0188},
    ]
    parts = {gpu: {"kind": "small-book", "comparisons": comparisons}}
    result = new_result("benchmarks/stair.py", experiments, datasets=[TOC], details={"parts": parts})

    summary = load_report().render_summary({"stair-cpu.json": result})
    [row] = [row for row in summary.splitlines() if "trained on this CPU" in row]
    assert "0.667 (n 120)" in row and "-0.167 (p 0.0188)" in row
