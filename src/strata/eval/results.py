"""The one model of an evaluation result file: what was measured (datasets, settings, experiments with their metrics
and per-query rows), by which command, on which machine.

Every benchmark script (benchmarks/*.py) and every `strata eval` command writes its JSON through `write_result` or
`update_result`; benchmarks/report.py and `strata eval compare` read it through `load_result`. The command, the time
and the machine are captured by the writer, never typed, and a file edited out of shape fails by name instead of
rendering wrong numbers.
"""

from __future__ import annotations

import fcntl
import os
import platform
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from strata.index.state import atomic_write

# Set by the `strata` CLI around each command it runs, so a command run in-process by another one (the matrix
# runs its rows this way) records its own command line, not its caller's.
_COMMAND: ContextVar[str | None] = ContextVar("strata_result_command", default=None)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Machine(_Strict):
    cpus: int | None = Field(default=None, description="os.cpu_count()")
    cpus_usable: int | None = Field(default=None, description="CPUs this process may run on (sched_getaffinity)")
    platform: str | None = Field(default=None, description="platform.platform()")
    processor: str | None = Field(default=None, description="platform.processor(), or the machine type")
    python: str | None = Field(default=None, description="platform.python_version()")
    load_average_1m: float | None = Field(default=None, description="1-minute load average when the file was written")
    nice: int | None = Field(default=None, description="The process's nice value")
    omp_threads: str | None = Field(default=None, description="OMP_NUM_THREADS, when set")


class DatasetRef(_Strict):
    name: str = Field(description="What experiments name in their `dataset`")
    path: str | None = Field(default=None, description="Folder read, as the command was given it")
    fingerprint: str | None = Field(default=None, description="sha256 over the dataset files read")
    split: str | None = Field(default=None, description="Split or book evaluated, e.g. 'test'")


class QueryRow(_Strict):
    """One query of an experiment: the format `strata eval compare` pairs by `query_id`."""

    query_id: str
    metrics: dict[str, float]
    seconds: float | None = None
    book: str | None = Field(default=None, description="The book a ToC question belongs to")
    predicted: list[str] | None = Field(default=None, description="ToC leaf labels, best first")
    gold_path: list[str] | None = Field(default=None, description="The ToC question's gold section path")
    raw_output: str | None = Field(default=None, description="A generating method's free text")

    @model_serializer(mode="wrap")
    def _without_unset_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A retrieval row has no ToC fields: thousands of rows would otherwise each carry four nulls.
        return {name: value for name, value in handler(self).items() if value is not None}


class Experiment(_Strict):
    name: str = Field(description="Unique within the file")
    method: str
    dataset: str | None = Field(default=None, description="Name of one of the file's datasets (None: no dataset)")
    subset: str | None = Field(default=None, description="Part of the dataset measured: a book, 'all', a sample")
    group: str | None = Field(default=None, description="Part of the benchmark it belongs to (a ToC experiment, ...)")
    queries: int | None = Field(default=None, description="Queries (questions, claims) measured")
    metrics: dict[str, float] = Field(default_factory=dict, description="Quality (or count) measures: name -> value")
    cost: dict[str, float] = Field(
        default_factory=dict, description="Time and LLM cost: latency, seconds, LLM calls and tokens per query, ..."
    )
    per_query: str | list[QueryRow] | None = Field(
        default=None, description="The rows inline, or the repository-relative path of a result file holding them"
    )
    command: str | None = Field(default=None, description="The command that measured it (None: not recorded)")
    details: dict[str, Any] = Field(default_factory=dict, description="Structured facts specific to this experiment")


class ResultFile(_Strict):
    benchmark: str = Field(description="What writes the file: a benchmarks/ script or a `strata eval` command")
    command: str | None = Field(description="The command line that wrote the file, captured (None: not recorded)")
    created: str | None = Field(description="When it was written, ISO 8601 (None: not recorded)")
    machine: Machine
    datasets: list[DatasetRef] = Field(default_factory=list)
    settings: dict[str, Any] = Field(
        default_factory=dict, description="Settings sections the run used (dumped), and the benchmark's own caps"
    )
    experiments: list[Experiment] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict, description="Benchmark-specific structured payload")

    @model_validator(mode="after")
    def _consistent(self) -> ResultFile:
        twice = repeated(experiment.name for experiment in self.experiments)
        if twice:
            raise ValueError(f"experiment names must be unique; repeated: {', '.join(twice)}")
        known = {dataset.name for dataset in self.datasets}
        unknown = sorted({e.dataset for e in self.experiments if e.dataset is not None and e.dataset not in known})
        if unknown:
            raise ValueError(f"experiments name datasets the file does not list: {', '.join(unknown)}")
        return self

    def experiment(self, name: str) -> Experiment:
        for experiment in self.experiments:
            if experiment.name == name:
                return experiment
        raise KeyError(f"{self.benchmark}: no experiment {name!r}")


def repeated(names: Iterable[str]) -> list[str]:
    """The names that occur more than once, sorted."""
    return sorted(name for name, count in Counter(names).items() if count > 1)


class ResultFileError(ValueError):
    """A file under benchmarks/results that is not a valid ResultFile; the message names the file."""


def load_result(path: Path) -> ResultFile:
    path = Path(path)
    try:
        return ResultFile.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as error:
        raise ResultFileError(f"{path}: not a valid result file (strata.eval.results.ResultFile):\n{error}") from error


def load_results(folder: Path) -> dict[str, ResultFile]:
    """Every *.json under `folder` (recursively, its tmp/ work folder excepted), by path relative to it."""
    folder = Path(folder)
    return {
        path.relative_to(folder).as_posix(): load_result(path)
        for path in sorted(folder.rglob("*.json"))
        if "tmp" not in path.relative_to(folder).parts
    }


def write_result(result: ResultFile, path: Path) -> Path:
    """Write atomically (a whole file or the old one, never a torn one), with every absolute path inside the
    checkout that holds `path` stored relative to it: a committed file must render the same on another clone."""
    path = Path(path).absolute()
    checkout = next((folder for folder in path.parents if (folder / "pyproject.toml").is_file()), None)
    if checkout is not None:
        result = ResultFile.model_validate(_portable(result.model_dump(mode="json"), checkout))
    atomic_write(path, (result.model_dump_json(indent=1) + "\n").encode("utf-8"))
    return path


def _portable(value: Any, checkout: Path) -> Any:
    if isinstance(value, dict):
        return {key: _portable(item, checkout) for key, item in value.items()}
    if isinstance(value, list):
        return [_portable(item, checkout) for item in value]
    if isinstance(value, str) and value.startswith("/") and Path(value).is_relative_to(checkout.parent):
        return repo_relative(value, checkout)
    return value


def update_result(path: Path, update: Callable[[ResultFile | None], ResultFile]) -> ResultFile:
    """Read-modify-write under a lock: benchmarks whose parts run as separate processes, or that keep the
    experiments of earlier runs, merge into the file as it is when they write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_name(f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = update(load_result(path) if path.is_file() else None)
        write_result(result, path)
    return result


def merged(earlier: ResultFile | None, new: ResultFile) -> ResultFile:
    """`new` with the experiments of `earlier` it did not measure again (by name, earlier ones first) and the
    top-level `details` keys it did not write."""
    if earlier is None:
        return new
    names = {experiment.name for experiment in new.experiments}
    kept = [experiment for experiment in earlier.experiments if experiment.name not in names]
    datasets = {dataset.name: dataset for dataset in [*earlier.datasets, *new.datasets]}
    return new.model_copy(
        update={
            "experiments": [*kept, *new.experiments],
            "datasets": list(datasets.values()),
            "details": earlier.details | new.details,
        }
    )


def new_result(benchmark: str, experiments: Sequence[Experiment] = (), **fields: Any) -> ResultFile:
    """A result of the running command: its command line, the time and the machine are captured here, and each
    experiment without a command gets this one, so pass only this run's experiments (keep earlier ones with
    `merged`)."""
    command = capture_command()
    return ResultFile(
        benchmark=benchmark,
        command=command,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=capture_machine(),
        experiments=[e if e.command else e.model_copy(update={"command": command}) for e in experiments],
        **fields,
    )


def pooled_command(commands: Iterable[str | None]) -> str | None:
    """The command of a row pooled from rows measured by `commands` (pooling measures nothing): each once, sorted,
    as one shell line (`a; b` runs them all); None when any of them, or all, went unrecorded."""
    listed = list(commands)
    recorded = {command for command in listed if command is not None}
    return "; ".join(sorted(recorded)) if listed and None not in listed else None


def capture_machine() -> Machine:
    return Machine(
        cpus=os.cpu_count(),
        cpus_usable=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        python=platform.python_version(),
        load_average_1m=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        nice=os.nice(0) if hasattr(os, "nice") else None,
        omp_threads=os.environ.get("OMP_NUM_THREADS"),
    )


def capture_command() -> str:
    """The running command line: `strata ...` inside the CLI, else `python SCRIPT ARGS` as sys.argv has it."""
    inside = _COMMAND.get()
    if inside is not None:
        return inside
    script, *args = sys.argv or [""]
    program = Path(script)
    if program.suffix == ".py":
        with_root = program.resolve()
        shown = with_root.relative_to(Path.cwd()) if with_root.is_relative_to(Path.cwd()) else program
        return shlex.join(["python", str(shown), *args])
    return shlex.join([program.name, *args])


@contextmanager
def command_line(words: Sequence[str]) -> Iterator[None]:
    """Record `words` as the command of the results written inside."""
    token = _COMMAND.set(shlex.join(words))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def repo_relative(path: Path | str, root: Path) -> str:
    """A path as result files store it: relative to the repository root `root` when under it or beside it (the
    shared data sits next to the repository), so files read the same on every checkout."""
    resolved, root = Path(path).resolve(), Path(root).resolve()
    return Path(os.path.relpath(resolved, root)).as_posix() if resolved.is_relative_to(root.parent) else str(resolved)
