"""Long commands draw progress bars on a terminal and stay quiet in a pipe or under --json."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from strata import cli
from strata.eval.matrix import load_matrix, run_matrix


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_are_drawn_on_a_terminal_only_and_never_under_json() -> None:
    for stream, json_output, drawn in [(Terminal(), False, True), (io.StringIO(), False, False), (Terminal(), True, False)]:
        bars = cli.ProgressBars(not json_output, stream)
        for done in range(4):
            bars("queries", done, 3, f"query {done}")
        bars.close()
        assert ("queries" in stream.getvalue() and "3/3" in stream.getvalue()) is drawn, stream.getvalue()


def test_matrix_rows_report_progress_from_first_to_last(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "root: .\nrows:\n"
        + "".join(
            f"  - {{id: r{n}, command: 'strata eval x{n}', dataset: d, metric: m, expected: 1.0, tolerance: 0.1, cheap: true}}\n" for n in range(3)
        )
    )
    seen: list[tuple[str, int, int, str]] = []
    run_matrix(load_matrix(tmp_path / "m.yaml"), lambda argv: {"m": 1.0}, progress=lambda *told: seen.append(told))
    assert [(done, total) for _, done, total, _ in seen] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert [detail for *_, detail in seen[:3]] == ["r0", "r1", "r2"]


def test_eval_retrieval_on_a_terminal_counts_every_query(monkeypatch, shared_data: Path, tmp_path: Path) -> None:
    from strata.eval.beir import load_beir, write_subset

    folder = write_subset(load_beir(shared_data / "scifact" / "beir"), tmp_path / "mini", queries=12, documents=60)
    terminal = Terminal()
    monkeypatch.setattr(cli.sys, "stderr", terminal)
    args = argparse.Namespace(dataset=str(folder), method="bm25", split="test", output=str(tmp_path / "runs"))
    args.json = False
    settings = cli.Settings.load(overrides={"store.home": str(tmp_path / "home")})
    result = cli.eval_retrieval(args, settings)
    assert result.queries == 12 and "queries" in terminal.getvalue() and "12/12" in terminal.getvalue()
