"""``gradeff launch N [pytest args]``: run a selection as N shards on Slurm or on this machine, then merge them.

Each shard is the same pytest command with ``--gradeff-shard I/N`` and a results file of its own,
submitted with submitit: ``AutoExecutor`` sends it to Slurm when ``srun`` is there and runs it as a
local process otherwise (``--executor local`` forces ``submitit.LocalExecutor``). When every shard has
ended, their results files are merged into one, checked to hold every cell once, and the report and
the regression gate run on it as a pytest session's would.

Local shards split the machine: each gets ``cores / N`` torch threads, and on a GPU machine shard
``I`` sees GPU ``I mod count`` only.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["EXECUTORS", "LaunchError", "LaunchOptions", "ShardOutcome", "check_options", "check_selection", "launch",
           "merge_results", "run_shard", "shard_command"]

EXECUTORS = ("auto", "local", "slurm")
# Options launch sets itself for every shard; a user's copy would make the shards disagree or collide.
_RESERVED = ("--gradeff-shard", "--gradeff-results", "--gradeff-report", "--gradeff-baseline", "--gradeff-resume")


class LaunchError(Exception):
    """A launch that cannot start, or whose shards cannot be merged; the message says why."""


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """What ``gradeff launch`` was asked for.

    Attributes:
        shards: how many shards (jobs).
        pytest_args: the selection and options every shard runs (``benchmarks -m main --gradeff-epochs 1``).
        folder: where jobs, logs and the shards' results files go.
        output: the merged results file (default ``<folder>/results.jsonl``).
        costs: a results file whose wall times balance the shards (``--gradeff-shard-costs``).
        executor: ``auto`` (Slurm when available, else local), ``local`` or ``slurm``.
        timeout_min: each job's time limit.
        report: write the HTML report (or CSV) of the merged records here.
        baseline: run the regression gate of the merged records against this results file.
        compare_args: the gate's extra options.
        parameters: extra submitit parameters (``slurm_partition``, ``gpus_per_node``, ``cpus_per_task``, ...).
    """

    shards: int
    pytest_args: tuple[str, ...]
    folder: Path
    output: Path | None = None
    costs: Path | None = None
    executor: str = "auto"
    timeout_min: int = 24 * 60
    report: Path | None = None
    baseline: Path | None = None
    compare_args: str = ""
    parameters: dict = field(default_factory=dict)

    @property
    def merged(self) -> Path:
        return self.output if self.output is not None else self.folder / "results.jsonl"


@dataclass(frozen=True, kw_only=True)
class ShardOutcome:
    """One shard's end: pytest's exit code (5: the shard had no cell), its results file and log."""

    index: int
    returncode: int | None
    results: Path
    log: Path
    seconds: float
    error: str = ""


def shard_command(options: LaunchOptions, index: int) -> list[str]:
    """The pytest command line of shard ``index`` (1-based)."""
    command = [sys.executable, "-m", "pytest", *options.pytest_args, "--gradeff-shard", f"{index}/{options.shards}",
               f"--gradeff-results={options.folder / f'shard-{index}.jsonl'}"]
    if options.costs is not None:
        command.append(f"--gradeff-shard-costs={options.costs}")
    return command


def run_shard(command: Sequence[str], cwd: str, log: str, env: dict[str, str]) -> int:
    """Run one shard's pytest (in the job); its output goes to ``log``. Returns pytest's exit code."""
    with open(log, "w", encoding="utf-8") as handle:
        return subprocess.run(list(command), cwd=cwd, env=os.environ | env, stdout=handle,
                              stderr=subprocess.STDOUT, check=False).returncode


def _local_gpus() -> list[int]:
    """The GPUs local shards are spread over, as CUDA_VISIBLE_DEVICES numbers them for this process."""
    from gradeff.cell.devices import gpu_count

    count = gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if all(entry.isdigit() for entry in entries):
            return [int(entry) for entry in entries][:count]
    return list(range(count))


def _executor(options: LaunchOptions):
    import submitit

    folder = options.folder / "jobs" / "%j"
    if options.executor == "local":
        executor = submitit.LocalExecutor(folder=folder)
    else:
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm" if options.executor == "slurm" else None)
    parameters = {"timeout_min": options.timeout_min} | options.parameters
    if isinstance(executor, submitit.AutoExecutor):
        parameters.setdefault("name", "gradeff")
    executor.update_parameters(**parameters)
    return executor


def _is_local(executor) -> bool:
    import submitit

    return isinstance(executor, submitit.LocalExecutor) or getattr(executor, "cluster", None) == "local"


def _see_one_gpu(executor, gpu: int) -> None:
    """A local job that sees GPU ``gpu`` only (submitit sets its CUDA_VISIBLE_DEVICES)."""
    import submitit

    prefix = "local_" if isinstance(executor, submitit.AutoExecutor) else ""
    executor.update_parameters(gpus_per_node=1, **{f"{prefix}visible_gpus": (gpu,)})


def check_options(options: LaunchOptions) -> None:
    """Refuse a launch that could not give one results file with every cell once, before any job starts."""
    if options.shards < 1:
        raise LaunchError(f"the number of shards must be >= 1, got {options.shards}")
    if options.executor not in EXECUTORS:
        raise LaunchError(f"unknown executor {options.executor!r}; valid: {', '.join(EXECUTORS)}")
    for argument in options.pytest_args:
        name = argument.split("=", 1)[0]
        if name in _RESERVED:
            raise LaunchError(f"{name} is set by gradeff launch for each shard; leave it out of the pytest arguments "
                              "(launch options: --output, --costs, --report, --baseline)")
    if options.merged.exists() and options.merged.stat().st_size > 0:
        raise LaunchError(f"{options.merged} exists; give --output a new file or another --folder")
    if options.costs is not None and not options.costs.is_file():
        raise LaunchError(f"--costs {options.costs}: no such file")


def check_selection(options: LaunchOptions) -> int:
    """Collect the selection here once, running nothing: bad pytest arguments fail now, not in N jobs.

    Returns:
        The number of selected tests.
    """
    command = [sys.executable, "-m", "pytest", *options.pytest_args, "--collect-only", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 5:
        raise LaunchError(f"the pytest arguments select no test: {shlex.join(options.pytest_args)}")
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise LaunchError(f"pytest cannot collect {shlex.join(options.pytest_args)!r} (exit code {done.returncode}):"
                          f"\n{tail}")
    return sum("::" in line for line in done.stdout.splitlines())


def launch(options: LaunchOptions, *, echo=print) -> tuple[list[ShardOutcome], Path]:
    """Submit the shards, wait for all of them, merge their results files.

    Returns:
        Each shard's outcome and the merged results file.

    Raises:
        LaunchError: bad options, or shards whose records cannot be merged (a cell in two shards).
    """
    check_options(options)
    selected = check_selection(options)
    echo(f"gradeff launch: {selected} selected tests in {options.shards} shards: {describe(options)}")
    options.folder.mkdir(parents=True, exist_ok=True)
    executor = _executor(options)
    local = _is_local(executor)
    gpus = _local_gpus() if local else []
    cwd = os.getcwd()
    jobs = []
    started = time.perf_counter()
    for index in range(1, options.shards + 1):
        env = {}
        if local:
            # The shards share this machine: split its cores, and give each its own GPU where there are some.
            threads = max(1, (os.cpu_count() or 1) // options.shards)
            env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
            if gpus:
                _see_one_gpu(executor, gpus[(index - 1) % len(gpus)])
        log = options.folder / f"shard-{index}.log"
        job = executor.submit(run_shard, shard_command(options, index), cwd, str(log), env)
        echo(f"gradeff launch: shard {index}/{options.shards} submitted as job {job.job_id} (log {log})")
        jobs.append((index, job, log))
    outcomes = []
    try:
        for index, job, log in jobs:
            results = options.folder / f"shard-{index}.jsonl"
            try:
                code, error = job.result(), ""
            except Exception as exc:  # noqa: BLE001 - a job that died is reported with its reason, the rest merged
                code, error = None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc) else ''}"
            outcomes.append(ShardOutcome(index=index, returncode=code, results=results, log=log,
                                         seconds=time.perf_counter() - started, error=error))
            echo(f"gradeff launch: shard {index}/{options.shards} ended "
                 f"{'with exit code ' + str(code) if code is not None else 'without a result: ' + error} "
                 f"after {time.perf_counter() - started:.1f} s")
    except KeyboardInterrupt:
        for _, job, _ in jobs:
            job.cancel(check=False)
        raise
    merged = merge_results([o.results for o in outcomes if o.results.exists()], options.merged)
    return outcomes, merged


def merge_results(paths: Sequence[Path], output: Path) -> Path:
    """Write the records of the shards' results files into ``output``, each (cell, seed) once.

    Raises:
        LaunchError: a cell and seed recorded by two shards (their assignments disagreed), or a file that
            cannot be read.
    """
    from gradeff.records.loading import ResultsFileError, load_results

    seen: dict[tuple[str, int], str] = {}
    lines = []
    for path in paths:
        if path.stat().st_size == 0:
            continue
        try:
            loaded = load_results([path])
        except ResultsFileError as exc:
            raise LaunchError(str(exc)) from None
        for record in loaded.records:
            key = (record.cell, record.seed)
            if key in seen and seen[key] != str(path):
                raise LaunchError(f"{record.cell} (seed {record.seed}) is in {seen[key]} and in {path}: the shards "
                                  "did not agree on the split (different selections or costs files?)")
            seen[key] = str(path)
            lines.append(record.to_json() + "\n")
    from gradeff.records.outputs import write_text

    return write_text(output, "".join(lines))


def describe(options: LaunchOptions) -> str:
    """One line: what each shard runs."""
    return shlex.join(shard_command(options, 1)).replace("--gradeff-shard 1/", "--gradeff-shard I/")
