"""The reproduction matrix: loading, PASS/FAIL/ERROR per row, the CLI command end to end, and the real matrix file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from strata import cli
from strata.eval.beir import load_beir, write_subset
from strata.eval.matrix import format_matrix, load_matrix, run_matrix, select_rows
from strata.eval.results import load_result

REPO = Path(__file__).resolve().parents[1]


def row(row_id: str, command: str = "strata eval fake", metric: str = "nDCG@10", expected: float = 0.5,
        tolerance: float = 0.01, cheap: bool = True) -> dict:
    return {"id": row_id, "command": command, "dataset": "d", "metric": metric, "expected": expected,
            "tolerance": tolerance, "cheap": cheap}


def write_matrix(path: Path, rows: list[dict], root: str = ".") -> Path:
    path.write_text(yaml.safe_dump({"root": root, "rows": rows}))
    return path


def test_rows_pass_within_tolerance_and_a_shared_command_runs_once(tmp_path: Path) -> None:
    calls: list[tuple[list[str], str]] = []

    def runner(argv: list[str]) -> dict[str, float]:
        calls.append((argv, os.getcwd()))
        return {"nDCG@10": 0.505, "R@100": 0.9}

    (tmp_path / "root").mkdir()
    spec = load_matrix(write_matrix(tmp_path / "m.yaml", [
        row("close", expected=0.5, tolerance=0.01),
        row("drifted", expected=0.5, tolerance=0.001),
        row("recall", metric="R@100", expected=0.9),
        row("no-such-metric", metric="MAP"),
        row("expensive", command="strata eval other", cheap=False),
    ], root="root"))

    cheap = run_matrix(spec, runner, rows="cheap")
    assert [o.status for o in cheap.outcomes] == ["PASS", "FAIL", "PASS", "ERROR"] and not cheap.passed
    assert cheap.outcomes[1].delta == pytest.approx(0.005) and cheap.outcomes[1].got == 0.505
    assert "no metric 'MAP'" in cheap.outcomes[3].error
    assert calls == [(["eval", "fake"], str(tmp_path / "root"))]  # once, from the matrix root
    assert os.getcwd() != str(tmp_path / "root")  # and back

    assert len(run_matrix(spec, runner, rows="all").outcomes) == 5 and len(calls) == 3
    table = format_matrix(cheap)
    assert "drifted" in table and "+0.0050" in table and "FAIL" in table and "1 FAIL, 1 ERROR" in table


def test_a_failing_command_is_an_error_row_and_the_rest_still_run(tmp_path: Path) -> None:
    def runner(argv: list[str]) -> dict[str, float]:
        if argv[-1] == "broken":
            raise FileNotFoundError("no such dataset")
        return {"nDCG@10": 0.5}

    spec = load_matrix(write_matrix(tmp_path / "m.yaml", [
        row("bad", command="strata eval broken"), row("not-strata", command="python x.py"), row("good"),
    ]))
    outcomes = run_matrix(spec, runner).outcomes
    assert [o.status for o in outcomes] == ["ERROR", "ERROR", "PASS"]
    assert "no such dataset" in outcomes[0].error and "must start with 'strata'" in outcomes[1].error


def test_invalid_matrix_files_are_rejected_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"(?s)m.yaml: .*repeated: twice"):
        load_matrix(write_matrix(tmp_path / "m.yaml", [row("twice"), row("twice")]))
    with pytest.raises(ValueError, match=r"(?s)m.yaml: .*tolerance"):
        load_matrix(write_matrix(tmp_path / "m.yaml", [{**row("x"), "tolerance": -1}]))
    with pytest.raises(ValueError, match=r"(?s)m.yaml: .*(?i:extra)"):
        load_matrix(write_matrix(tmp_path / "m.yaml", [{**row("x"), "expectd": 0.4}]))


def test_strata_eval_matrix_runs_real_commands_and_exits_1_on_drift(shared_data: Path, tmp_path: Path) -> None:
    subset = write_subset(load_beir(shared_data / "scifact" / "beir"), tmp_path / "scifact-mini", 20, 200)
    command = (f"strata eval retrieval --dataset {subset} --method bm25 --output runs "
               f"--store.home {tmp_path / 'home'}")
    matrix = write_matrix(tmp_path / "m.yaml", [
        row("bm25-ndcg", command=command, expected=0.5, tolerance=0.5),
        row("bm25-impossible", command=command, metric="R@100", expected=2.0, tolerance=0.005),
        row("typo", command="strata eval retrieval --datset x"),
    ])
    output = tmp_path / "out" / "matrix.json"

    code = cli.main(["eval", "matrix", "--rows", "all", "--file", str(matrix), "--output", str(output)])

    assert code == 1
    saved = load_result(output)
    rows = saved.experiments
    assert [row.details["status"] for row in rows] == ["PASS", "FAIL", "ERROR"] and saved.details["passed"] is False
    written = load_result(tmp_path / "runs" / "scifact-mini-test-bm25.json")  # relative to the root
    assert rows[0].metrics["nDCG@10"] == written.experiments[0].metrics["nDCG@10"]
    assert rows[1].metrics["R@100"] == written.experiments[0].metrics["R@100"] and not rows[2].metrics
    assert "not a valid command" in rows[2].details["error"]
    # Each file names the command that wrote it: the run its row's, the outcome the matrix's.
    assert written.command == command and rows[0].command == command
    assert saved.command == f"strata eval matrix --rows all --file {matrix} --output {output}"


def test_the_projects_matrix_is_runnable_and_matches_the_benchmark_results() -> None:
    spec = load_matrix(REPO / "benchmarks" / "matrix.yaml")
    assert spec.root == REPO and select_rows(spec, "cheap")
    parser = cli.build_parser()
    for matrix_row in spec.rows:
        args = parser.parse_args(matrix_row.argv())
        assert callable(getattr(args, "evaluate", None)), f"{matrix_row.id}: the matrix cannot run this command"
    results = REPO / "benchmarks" / "results"
    if not (results / "retrieval.json").is_file() or not (results / "stair-cpu.json").is_file():
        pytest.skip("benchmarks/results/retrieval.json or stair-cpu.json not written yet")
    published = load_result(results / "retrieval.json")
    toc = load_result(results / "stair-cpu.json")
    for matrix_row in spec.rows:
        args = vars(parser.parse_args(matrix_row.argv()))
        if args["eval_command"] == "toc":
            value = toc.experiment(f"full_books/{args['method']}/all").metrics[matrix_row.metric]
        else:
            method = args["method"] + ("+prf" if args.get("setting:search.prf") == "true" else "")
            value = published.experiment(method).metrics[matrix_row.metric]
        assert matrix_row.expected == pytest.approx(value, abs=1e-4), matrix_row.id


def test_matrix_spec_defaults_to_running_beside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"rows": [row("x")]}))
    assert load_matrix(path).root == tmp_path
