"""Reproduction matrix (after rank_llm's "two-click reproduction" YAML): rows of `strata eval ...` commands, each
with the score it is expected to reproduce and a tolerance.

The runner of a command is passed in (the CLI supplies one that parses the command with its own parser), so this
module knows nothing of the command line. A command shared by several rows (one per metric) runs once.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from strata.eval.results import DatasetRef, Experiment, new_result, repeated, write_result
from strata.progress import Progress, tell

RowSelection = Literal["cheap", "all"]
Status = Literal["PASS", "FAIL", "ERROR"]
# Runs one command (argv without the leading 'strata') and returns its mean metrics.
CommandRunner = Callable[[list[str]], dict[str, float]]
PROGRAM = "strata"


class MatrixRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    command: str = Field(description="A `strata eval ...` command line; relative paths are under the matrix root")
    dataset: str = Field(description="What the command evaluates on, for people reading the matrix")
    metric: str = Field(description="Name of the metric in the command's result, e.g. 'nDCG@10'")
    expected: float
    tolerance: float = Field(ge=0)
    cheap: bool = Field(description="Runs in minutes on 2 CPU cores (`strata eval matrix --rows cheap`)")

    def argv(self) -> list[str]:
        words = shlex.split(self.command)
        if not words or words[0] != PROGRAM:
            raise ValueError(f"row {self.id}: the command must start with '{PROGRAM}', got {self.command!r}")
        return words[1:]


class MatrixSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root: Path = Field(default=Path("."), description="Folder the commands run in, relative to the matrix file")
    rows: list[MatrixRow]

    @model_validator(mode="after")
    def _unique_ids(self) -> MatrixSpec:
        twice = repeated(row.id for row in self.rows)
        if twice:
            raise ValueError(f"row ids must be unique; repeated: {', '.join(twice)}")
        return self


class RowOutcome(BaseModel):
    id: str
    dataset: str
    metric: str
    command: str
    expected: float
    tolerance: float
    got: float | None
    delta: float | None = Field(description="got - expected")
    status: Status
    error: str | None = None
    seconds: float = Field(description="Time of the command (0 for rows whose command had already run)")


class MatrixResult(BaseModel):
    matrix_file: str
    rows_selected: RowSelection
    date: str
    passed: bool
    outcomes: list[RowOutcome]


def load_matrix(path: Path) -> MatrixSpec:
    """Read and validate a matrix YAML; `root` comes back absolute."""
    path = Path(path)
    try:
        spec = MatrixSpec.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValidationError) as error:
        raise ValueError(f"{path}: not a valid reproduction matrix:\n{error}") from error
    return spec.model_copy(update={"root": (path.parent / spec.root).resolve()})


def select_rows(spec: MatrixSpec, rows: RowSelection) -> list[MatrixRow]:
    return [row for row in spec.rows if rows == "all" or row.cheap]


def run_matrix(
    spec: MatrixSpec,
    run_command: CommandRunner,
    rows: RowSelection = "cheap",
    matrix_file: Path | str = "",
    progress: Progress | None = None,
) -> MatrixResult:
    """Run the selected rows from `spec.root`; a failing command marks its rows ERROR and the others still run."""
    outcomes: list[RowOutcome] = []
    finished: dict[str, tuple[dict[str, float] | None, str | None]] = {}
    with contextlib.chdir(spec.root):
        selected = select_rows(spec, rows)
        for number, row in enumerate(selected):
            tell(progress, "matrix rows", number, len(selected), row.id)
            started = time.perf_counter()
            if row.command not in finished:
                finished[row.command] = _run_row_command(row, run_command)
            seconds = time.perf_counter() - started
            metrics, error = finished[row.command]
            outcomes.append(_outcome(row, metrics, error, seconds))
        tell(progress, "matrix rows", len(selected), len(selected))
    return MatrixResult(
        matrix_file=str(matrix_file),
        rows_selected=rows,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        passed=all(outcome.status == "PASS" for outcome in outcomes),
        outcomes=outcomes,
    )


def _run_row_command(row: MatrixRow, run_command: CommandRunner) -> tuple[dict[str, float] | None, str | None]:
    try:
        return run_command(row.argv()), None
    except Exception as error:  # noqa: BLE001 -- one broken row is reported, and the matrix goes on
        return None, f"{type(error).__name__}: {error}"


def _outcome(row: MatrixRow, metrics: dict[str, float] | None, error: str | None, seconds: float) -> RowOutcome:
    got = None if metrics is None else metrics.get(row.metric)
    if metrics is not None and got is None:
        error = f"the result has no metric {row.metric!r} (has: {', '.join(sorted(metrics)) or 'none'})"
    delta = None if got is None else got - row.expected
    status: Status = "ERROR" if delta is None else "PASS" if abs(delta) <= row.tolerance else "FAIL"
    return RowOutcome(
        id=row.id,
        dataset=row.dataset,
        metric=row.metric,
        command=row.command,
        expected=row.expected,
        tolerance=row.tolerance,
        got=got,
        delta=delta,
        status=status,
        error=error,
        seconds=seconds,
    )


def format_matrix(result: MatrixResult) -> str:
    header = f"{'row':<28} {'metric':<8} {'expected':>9} {'got':>9} {'delta':>8} {'tol':>6}  status"
    lines = [header, "-" * len(header)]
    for outcome in result.outcomes:
        got = "-" if outcome.got is None else f"{outcome.got:.4f}"
        delta = "-" if outcome.delta is None else f"{outcome.delta:+.4f}"
        lines.append(
            f"{outcome.id:<28} {outcome.metric:<8} {outcome.expected:>9.4f} {got:>9} {delta:>8} "
            f"{outcome.tolerance:>6.3f}  {outcome.status}"
        )
        if outcome.error:
            lines.append(f"    {outcome.error}")
    counts = {status: sum(o.status == status for o in result.outcomes) for status in ("PASS", "FAIL", "ERROR")}
    lines.append(", ".join(f"{count} {status}" for status, count in counts.items()))
    return "\n".join(lines)


def write_matrix_result(result: MatrixResult, path: Path) -> None:
    """As a result file (strata.eval.results): one experiment per row, its metric measured (when it ran), the
    expected score and verdict in its details."""
    experiments = [
        Experiment(
            name=outcome.id,
            method=_method_of(outcome.command),
            dataset=outcome.dataset,
            metrics={} if outcome.got is None else {outcome.metric: outcome.got},
            cost={"seconds": outcome.seconds},
            command=outcome.command,
            details=outcome.model_dump(include={"metric", "expected", "tolerance", "delta", "status", "error"}),
        )
        for outcome in result.outcomes
    ]
    written = new_result(
        "strata eval matrix",
        experiments,
        datasets=[DatasetRef(name=name) for name in dict.fromkeys(outcome.dataset for outcome in result.outcomes)],
        details=result.model_dump(include={"matrix_file", "rows_selected", "passed"}),
    )
    write_result(written, path)


def _method_of(command: str) -> str:
    words = shlex.split(command)
    return words[words.index("--method") + 1] if "--method" in words[:-1] else words[0]

