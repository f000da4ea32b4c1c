"""Functions the Slurm tests submit. A job unpickles them by reference, so they live in an importable module
(the ``slurm_env`` fixture puts the checkout on the jobs' PYTHONPATH)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import submitit

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT")


def slurm_variables() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in SLURM_VARIABLES}


def power(base: int, exponent: int) -> dict:
    """The result, and the Slurm job it was computed in (proof that Slurm, not a local process, ran it)."""
    return {"value": base**exponent, **slurm_variables()}


def fail(message: str) -> None:
    raise ValueError(message)


def wait_forever(started: str) -> None:
    """Mark that the function runs (its signal handlers are installed by then), then wait to be cancelled."""
    Path(started).touch()
    time.sleep(3600)


def wait_for_requeue(starts: str) -> dict:
    """Log each start; the first waits to be requeued, the second returns at once."""
    with open(starts, "a") as log:
        log.write(f"{os.environ.get('SLURM_RESTART_COUNT', '0')}\n")
    if len(Path(starts).read_text().split()) == 1:
        time.sleep(3600)
    return slurm_variables()


class Counter(submitit.helpers.Checkpointable):
    """Counts to ``total``; at ``pause`` it waits to be preempted. Its progress is its state, so the job that
    submitit requeues from ``checkpoint()`` resumes counting where the first run stopped."""

    def __init__(self) -> None:
        self.progress = 0
        self.starts: list[int] = []

    def __call__(self, paused: str, pause: int = 5, total: int = 10) -> dict:
        self.starts.append(self.progress)
        while self.progress < total:
            if self.progress == pause and len(self.starts) == 1:
                Path(paused).touch()
                time.sleep(3600)  # preempted here: checkpoint() pickles this object with progress == pause
            self.progress += 1
        return {"progress": self.progress, "starts": self.starts, **slurm_variables()}
