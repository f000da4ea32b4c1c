"""Slurm, as ``gradeff launch`` meets it: whether a cluster answers, a shard array's sbatch parameters (for
submitit), and the states ``sacct`` reports for the array's tasks, every run of a requeued task included.

A cluster is there when ``sinfo`` answers, not when ``srun`` is on PATH: Slurm's client packages install ``srun``
on machines that reach no controller (submitit's ``AutoExecutor`` takes that for a cluster), and a configured
client whose controller is down retries for ~10 s before it fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["FINAL_STATES", "GONE", "PROBE_TIMEOUT_S", "RESERVED_SBATCH", "SbatchRequest", "TaskRun", "TaskState",
           "array_runs", "array_tasks", "cluster_unavailable", "current_state", "is_final", "parse_sacct",
           "parse_sbatch_flags", "parse_squeue", "queued_states", "submitit_parameters"]

# sinfo on a configured client whose controller is down gives up after ~9 s (its connect retries).
PROBE_TIMEOUT_S = 10.0
# sacct states after which a task runs no more. PREEMPTED is final where preemption cancels (PreemptMode=CANCEL);
# where it requeues, Slurm reports the run REQUEUED and the task PENDING again. Everything else (PENDING, RUNNING,
# REQUEUED, REQUEUE_HOLD, SUSPENDED, COMPLETING, ...) may still run.
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                "PREEMPTED", "REVOKED", "GONE")
# A task neither squeue nor sacct knows: cancelled while it was still part of the array's pending record, it never
# became a job of its own, and accounting has no line for it.
GONE = "GONE"
# sbatch flags launch writes itself (the array, its logs, the signal submitit checkpoints on) or sets from an option
# of its own: given through --sbatch they would be silently replaced or would contradict that option.
RESERVED_SBATCH = {"array": "--throttle", "output": None, "error": None, "open-mode": None, "signal": None,
                   "wrap": None, "job-name": None, "time": "--timeout-min", "mem": "--mem-gb",
                   "partition": "--partition", "account": "--account", "qos": "--qos",
                   "cpus-per-task": "--cpus-per-task"}


def cluster_unavailable(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why no Slurm cluster can take jobs from here, or ``None`` when ``sinfo`` answers within ``timeout``.

    Returns:
        ``None`` if ``sinfo`` exits 0 in time; else one line: not installed, no answer in time, or its error.
    """
    if shutil.which("sinfo") is None:
        return "sinfo is not installed"
    try:
        done = subprocess.run(["sinfo", "--noheader", "--format=%P"], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {timeout:g} s"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"sinfo exited {done.returncode}: {lines[-1] if lines else 'no message'}"
    return None


def parse_sbatch_flags(flags: Sequence[str]) -> dict[str, str | bool]:
    """``--sbatch`` values (``constraint=a100``, ``--exclusive``, ``mail-type=END``) → submitit's
    ``additional_parameters`` (flag name without dashes → value; a flag without a value is ``True``).

    Raises:
        ValueError: an empty name, or a flag launch sets itself (named with the option to use instead).
    """
    parsed: dict[str, str | bool] = {}
    for flag in flags:
        name, has_value, value = flag.strip().lstrip("-").partition("=")
        name = name.strip().replace("_", "-")
        if not name:
            raise ValueError(f"--sbatch {flag!r}: expected NAME=VALUE or NAME (an sbatch flag without its dashes)")
        if name in RESERVED_SBATCH:
            instead = RESERVED_SBATCH[name]
            raise ValueError(f"--sbatch {flag!r}: gradeff launch sets --{name} itself"
                             + (f"; use {instead}" if instead else ""))
        parsed[name] = value if has_value else True
    return parsed


@dataclass(frozen=True, slots=True, kw_only=True)
class SbatchRequest:
    """What each task of a shard array asks Slurm for.

    Attributes:
        time_min: time limit in minutes.
        mem_gb: memory per task in GB (``None``: the partition's default).
        gpus: GPUs per task, asked as ``--gres=gpu:N`` (0: none).
        cpus: CPUs per task (``None``: Slurm's default, one).
        partition / account / qos: passed through when given.
        throttle: at most this many tasks of the array run at once (``--array=0-(N-1)%K``; ``None``: all).
        extra: further sbatch flags (name → value, ``True`` for a bare flag).
    """

    time_min: int
    mem_gb: float | None = None
    gpus: int = 0
    cpus: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    throttle: int | None = None
    extra: Mapping[str, str | bool] = field(default_factory=dict)


def submitit_parameters(request: SbatchRequest, *, name: str = "gradeff") -> dict:
    """The ``AutoExecutor.update_parameters`` keywords of ``request`` (``slurm_`` prefixed where only Slurm has
    them)."""
    parameters: dict = {"timeout_min": request.time_min, "name": name}
    if request.mem_gb is not None:
        parameters["mem_gb"] = request.mem_gb
    if request.cpus is not None:
        parameters["cpus_per_task"] = request.cpus
    optional = {"slurm_partition": request.partition, "slurm_account": request.account, "slurm_qos": request.qos,
                "slurm_gres": f"gpu:{request.gpus}" if request.gpus else None,
                "slurm_array_parallelism": request.throttle}
    parameters |= {key: value for key, value in optional.items() if value is not None}
    if request.extra:
        parameters["slurm_additional_parameters"] = dict(request.extra)
    return parameters


@dataclass(frozen=True, slots=True)
class TaskRun:
    """One run of an array task as sacct reports it (a requeued task has one per start).

    Attributes:
        state: the run's state, first word only (``CANCELLED by 0`` → ``CANCELLED``).
        start / end: sacct's times (``Unknown`` while not started / not ended).
        exit_code: ``code:signal`` of the batch script.
    """

    state: str
    start: str
    end: str
    exit_code: str


_TASK = re.compile(r"(?P<array>\d+)_(?P<task>\d+)")
_PENDING_TASKS = re.compile(r"(?P<array>\d+)_\[(?P<tasks>[^\]]+)\]")


def _task_numbers(spec: str) -> list[int]:
    """``0-3%2`` or ``1,3,5-6`` → the task numbers (the throttle after ``%`` dropped)."""
    numbers = []
    for part in spec.split("%", 1)[0].split(","):
        first, _, last = part.partition("-")
        numbers.extend(range(int(first), int(last or first) + 1))
    return numbers


def parse_sacct(text: str, array_id: str) -> dict[int, list[TaskRun]]:
    """Task number → its runs, oldest first, from ``sacct --duplicates --allocations --noheader --parsable2
    --format=JobID,State,Start,End,ExitCode`` output. Tasks still pending as one line (``57_[2-3%2]``) each get
    that line's run."""
    runs: dict[int, list[TaskRun]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5:
            continue
        job, state, start, end, exit_code = (part.strip() for part in parts[:5])
        run = TaskRun(state=state.split()[0] if state else "UNKNOWN", start=start, end=end, exit_code=exit_code)
        if (match := _TASK.fullmatch(job)) and match["array"] == array_id:
            runs.setdefault(int(match["task"]), []).append(run)
        elif (match := _PENDING_TASKS.fullmatch(job)) and match["array"] == array_id:
            for task in _task_numbers(match["tasks"]):
                runs.setdefault(task, []).append(run)
    return runs


def array_runs(array_id: str, timeout: float = 60.0) -> dict[int, list[TaskRun]]:
    """Every run of every task of job array ``array_id``, from sacct (empty until slurmdbd has heard of it).

    Raises:
        RuntimeError: sacct failed (its message).
    """
    done = subprocess.run(["sacct", "--duplicates", "--allocations", "--noheader", "--parsable2",
                           "--format=JobID,State,Start,End,ExitCode", f"--jobs={array_id}"],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sacct --jobs={array_id} exited {done.returncode}: {done.stderr.strip()}")
    return parse_sacct(done.stdout, array_id)


def current_state(runs: Sequence[TaskRun]) -> str:
    """A task's state by sacct alone: its latest run's (``PENDING`` while sacct knows no run yet)."""
    return runs[-1].state if runs else "PENDING"


def parse_squeue(text: str, array_id: str) -> dict[int, str]:
    """Task number → state, from ``squeue --array --noheader --states=all --format=%i|%T`` output."""
    states = {}
    for line in text.splitlines():
        job, _, state = line.strip().partition("|")
        if (match := _TASK.fullmatch(job)) and match["array"] == array_id and state:
            states[int(match["task"])] = state.strip()
    return states


def queued_states(array_id: str, timeout: float = 60.0) -> dict[int, str]:
    """The states slurmctld holds for the array's tasks now: pending, running, and those ended within MinJobAge.

    Raises:
        RuntimeError: squeue failed (its message).
    """
    done = subprocess.run(["squeue", "--array", "--noheader", "--states=all", "--format=%i|%T", f"--jobs={array_id}"],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return {}  # every task has left slurmctld's memory: sacct knows them
        raise RuntimeError(f"squeue --jobs={array_id} exited {done.returncode}: {done.stderr.strip()}")
    return parse_squeue(done.stdout, array_id)


@dataclass(frozen=True, slots=True)
class TaskState:
    """An array task now: its state (slurmctld's where it still holds the task, else sacct's last run's, else
    :data:`GONE`) and every run sacct recorded, oldest first."""

    state: str
    runs: tuple[TaskRun, ...]


def array_tasks(array_id: str, count: int) -> dict[int, TaskState]:
    """Tasks ``0 .. count - 1`` of job array ``array_id``: squeue asked first (it knows a task from its
    submission on, before slurmdbd does), sacct for the runs and for tasks slurmctld no longer holds.

    Raises:
        RuntimeError: squeue or sacct failed.
    """
    live = queued_states(array_id)
    runs = array_runs(array_id)
    return {task: TaskState(state=live.get(task) or (runs[task][-1].state if runs.get(task) else GONE),
                            runs=tuple(runs.get(task, ()))) for task in range(count)}


def is_final(state: str) -> bool:
    return state in FINAL_STATES
