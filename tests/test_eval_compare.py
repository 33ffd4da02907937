import pytest

from strata.cli import main
from strata.eval.compare import compare, format_comparison
from strata.eval.results import Experiment, QueryRow, new_result, write_result


def _write(path, scores):
    rows = [QueryRow(query_id=q, metrics={"nDCG@10": s}) for q, s in scores.items()]
    return write_result(new_result("test", [Experiment(name="run", method="m", per_query=rows)]), path)


def test_consistently_better_system_is_significant(tmp_path):
    baseline = _write(tmp_path / "a.json", {f"q{i}": 0.3 + 0.01 * (i % 5) for i in range(30)})
    system = _write(tmp_path / "b.json", {f"q{i}": 0.5 + 0.01 * (i % 5) for i in range(30)})
    result = compare(baseline, system, "nDCG@10", permutations=10_000, seed=1)
    assert result.p_value < 0.001
    assert (result.wins, result.ties, result.losses) == (30, 0, 0)
    assert result.mean_delta == pytest.approx(0.2)


def test_noise_is_not_significant_and_result_is_reproducible(tmp_path):
    baseline = _write(tmp_path / "a.json", {f"q{i}": (i * 37 % 11) / 11 for i in range(40)})
    system = _write(tmp_path / "b.json", {f"q{i}": (i * 53 % 11) / 11 for i in range(40)})
    first = compare(baseline, system, "nDCG@10", seed=7)
    assert first.p_value > 0.05
    assert compare(baseline, system, "nDCG@10", seed=7).p_value == first.p_value


def test_only_shared_queries_are_paired(tmp_path):
    baseline = _write(tmp_path / "a.json", {"q1": 0.1, "q2": 0.2, "q3": 0.3})
    system = _write(tmp_path / "b.json", {"q2": 0.4, "q3": 0.3, "q9": 1.0})
    result = compare(baseline, system, "nDCG@10")
    assert result.queries == 2 and set(result.per_query_delta) == {"q2", "q3"}


def test_queries_in_one_file_only_are_counted_and_reported_as_left_out(tmp_path):
    baseline = _write(tmp_path / "a.json", {"q1": 0.1, "q2": 0.2, "q3": 0.3, "q4": 0.9})
    system = _write(tmp_path / "b.json", {"q2": 0.4, "q3": 0.3, "q9": 1.0})
    result = compare(baseline, system, "nDCG@10")
    assert (result.queries, result.baseline_only, result.system_only) == (2, 2, 1)
    assert "left out: 2 queries only in the baseline, 1 only in the system" in format_comparison(result)


def test_missing_metric_is_a_clear_error(tmp_path, capsys):
    a = _write(tmp_path / "a.json", {"q1": 0.1, "q2": 0.2})
    assert main(["eval", "compare", str(a), str(a), "--metric", "R@1000"]) == 2
    assert "has no metric 'R@1000'" in capsys.readouterr().err
