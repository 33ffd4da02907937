"""The committed results render to the committed README summary and benchmarks/RESULTS.md, every result file is a
valid ResultFile, and a file edited out of shape stops the report with its name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmark_support import load_benchmark
from strata.eval.results import Experiment, QueryRow, ResultFileError, load_result, load_results, new_result

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def load_report():
    return load_benchmark("report")


def test_the_readme_summary_and_results_page_are_what_the_result_files_render_to() -> None:
    report = load_report()
    results = load_results(RESULTS)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    fresh = report.replace_section(readme, report.render_summary(results), REPO / "README.md")
    assert readme == fresh, "README.md's results section is stale: run python benchmarks/report.py"
    page = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    assert page == report.render_page(results, RESULTS), "benchmarks/RESULTS.md is stale: run benchmarks/report.py"


def test_every_result_file_validates_and_names_per_query_files_that_exist() -> None:
    files = [path for path in RESULTS.rglob("*.json") if "tmp" not in path.relative_to(RESULTS).parts]
    results = load_results(RESULTS)
    assert len(results) == len(files) > 0
    for name, result in results.items():
        for experiment in result.experiments:
            if isinstance(experiment.per_query, str):
                rows = load_result(REPO / experiment.per_query).experiments[0].per_query
                assert isinstance(rows, list) and len(rows) == experiment.queries, f"{name}: {experiment.name}"


def test_a_file_edited_out_of_shape_is_an_error_naming_it(tmp_path: Path) -> None:
    good = json.loads(new_result("benchmarks/x.py", [Experiment(name="a", method="bm25")]).model_dump_json())
    cases = {
        "typed-by-hand.json": {**good, "note": "a remark typed into the file"},
        "missing.json": {key: value for key, value in good.items() if key != "experiments"} | {"benchmark": None},
        "bad-metric.json": {**good, "experiments": [{"name": "a", "method": "bm25", "metrics": {"nDCG@10": "high"}}]},
        "unknown-dataset.json": {**good, "experiments": [{"name": "a", "method": "bm25", "dataset": "nowhere"}]},
    }
    for name, data in cases.items():
        (tmp_path / name).write_text(json.dumps(data))
        with pytest.raises(ResultFileError, match=rf"{name}: not a valid result file"):
            load_result(tmp_path / name)
    folder = tmp_path / "results"  # what the report loads: one bad file among good ones stops it
    (folder / "toc").mkdir(parents=True)
    (folder / "good.json").write_text(json.dumps(good))
    (folder / "toc" / "typed-by-hand.json").write_text(json.dumps(cases["typed-by-hand.json"]))
    with pytest.raises(ResultFileError, match=r"toc/typed-by-hand.json: .*\n.*\nnote\n  Extra inputs"):
        load_results(folder)


def test_experiment_names_are_unique_and_per_query_rows_keep_only_their_fields() -> None:
    with pytest.raises(ValueError, match="repeated: a"):
        new_result("benchmarks/x.py", [Experiment(name="a", method="m"), Experiment(name="a", method="m")])
    row = QueryRow(query_id="q1", metrics={"R@1": 1.0}, seconds=0.5)
    assert json.loads(row.model_dump_json()) == {"query_id": "q1", "metrics": {"R@1": 1.0}, "seconds": 0.5}


def test_a_writer_records_its_command_and_machine_and_keeps_earlier_experiments(tmp_path: Path) -> None:
    from strata.eval.results import command_line, merged, update_result

    path = tmp_path / "r.json"
    with command_line(["strata", "eval", "x", "--method", "bm25"]):
        first = update_result(path, lambda old: merged(old, new_result("b", [Experiment(name="a", method="m")])))
    assert first.command == first.experiments[0].command == "strata eval x --method bm25"
    assert first.created and first.machine.cpus and first.machine.python
    again = update_result(path, lambda old: merged(old, new_result("b", [Experiment(name="b", method="m")])))
    assert [e.name for e in again.experiments] == ["a", "b"]
    assert again.experiments[0].command == "strata eval x --method bm25" != again.experiments[1].command


def test_paths_inside_the_checkout_are_written_relative_so_a_clone_renders_the_same(tmp_path: Path) -> None:
    from strata.eval.results import write_result

    checkout = tmp_path / "repo"
    (checkout / "benchmarks" / "results").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    details = {"model": str(checkout / "benchmarks/results/tmp/m"), "data": str(tmp_path / "shared" / "x"), "n": 3}
    result = new_result("benchmarks/x.py", [Experiment(name="a", method="bm25", details={"dir": str(checkout)})])
    path = write_result(result.model_copy(update={"details": details}), checkout / "benchmarks/results/x.json")
    written = load_result(path)
    assert written.details == {"model": "benchmarks/results/tmp/m", "data": "../shared/x", "n": 3}
    assert written.experiments[0].details == {"dir": "."}
    committed = [p for p in RESULTS.rglob("*.json") if "tmp" not in p.relative_to(RESULTS).parts]
    assert not [p.name for p in committed if str(REPO) in p.read_text(encoding="utf-8")]


def test_two_runs_rows_with_inline_per_query_scores_get_a_paired_test_and_others_none() -> None:
    report = load_report()

    claim = report.Claim("m", "set", "nDCG@10", report.Measure("a.json", "a"), ())
    better, worse = _run("a", [0.9] * 120), _run("b", [0.1] * 120)
    results = {"a.json": new_result("b.py", [better])}
    assert report._delta(results, claim, better, worse) == "+0.800 (p 0.0002)"
    fewer = _run("b", [0.1] * 110)  # not the same queries: no pairing
    assert report._delta(results, claim, better, fewer) == "+0.800 (no paired test)"
    unknown = Experiment(name="c", method="c", metrics={"nDCG@10": 0.5})
    assert report._delta(results, claim, better, unknown) == "+0.400 (no paired test)"


def test_rows_whose_per_query_scores_are_in_files_they_name_get_a_paired_test() -> None:
    report = load_report()
    claim = report.Claim("m", "set", "nDCG@10", report.Measure("a.json", "a"), ())
    better, worse = _run("a", [0.9] * 120), _run("b", [0.1] * 120)
    named = [row.model_copy(update={"per_query": f"benchmarks/results/parts/{row.name}.json"})
             for row in (better, worse)]
    results = {"a.json": new_result("b.py", [named[0]]),
               **{f"parts/{row.name}.json": new_result("b.py", [row]) for row in (better, worse)}}  # fmt: skip
    assert report._delta(results, claim, *named) == "+0.800 (p 0.0002)"
    del results["parts/b.json"]  # a file that is not there: nothing to pair
    assert report._delta(results, claim, *named) == "+0.800 (no paired test)"


def _run(name: str, scores: list[float]) -> Experiment:
    """A row of one run with its per-query scores inline."""
    rows = [QueryRow(query_id=f"q{i}", metrics={"nDCG@10": s}) for i, s in enumerate(scores)]
    return Experiment(name=name, method=name, queries=len(scores), metrics={"nDCG@10": sum(scores) / len(scores)},
                      per_query=rows)


def test_under_100_queries_a_comparison_shows_no_p_value_and_is_labelled_smoke() -> None:
    report = load_report()
    claim = report.Claim("m", "set", "nDCG@10", report.Measure("a.json", "a"), ())
    better, worse = _run("a", [0.9] * 60), _run("b", [0.1] * 60)
    results = {"a.json": new_result("b.py", [better])}
    assert report._delta(results, claim, better, worse) == "+0.800 (smoke: n < 100)"
    test = {"against": "b", "metric": "nDCG@10", "p_value": 0.0002}
    assert report._paired(Experiment(name="a", method="a", queries=10, details={"paired_test": test})) == (
        "smoke: n < 100")
    assert report._paired(Experiment(name="a", method="a", queries=300, details={"paired_test": test})) == "0.0002 vs b"
    toc_test = {"metric": "R@1", "queries": 60, "system_file": "s.json", "system_mean": 0.5, "baseline_file": "b.json",
                "baseline_mean": 0.8, "mean_delta": -0.3, "p_value": 0.0002, "permutations": 10000, "seed": 1,
                "wins": 1, "ties": 39, "losses": 20}
    assert "p =" not in report._comparison_line(toc_test) and "smoke: n < 100" in report._comparison_line(toc_test)
    assert "p = 0.0002" in report._comparison_line(toc_test | {"queries": 120})


def test_a_part_test_that_names_no_baseline_part_is_against_the_systems_own_part() -> None:
    report = load_report()

    def cell(group: str, method: str, r1: float) -> Experiment:
        return Experiment(name=f"{group}/{method}/all", method=method, group=group, subset="all", queries=120,
                          metrics={"R@1": r1}, per_query=f"benchmarks/results/stair/{group}-all-{method}.json")

    test = {"metric": "R@1", "system": "stair", "baseline": "dsi", "p_value": 0.4}
    parts = {"new": {"comparisons": [test]}}
    result = new_result("benchmarks/stair.py", [cell("new", "stair", 0.6), cell("new", "dsi", 0.5),
                                                cell("old", "dsi", 0.4)], details={"parts": parts})
    stair, same_part, other_part = result.experiments
    claim = report.Claim("m", "set", "R@1", report.Measure("stair-cpu.json", "new/stair/all"), ())
    results = {"stair-cpu.json": result}
    assert report._delta(results, claim, stair, same_part) == "+0.100 (p 0.4000)"
    # That test paired other questions' rows.
    assert report._delta(results, claim, stair, other_part) == "+0.200 (no paired test)"


def test_a_p_value_a_run_recorded_is_not_shown_against_a_row_of_another_run_or_part() -> None:
    report = load_report()
    first = Experiment(name="ce: hybrid (first stage)", method="hybrid (first stage)", group="ce", queries=300,
                       metrics={"nDCG@10": 0.7})
    test = {"against": "hybrid (first stage)", "metric": "nDCG@10", "p_value": 0.001}
    reranked = Experiment(name="ce: hybrid > x", method="hybrid > x", group="ce", queries=300,
                          metrics={"nDCG@10": 0.6}, details={"paired_test": test})
    llm_first = first.model_copy(update={"name": "llm: hybrid (first stage)", "group": "llm"})
    results = {"a.json": new_result("b.py", [first, reranked, llm_first]), "b.json": new_result("b.py", [first])}
    own_first, system, other_part = results["a.json"].experiments
    claim = report.Claim("m", "set", "nDCG@10", report.Measure("a.json", "ce: hybrid > x"), ())
    assert report._delta(results, claim, system, own_first) == "-0.100 (p 0.0010)"
    assert report._delta(results, claim, system, results["b.json"].experiments[0]) == "-0.100 (no paired test)"
    assert report._delta(results, claim, system, other_part) == "-0.100 (no paired test)"
    # A row merged into a later run whose first stage was measured again: its p was against another baseline.
    moved = reranked.model_copy(update={"details": {"paired_test": test | {"baseline_mean": 0.71}}})
    assert report._delta(results, claim, moved, own_first) == "-0.100 (no paired test)"
    kept = reranked.model_copy(update={"details": {"paired_test": test | {"baseline_mean": 0.7}}})
    assert report._delta(results, claim, kept, own_first) == "-0.100 (p 0.0010)"


def test_a_reranker_is_compared_with_the_first_stage_of_its_own_run() -> None:
    report = load_report()
    elsewhere = [(claim.method, name) for claim in report.CLAIMS for name, measure in claim.baselines
                 if name.endswith("first stage") and measure.file != claim.system.file]
    assert not elsewhere


def test_a_cross_encoder_baseline_called_the_same_reads_papers_as_the_method_does() -> None:
    report = load_report()
    for claim in report.CLAIMS:
        for name, measure in claim.baselines:
            if "cross-encoder" in (claim.system.experiment or "") and name.startswith("the same"):
                caps = [load_result(RESULTS / file).settings["caps"] for file in (claim.system.file, measure.file)]
                views = {(c["passage_words"], c.get("ce_windows", 1)) for c in caps}
                assert len(views) == 1, f"{claim.method}: {name!r} reads {views}"


def test_a_run_that_measured_its_first_stage_once_per_query_set_shows_it_once_when_the_sets_are_the_same() -> None:
    # corank-listwise.json: the LLM rerankers read the cross-encoder's 100 queries, so 'ce: hybrid (first stage)'
    # and 'llm: hybrid (first stage)' are one measurement, in rows the table cannot tell apart.
    report = load_report()
    text = report.corank_section("corank-listwise.json", load_result(RESULTS / "corank-listwise.json"))
    assert text.count("| hybrid (first stage) | 100 |") == 1


def test_a_row_shows_the_command_its_per_query_file_or_the_rows_it_pools_record() -> None:
    # benchmarks/stair.py once stamped its own command on rows it only re-wrote (re-tested, pooled)
    report = load_report()
    a, b, later = (f"python benchmarks/stair.py cpu --parts {parts}" for parts in ("small a", "small b", "overall"))

    def row(group: str, command: str, per_query: str) -> Experiment:
        return Experiment(name=f"{group}/stair/all", method="stair", group=group, subset="all", command=command,
                          per_query=f"benchmarks/results/stair/{per_query}.json")

    scored = {name: new_result("benchmarks/stair.py", [Experiment(name=name, method="stair", command=command)])
              for name, command in (("a", a), ("b", b), ("pooled", later), ("joined", f"{a}; {b}"))}
    pooling = {"pooled_from": ["small_a", "small_b"]}
    parts = {"small_a": {}, "small_b": {}, "small_a-tiny": {}, "overall": pooling, "overall-new": pooling}
    rows = [row("small_a", a, "a"), row("small_b", b, "b"), row("small_a-tiny", later, "a"),
            row("overall", later, "pooled"), row("overall-new", f"{a}; {b}", "joined")]
    result = new_result("benchmarks/stair.py", rows, details={"parts": parts})
    results = {"stair-cpu.json": result, **{f"stair/{name}.json": file for name, file in scored.items()}}

    shown = [report._command_cell(results, result, row) for row in result.experiments]
    assert shown == [f"`{a}`", f"`{b}`", f"`{a}`", f"`{a}; {b}`", f"`{a}; {b}`"]
    assert report._command_cell({"stair-cpu.json": result}, result, result.experiments[2]) == f"`{later}`"  # unchecked
    unrecorded = rows[0].model_copy(update={"command": None, "per_query": None})
    partial = result.model_copy(update={"experiments": [unrecorded, *rows[1:]]})
    assert report._command_cell(results, partial, rows[3]) == "`python benchmarks/stair.py` (exact command not recorded)"


def test_a_stair_label_states_only_the_training_its_part_records() -> None:
    # The GPU row's label once named a 90 s budget; collect records none for a GPU part
    report = load_report()
    parts = load_result(RESULTS / "stair-cpu.json").details["parts"]
    labelled = [(claim.method, claim.system) for claim in report.CLAIMS]
    labelled += [(name, measure) for claim in report.CLAIMS for name, measure in claim.baselines]
    for label, measure in labelled:
        if measure.file != "stair-cpu.json":
            continue
        group, method, _ = (measure.experiment or "").split("/")
        epochs = re.search(r"(\d+) epochs?\b", label)
        if epochs:
            (training,) = [t for t in parts[group]["training"] if t["mode"] == method]
            assert int(epochs[1]) == round(training["epochs"]), label
        assert "budget" not in label or parts[group].get("train_budget_s_per_adapter"), label
