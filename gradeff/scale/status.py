"""Where each shard of a launch stands: its job's state (every run of a requeued Slurm task), the cells it has
recorded of those it was given, and, once it has ended, pytest's exit code or why there is none.

On Slurm the states are sacct's; a task that sacct does not know yet reads PENDING. Locally a shard is a process:
RUNNING while it lives, COMPLETED or FAILED by the result submitit wrote when it ended, FAILED without one.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gradeff.records.store import read_records
from gradeff.scale.manifest import LaunchManifest
from gradeff.scale.slurm import GONE, TaskRun, TaskState, array_tasks, is_final

__all__ = ["ShardStatus", "shard_statuses", "status_lines"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardStatus:
    """One shard now.

    Attributes:
        index: the shard (1-based).
        job: its job's id.
        state: its job's state now (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED``, ...).
        runs: on Slurm, every run of its task, oldest first (a requeued task has several).
        recorded: cells (and seeds) its results file holds a record of.
        assigned: tests it was given.
        exit_code: pytest's exit code once the job completed (``None`` before, or when the job died without one).
        error: why the job has no exit code (submitit's error, or the state it ended in).
    """

    index: int
    job: str
    state: str
    runs: tuple[TaskRun, ...] = ()
    recorded: int
    assigned: int
    exit_code: int | None = None
    error: str = ""

    @property
    def ended(self) -> bool:
        return is_final(self.state)

    @property
    def succeeded(self) -> bool:
        """The job completed and pytest ran its session (0: passed, 1: a test failed, 5: no cell in the shard)."""
        return self.state == "COMPLETED" and self.exit_code in (0, 1, 5)


def _recorded(path: Path) -> int:
    if not path.exists():
        return 0
    return len({(r.cell, r.seed) for r in read_records(path, errors=[])})


def _outcome(result_pickle: Path) -> tuple[int | None, str]:
    """pytest's exit code from submitit's result file, or the error it recorded instead."""
    try:
        with open(result_pickle, "rb") as handle:
            kind, value = pickle.load(handle)
    except FileNotFoundError:
        return None, "the job left no result"
    except (OSError, pickle.UnpicklingError, ValueError, EOFError) as exc:
        return None, f"unreadable result {result_pickle.name}: {exc}"
    if kind == "success" and isinstance(value, int):
        return value, ""
    lines = str(value).strip().splitlines()
    return None, lines[-1] if lines else f"submitit reported {kind}"


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return "\nState:\tZ" not in status


def shard_statuses(manifest: LaunchManifest, *,
                   tasks_of: Callable[[str, int], dict[int, TaskState]] = array_tasks) -> list[ShardStatus]:
    """Every shard's status now (``tasks_of``: the array's tasks from squeue and sacct, replaceable in tests).

    Raises:
        RuntimeError: squeue or sacct failed.
    """
    import submitit

    statuses = []
    tasks = tasks_of(manifest.array_id, manifest.shards) if manifest.engine == "slurm" and manifest.array_id else {}
    for index in range(1, manifest.shards + 1):
        job_id = manifest.jobs[index - 1] if len(manifest.jobs) >= index else ""
        recorded = _recorded(manifest.shard_results(index))
        assigned = len(manifest.shard_tests(index))
        if not job_id:
            statuses.append(ShardStatus(index=index, job="", state="NOT SUBMITTED", recorded=recorded,
                                        assigned=assigned, error="never submitted"))
            continue
        job_class = submitit.SlurmJob if manifest.engine == "slurm" else submitit.LocalJob
        result_pickle = job_class(folder=manifest.jobs_folder / "%j", job_id=job_id).paths.result_pickle
        if manifest.engine == "slurm":
            task = tasks.get(index - 1, TaskState(state=GONE, runs=()))
            runs, state = task.runs, task.state
        else:
            runs = ()
            state = "RUNNING" if _alive(int(job_id)) and not result_pickle.exists() else "ENDED"
        code, error = (None, "")
        if is_final(state) or state == "ENDED":
            code, error = _outcome(result_pickle)
            if state == "ENDED":
                state = "COMPLETED" if code is not None else "FAILED"
            elif state == GONE:
                code, error = None, "Slurm knows no such task any more: cancelled before it started"
            elif state != "COMPLETED":
                # Slurm ended the task (cancelled, out of memory, timed out, node failure): its state says why.
                exit_code = runs[-1].exit_code if runs else ""
                code, error = None, f"batch script exit {exit_code}" if exit_code not in ("", "0:0") else ""
        statuses.append(ShardStatus(index=index, job=job_id, state=state, runs=runs, recorded=recorded,
                                    assigned=assigned, exit_code=code, error=error))
    return statuses


def _runs_text(runs: tuple[TaskRun, ...]) -> str:
    if len(runs) < 2:
        return ""
    return "; runs: " + ", ".join(f"{run.state} {run.start}→{run.end}" for run in runs)


def status_lines(manifest: LaunchManifest, statuses: list[ShardStatus]) -> list[str]:
    """What ``gradeff launch status`` prints: one line per shard, then the totals."""
    where = f"Slurm array {manifest.array_id}" if manifest.engine == "slurm" else "local processes"
    lines = [f"gradeff launch: {manifest.folder}: {manifest.shards} shards on {where}, "
             f"{len(manifest.tests)} tests"]
    for status in statuses:
        outcome = (f", pytest exit {status.exit_code}" if status.exit_code is not None
                   else f", {status.error}" if status.error and status.ended else "")
        lines.append(f"shard {status.index}/{manifest.shards}  job {status.job or '-':<10} {status.state:<11} "
                     f"{status.recorded}/{status.assigned} recorded{outcome}{_runs_text(status.runs)}")
    ended = sum(status.ended for status in statuses)
    failed = sum(status.ended and not status.succeeded for status in statuses)
    lines.append(f"{ended} of {len(statuses)} shards ended ({failed} failed); "
                 f"{sum(s.recorded for s in statuses)} of {len(manifest.tests)} tests recorded")
    return lines
