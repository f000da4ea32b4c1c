"""``gradeff launch N [pytest args]``: run a selection as N shards on Slurm or on this machine, then merge them.

1. **Plan.** The selection is planned here once with ``--gradeff-dry-run`` (bad arguments fail now, not in N jobs):
   every selected test's cell and seed, and what each cell is expected to take. The tests are split exactly as
   each shard will split them (:func:`gradeff.scale.shard.assign_nodes`), and each shard's job is sized from its
   cells (:mod:`gradeff.scale.resources`).
2. **Submit.** Each shard is the same pytest command with ``--gradeff-shard I/N``, a results file of its own and
   ``--gradeff-resume``, run by :class:`gradeff.scale.shard_job.ShardJob` through submitit: on Slurm as one job
   array (:mod:`gradeff.scale.slurm`), locally as processes that split the machine (``cores / N`` torch threads
   each; on a GPU machine shard ``I`` sees GPU ``I mod count`` only). The folder's ``launch.json``
   (:mod:`gradeff.scale.manifest`) records it all, so ``gradeff launch status`` and ``gradeff launch collect``
   can follow it from elsewhere.
3. **Wait and collect** (unless ``--no-wait``): until every shard's job has ended (a requeued Slurm task runs
   again and resumes from its results file), then the shards' records are merged into one file, every selected
   cell once, a cell no shard recorded as ``error`` (:mod:`gradeff.scale.collect`).

The engine: ``slurm`` when a Slurm cluster answers (``sinfo``), else ``local`` (``auto``); an explicit ``slurm``
without a cluster is refused before anything is submitted.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from gradeff.cell.devices import gpu_count
from gradeff.cell.environment import code_version
from gradeff.scale.collect import Collected, CollectError, collect
from gradeff.scale.manifest import LaunchManifest, save_manifest
from gradeff.scale.resources import Sizing, cell_estimates, recorded_estimates, shard_estimates, size_array
from gradeff.scale.shard import assign_nodes, cell_costs
from gradeff.scale.shard_job import ShardJob
from gradeff.scale.slurm import SbatchRequest, cluster_unavailable, parse_sbatch_flags, submitit_parameters
from gradeff.scale.status import ShardStatus, shard_statuses

__all__ = ["DEFAULT_TIME_MARGIN", "ENGINES", "EXECUTORS", "LaunchError", "LaunchOptions", "LaunchResult",
           "check_options", "choose_engine", "describe", "launch", "plan_selection", "shard_command",
           "wait_for_shards"]

ENGINES = ("auto", "local", "slurm")
# The option's earlier name (--executor) takes the same values.
EXECUTORS = ENGINES
DEFAULT_TIME_MARGIN = 2.0
# Options launch sets itself for every shard (or for its plan); a user's copy would make the shards disagree,
# collide, or plan instead of run.
_RESERVED = ("--gradeff-shard", "--gradeff-results", "--gradeff-report", "--gradeff-baseline", "--gradeff-resume",
             "--gradeff-shard-costs", "--gradeff-dry-run", "--gradeff-dry-run-json")
# How often a waiting launch asks after its shards: sacct is a database query, a local shard a /proc read.
_POLL_S = {"slurm": 10.0, "local": 1.0}


class LaunchError(Exception):
    """A launch that cannot start, or whose shards cannot be merged; the message says why."""


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """What ``gradeff launch`` was asked for.

    Attributes:
        shards: how many shards (jobs).
        pytest_args: the selection and options every shard runs (``benchmarks -m main --gradeff-epochs 1``).
        folder: where jobs, logs, the plan, the manifest and the shards' results files go.
        output: the merged results file (default ``<folder>/results.jsonl``).
        costs: a results file whose wall times balance the shards and size their jobs.
        engine: ``auto`` (Slurm when a cluster answers, else local), ``local`` or ``slurm``.
        wait: wait for the shards and collect them (``False``: submit, write the manifest and return; Slurm only).
        timeout_min / mem_gb: each job's time limit and memory (default: from the estimates).
        time_margin: the factor on the longest shard's expected time (see :mod:`gradeff.scale.resources`).
        cpus: CPUs per Slurm task (default: Slurm's, one).
        gpus: GPUs per shard, asked as ``--gres=gpu:N`` (default: 1 on the paper profile or with ``gpu``, else 0).
        gpu: the GPU the shards run on (``H100``): the dry run estimates times for it.
        partition / account / qos: passed to sbatch.
        throttle: at most this many shards run at once (``--array=...%K``).
        sbatch: further sbatch flags, ``NAME=VALUE`` or ``NAME``.
        report: write the HTML report (or CSV) of the merged records.
        baseline: run the regression gate of the merged records against this results file.
        compare_args: the gate's extra options.
        poll_s: how often a waiting launch asks after its shards (default: 10 s on Slurm, sacct being a database
            query; 1 s locally).
    """

    shards: int
    pytest_args: tuple[str, ...]
    folder: Path
    output: Path | None = None
    costs: Path | None = None
    engine: str = "auto"
    wait: bool = True
    timeout_min: int | None = None
    mem_gb: float | None = None
    time_margin: float = DEFAULT_TIME_MARGIN
    cpus: int | None = None
    gpus: int | None = None
    gpu: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    throttle: int | None = None
    sbatch: tuple[str, ...] = ()
    report: Path | None = None
    baseline: Path | None = None
    compare_args: str = ""
    poll_s: float | None = None

    @property
    def merged(self) -> Path:
        return self.output if self.output is not None else self.folder / "results.jsonl"

    @property
    def slurm_only(self) -> list[str]:
        """The options given that only a Slurm job array has a use for."""
        given = {"--partition": self.partition, "--account": self.account, "--qos": self.qos,
                 "--throttle": self.throttle, "--sbatch": self.sbatch or None, "--mem-gb": self.mem_gb,
                 "--cpus-per-task": self.cpus}
        return [name for name, value in given.items() if value is not None]


@dataclass(frozen=True, kw_only=True)
class LaunchResult:
    """A launch's end: its manifest, and when it waited, every shard's status and what collecting gave."""

    manifest: LaunchManifest
    statuses: tuple[ShardStatus, ...] = ()
    collected: Collected | None = None


def shard_command(options: LaunchOptions, index: int) -> list[str]:
    """The pytest command line of shard ``index`` (1-based)."""
    command = [sys.executable, "-m", "pytest", *options.pytest_args, "--gradeff-shard", f"{index}/{options.shards}",
               f"--gradeff-results={options.folder / f'shard-{index}.jsonl'}"]
    if options.costs is not None:
        command.append(f"--gradeff-shard-costs={options.costs}")
    # A shard that starts again (requeued, preempted, past its time limit) skips the cells it has recorded.
    command.append("--gradeff-resume")
    return command


def describe(options: LaunchOptions) -> str:
    """One line: what each shard runs."""
    return shlex.join(shard_command(options, 1)).replace("--gradeff-shard 1/", "--gradeff-shard I/")


def check_options(options: LaunchOptions) -> None:
    """Refuse a launch that could not give one results file with every cell once, before any job starts."""
    if options.shards < 1:
        raise LaunchError(f"the number of shards must be >= 1, got {options.shards}")
    if options.engine not in ENGINES:
        raise LaunchError(f"unknown engine {options.engine!r}; valid: {', '.join(ENGINES)}")
    for argument in options.pytest_args:
        name = argument.split("=", 1)[0]
        if name in _RESERVED:
            raise LaunchError(f"{name} is set by gradeff launch for each shard; leave it out of the pytest arguments "
                              "(launch options: --output, --costs, --report, --baseline, --gpu)")
    if options.merged.exists() and options.merged.stat().st_size > 0:
        raise LaunchError(f"{options.merged} exists; give --output a new file or another --folder")
    if options.costs is not None and not options.costs.is_file():
        raise LaunchError(f"--costs {options.costs}: no such file")
    for name, value, least in (("--throttle", options.throttle, 1), ("--timeout-min", options.timeout_min, 1),
                               ("--cpus-per-task", options.cpus, 1), ("--gpus", options.gpus, 0)):
        if value is not None and value < least:
            raise LaunchError(f"{name} must be >= {least}, got {value}")
    if options.mem_gb is not None and options.mem_gb <= 0:
        raise LaunchError(f"--mem-gb must be > 0, got {options.mem_gb}")
    if options.poll_s is not None and options.poll_s <= 0:
        raise LaunchError(f"--poll-s must be > 0, got {options.poll_s}")
    if options.time_margin < 1:
        raise LaunchError(f"--time-margin must be >= 1 (a factor on the expected time), got {options.time_margin}")
    try:
        parse_sbatch_flags(options.sbatch)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def choose_engine(options: LaunchOptions, *, probe: Callable[[], str | None] = cluster_unavailable) -> str:
    """``slurm`` or ``local``: what ``options.engine`` means here.

    Raises:
        LaunchError: ``slurm`` asked for (or implied by Slurm-only options) and no cluster answers; Slurm-only
            options on the local engine; ``--no-wait`` locally.
    """
    if options.engine == "local":
        engine = "local"
    else:
        reason = probe()
        if reason is None:
            engine = "slurm"
        elif options.engine == "slurm":
            raise LaunchError(f"--engine slurm: no Slurm cluster answers here ({reason}); start one, or use "
                              "--engine local")
        elif options.slurm_only:
            raise LaunchError(f"{', '.join(options.slurm_only)} given for Slurm, but no Slurm cluster answers here "
                              f"({reason}); leave them out to run the shards as local processes")
        else:
            engine = "local"
    if engine == "local" and options.slurm_only:
        raise LaunchError(f"{', '.join(options.slurm_only)}: Slurm options; the local engine runs every shard at once "
                          "as a process of this machine")
    if engine == "local" and not options.wait:
        raise LaunchError("--no-wait: local shards are this process's children and end with it; use --engine slurm")
    return engine


def plan_selection(options: LaunchOptions) -> dict:
    """The dry run of the selection here (``--gradeff-dry-run[=GPU] --gradeff-dry-run-json``), runs nothing.

    Returns:
        The dry run's document: every selected test's cell and seed, each cell's estimate (see
        :func:`gradeff.pytest.dryrun.plan_document`).

    Raises:
        LaunchError: the arguments select no test, or pytest cannot collect them (its last lines).
    """
    with tempfile.TemporaryDirectory(prefix="gradeff-launch-") as scratch:
        path = Path(scratch) / "plan.json"
        dry_run = f"--gradeff-dry-run={options.gpu}" if options.gpu else "--gradeff-dry-run"
        command = [sys.executable, "-m", "pytest", *options.pytest_args, dry_run, f"--gradeff-dry-run-json={path}",
                   "-q"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode == 5 or (done.returncode == 0 and not path.exists()):
            raise LaunchError(f"the pytest arguments select no test: {shlex.join(options.pytest_args)}")
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise LaunchError(f"pytest cannot plan {shlex.join(options.pytest_args)!r} (exit code {done.returncode}):"
                              f"\n{tail}")
        plan = json.loads(path.read_text(encoding="utf-8"))
    if not plan["tests"]:
        raise LaunchError(f"the pytest arguments select no test: {shlex.join(options.pytest_args)}")
    return plan


def _size(options: LaunchOptions, plan: dict, assignment: list[list[str]]) -> tuple[Sizing, int]:
    recorded = recorded_estimates([options.costs], profile=plan["profile"]) if options.costs is not None else None
    estimates = cell_estimates(plan, recorded)
    cell_of = {test["nodeid"]: test["cell"] for test in plan["tests"]}
    gpus = options.gpus if options.gpus is not None else int(plan["profile"] == "paper" or options.gpu is not None)
    sizing = size_array(shard_estimates(assignment, cell_of, estimates, plan), time_margin=options.time_margin,
                        gpus=gpus, timeout_min=options.timeout_min, mem_gb=options.mem_gb)
    return sizing, gpus


def _local_gpus() -> list[int]:
    """The GPUs local shards are spread over, as CUDA_VISIBLE_DEVICES numbers them for this process."""
    count = gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if all(entry.isdigit() for entry in entries):
            return [int(entry) for entry in entries][:count]
    return list(range(count))


def _submit_local(options: LaunchOptions, sizing: Sizing, manifest: LaunchManifest) -> list:
    import submitit

    executor = submitit.LocalExecutor(folder=manifest.jobs_folder / "%j")
    executor.update_parameters(timeout_min=sizing.time_min)
    gpus = _local_gpus()
    # The shards share this machine: split its cores, and give each its own GPU where there are some.
    threads = max(1, (os.cpu_count() or 1) // options.shards)
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
    jobs = []
    for index in range(1, options.shards + 1):
        if gpus:
            executor.update_parameters(gpus_per_node=1, visible_gpus=(gpus[(index - 1) % len(gpus)],))
        jobs.append(executor.submit(ShardJob(), shard_command(options, index), manifest.cwd,
                                    str(manifest.shard_log(index)), env))
    return jobs


def _submit_slurm(options: LaunchOptions, request: SbatchRequest, manifest: LaunchManifest) -> list:
    import submitit

    executor = submitit.AutoExecutor(folder=manifest.jobs_folder / "%j", cluster="slurm")
    executor.update_parameters(**submitit_parameters(request))
    # The tasks inherit this environment; torch's threads follow the CPUs asked for unless already set.
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(request.cpus or 1))}
    with executor.batch():
        jobs = [executor.submit(ShardJob(), shard_command(options, index), manifest.cwd,
                                str(manifest.shard_log(index)), env) for index in range(1, options.shards + 1)]
    return jobs


def wait_for_shards(manifest: LaunchManifest, *, echo=print, poll_s: float | None = None,
                    statuses_of: Callable[[LaunchManifest], list[ShardStatus]] = shard_statuses) -> list[ShardStatus]:
    """Poll every shard until all have ended (a requeued Slurm task runs again), echoing each change of state.

    Returns:
        Every shard's final status.
    """
    poll = poll_s if poll_s is not None else _POLL_S[manifest.engine]
    started = time.perf_counter()
    last: dict[int, str] = {}
    while True:
        try:
            statuses = statuses_of(manifest)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            # A controller or database that does not answer for a moment (a restart, a busy slurmdbd) is waited out.
            echo(f"gradeff launch: cannot read the shards' states ({exc}); asking again in {poll:g} s")
            time.sleep(poll)
            continue
        for status in statuses:
            if last.get(status.index) != status.state:
                was = f"{last[status.index]} → " if status.index in last else ""
                echo(f"gradeff launch: shard {status.index}/{manifest.shards} (job {status.job}) {was}{status.state} "
                     f"after {time.perf_counter() - started:.1f} s ({status.recorded}/{status.assigned} recorded)")
                last[status.index] = status.state
        if all(status.ended for status in statuses):
            return statuses
        time.sleep(poll)


def launch(options: LaunchOptions, *, echo=print) -> LaunchResult:
    """Plan, submit, and unless ``options.wait`` is false, wait for every shard and collect them.

    Raises:
        LaunchError: bad options, no cluster for ``--engine slurm``, a selection that cannot be planned, or shards
            whose records cannot be merged (a cell in two shards).
    """
    check_options(options)
    engine = choose_engine(options)
    plan = plan_selection(options)
    tests = plan["tests"]
    echo(f"gradeff launch: {len(tests)} selected tests in {options.shards} shards on {engine}: {describe(options)}")
    cells_by_node = {test["nodeid"]: test["cell"] or test["nodeid"] for test in tests}
    # The shards balance by the same costs (--gradeff-shard-costs): the same split, computed before they run.
    costs = cell_costs([options.costs], profile=plan["profile"]) if options.costs is not None else None
    assignment = assign_nodes(cells_by_node, options.shards, costs)
    shard_of = {node: index for index, nodes in enumerate(assignment, start=1) for node in nodes}
    sizing, gpus = _size(options, plan, assignment)
    for line in sizing.basis if engine == "slurm" else sizing.basis[:1]:  # a local shard has a time limit only
        echo(f"gradeff launch: {line}")
    request = SbatchRequest(time_min=sizing.time_min, mem_gb=sizing.mem_gb, gpus=gpus, cpus=options.cpus,
                            partition=options.partition, account=options.account, qos=options.qos,
                            throttle=options.throttle, extra=parse_sbatch_flags(options.sbatch))
    options.folder.mkdir(parents=True, exist_ok=True)
    (options.folder / "plan.json").write_text(json.dumps(plan, indent=1) + "\n", encoding="utf-8")
    manifest = LaunchManifest(
        engine=engine, shards=options.shards, pytest_args=options.pytest_args, folder=str(options.folder.resolve()),
        cwd=os.getcwd(), output=str(options.merged.resolve()),
        # Absolute: `gradeff launch collect` may run elsewhere.
        report=str(options.report.resolve()) if options.report else None,
        baseline=str(options.baseline.resolve()) if options.baseline else None, compare_args=options.compare_args,
        profile=plan["profile"], code_version=code_version(),
        tests=tuple({"nodeid": t["nodeid"], "cell": t["cell"], "seed": t["seed"], "shard": shard_of[t["nodeid"]]}
                    for t in tests),
        cells={cell: {axis: planned[axis] for axis in ("grid", "model", "optimizer", "strategy", "method", "dataset")}
               for cell, planned in plan["cells"].items()},
        sbatch=asdict(request) if engine == "slurm" else {},
        basis=sizing.basis, created_at=time.time())
    save_manifest(manifest)
    jobs = _submit_slurm(options, request, manifest) if engine == "slurm" else _submit_local(options, sizing, manifest)
    array_id = jobs[0].job_id.split("_")[0] if engine == "slurm" else None
    manifest = replace(manifest, array_id=array_id, jobs=tuple(str(job.job_id) for job in jobs))
    save_manifest(manifest)
    where = f"Slurm job array {array_id}" if engine == "slurm" else "local processes"
    echo(f"gradeff launch: {options.shards} shards submitted as {where} ({', '.join(manifest.jobs)}); "
         f"follow: gradeff launch status {options.folder}")
    if not options.wait:
        echo(f"gradeff launch: when they have ended: gradeff launch collect {options.folder}")
        return LaunchResult(manifest=manifest)
    try:
        statuses = wait_for_shards(manifest, echo=echo, poll_s=options.poll_s)
    except KeyboardInterrupt:
        if engine == "local":
            for job in jobs:
                job.cancel(check=False)
        else:
            echo(f"gradeff launch: the shards go on running (scancel {array_id} stops them); "
                 f"gradeff launch collect {options.folder} when they have ended")
        raise
    try:
        collected = collect(manifest, statuses)
    except CollectError as exc:
        raise LaunchError(str(exc)) from None
    return LaunchResult(manifest=manifest, statuses=tuple(statuses), collected=collected)

