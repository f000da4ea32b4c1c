"""What each shard's job runs: its pytest session, in a process of its own, stopped so that it can resume.

A shard's progress is its results file: every cell appends its record as it ends, and the shard's command carries
``--gradeff-resume``, so a shard that starts again skips the cells already settled and reruns the one that was
cut off (recorded ``interrupted``). What this module adds is stopping cleanly, whichever way the stop comes:

- **preempted or requeued by the scheduler** (``scontrol requeue``, PreemptMode=REQUEUE, ``scancel``): Slurm
  sends SIGTERM to every process of the job, then SIGKILL after KillWait. pytest records the running cell
  ``interrupted`` and exits; the job's own process then waits for the kill instead of returning pytest's exit
  code, which submitit would write as the shard's result while Slurm has already put the task back in the queue.
- **near its time limit, or preempted with a signal** (``--signal=USR2@90``, what submitit asks for): submitit
  calls :meth:`ShardJob.checkpoint`, which stops pytest with SIGTERM (so it records the running cell), waits for
  it, and hands submitit the same call to requeue. pytest itself ignores USR2, which Slurm sends to every process
  of the job: its default action would kill pytest before it could record anything.

Every start of the shard is logged (appended) with its job, restart count and host.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime

__all__ = ["KILL_GRACE_S", "STOP_GRACE_S", "ShardJob"]

# How long a job told to stop (SIGTERM) waits for the scheduler's SIGKILL after pytest has exited (Slurm's KillWait
# is 30 s by default); a SIGTERM that no kill follows then ends the shard with pytest's exit code.
KILL_GRACE_S = 120.0
# How long checkpoint() gives pytest to record its running cell and exit: under submitit's 90 s between USR2
# and the time limit.
STOP_GRACE_S = 60.0


def _ignore_usr2() -> None:
    """In pytest's process before it starts: the USR2 meant for submitit would otherwise kill it."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def _exited(pid: int) -> bool:
    """Whether the child ``pid`` has exited, without reaping it (``Popen.wait`` still collects its status) and
    without taking ``Popen``'s lock, which the main thread holds while a signal handler runs."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


class ShardJob:
    """The callable a shard's job runs (submitit calls it; it is checkpointable: see the module docstring)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._stopping: str | None = None

    def __call__(self, command: Sequence[str], cwd: str, log: str, env: dict[str, str]) -> int:
        """Run the shard's pytest ``command`` in ``cwd`` with ``env`` added, its output appended to ``log``.

        Returns:
            pytest's exit code.
        """
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._terminated)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"gradeff launch: {_start_line()}\n")
            handle.flush()
            self._process = subprocess.Popen(list(command), cwd=cwd, env=os.environ | env, stdout=handle,
                                             stderr=subprocess.STDOUT, preexec_fn=_ignore_usr2)
            try:
                code = self._process.wait()
            except BaseException:
                # A local job cancelled (SIGINT), or submitit leaving after a checkpoint (SystemExit): pytest must not
                # outlive this process.
                self._stop(signal.SIGINT)
                raise
            if self._stopping is not None:
                handle.write(f"gradeff launch: pytest exited {code} after {self._stopping}; waiting for the "
                             f"scheduler to end the job\n")
                handle.flush()
        if self._stopping is not None:
            # The scheduler is ending (and perhaps requeuing) this job: its SIGKILL comes within KillWait. Returning
            # now would write pytest's exit code as the shard's result while the task runs again.
            time.sleep(KILL_GRACE_S)
        return code

    def _terminated(self, signum: int, frame) -> None:
        # pytest got the same SIGTERM (Slurm signals every process of the job) and is recording its running cell.
        self._stopping = f"signal {signal.Signals(signum).name}"

    def checkpoint(self, command: Sequence[str], cwd: str, log: str, env: dict[str, str]):
        """submitit, on USR2 (the time limit is near, or a preemption that signals): stop pytest so that it records
        its running cell, then requeue the same shard, which resumes from its results file.

        Returns:
            The call to requeue (a fresh :class:`ShardJob`: a running process does not pickle).
        """
        import submitit

        self._stop(signal.SIGTERM)
        return submitit.helpers.DelayedSubmission(ShardJob(), command, cwd, log, env)

    def _stop(self, signum: int) -> None:
        """Send pytest ``signum`` (it records its running cell and exits), give it :data:`STOP_GRACE_S`, then kill
        it."""
        process = self._process
        if process is None or _exited(process.pid):
            return
        process.send_signal(signum)
        deadline = time.monotonic() + STOP_GRACE_S
        while not _exited(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _exited(process.pid):
            process.kill()

    def __getstate__(self) -> dict:
        # Pickled by submitit when submitted and when checkpointed: a process handle is not part of the call.
        return {"_process": None, "_stopping": None}


def _start_line() -> str:
    job = os.environ.get("SLURM_JOB_ID")
    where = (f"Slurm job {os.environ.get('SLURM_ARRAY_JOB_ID', job)}_{os.environ['SLURM_ARRAY_TASK_ID']}"
             if "SLURM_ARRAY_TASK_ID" in os.environ else f"Slurm job {job}" if job else f"process {os.getpid()}")
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return f"shard started as {where}, restart {restart}, on {socket.gethostname()} at {now}"
