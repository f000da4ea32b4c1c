"""submitit against the local Slurm cluster of scripts/slurm-local.sh: jobs, arrays, failures, cancels, requeues.

Every wait is bounded: a job's result is awaited in a helper thread with a deadline, so a job that never
finishes fails its test instead of hanging the session. Each test prints what it measured (pytest -rP shows it).
"""

from __future__ import annotations

import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import submitit
from submitit.core.utils import FailedJobError, UncompletedJobError

from tests.cluster import jobs
from tests.cluster.slurm_cluster import STOPPED, start_cluster

pytestmark = pytest.mark.cluster

# A job starts within a second or two on an idle node; the bounds leave room for a loaded machine.
RESULT_TIMEOUT_S = 120
STATE_TIMEOUT_S = 60


def result_within(job: submitit.Job, timeout: float = RESULT_TIMEOUT_S):
    """``job.result()``, or its exception, within ``timeout`` seconds (``result()`` itself has no timeout)."""
    outcome: queue.Queue = queue.Queue()

    def wait() -> None:
        try:
            outcome.put((True, job.result()))
        except BaseException as error:  # noqa: BLE001  (handed to the test's thread, which re-raises it)
            outcome.put((False, error))

    threading.Thread(target=wait, daemon=True).start()
    try:
        ok, value = outcome.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"job {job.job_id} gave no result within {timeout} s (state {fresh_state(job)})")
    if not ok:
        raise value
    return value


def fresh_state(job: submitit.Job) -> str:
    """The job's state from sacct now: ``job.state`` answers from submitit's cache between its polls."""
    return job.watcher.get_state(job.job_id, mode="force")


def states_until_finished(job: submitit.Job, timeout: float = RESULT_TIMEOUT_S) -> list[tuple[str, float]]:
    """Each state sacct reports for the job, with the seconds since the call, until a final one.

    Not until ``job.done()``: that turns true as soon as the result file is written, while Slurm still
    reads the job as RUNNING.
    """
    started = time.perf_counter()
    seen: list[tuple[str, float]] = []
    while True:
        state = fresh_state(job)
        if not seen or seen[-1][0] != state:
            seen.append((state, round(time.perf_counter() - started, 1)))
        if job.watcher.is_done(job.job_id, mode="cache"):
            return seen
        if time.perf_counter() - started > timeout:
            pytest.fail(f"job {job.job_id} not finished within {timeout} s; states {seen}")
        time.sleep(0.3)


def final_state(job: submitit.Job) -> str:
    """The state sacct reports once Slurm has finished the job.

    Not the state right after ``job.result()`` returns or raises: the result file is written from inside the
    job, so for a moment after it sacct still reads the job as RUNNING.
    """
    return states_until_finished(job, timeout=STATE_TIMEOUT_S)[-1][0]


def wait_for_file(path: Path, job: submitit.Job, timeout: float = STATE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"job {job.job_id} did not create {path.name} within {timeout} s "
                        f"(state {fresh_state(job)}; stderr: {job.stderr()})")
        time.sleep(0.2)


def test_a_function_comes_back_from_a_slurm_job(executor):
    started = time.perf_counter()
    job = executor.submit(jobs.power, 3, 4)
    result = result_within(job)
    elapsed = time.perf_counter() - started
    assert result["value"] == 81
    # It ran as the Slurm job submitit reported, not as a local process.
    assert result["SLURM_JOB_ID"] == job.job_id
    assert final_state(job) == "COMPLETED"
    submission = next(executor.folder.glob("*_submission.sh"))
    assert "export SUBMITIT_EXECUTOR=slurm" in submission.read_text()
    print(f"round trip {elapsed:.2f} s\n--- {submission.name}\n{submission.read_text()}")


def test_a_job_array_returns_every_task_result(executor):
    started = time.perf_counter()
    array = executor.map_array(jobs.power, [1, 2, 3, 4], [2, 2, 2, 2])
    results = [result_within(job) for job in array]
    elapsed = time.perf_counter() - started
    assert [result["value"] for result in results] == [1, 4, 9, 16]
    # One Slurm array, one task per input, in order.
    assert len({result["SLURM_ARRAY_JOB_ID"] for result in results}) == 1
    assert [result["SLURM_ARRAY_TASK_ID"] for result in results] == ["0", "1", "2", "3"]
    assert [job.job_id for job in array] == [f"{results[0]['SLURM_ARRAY_JOB_ID']}_{i}" for i in range(4)]
    print(f"array of 4 in {elapsed:.2f} s")


def test_a_failing_job_raises_its_traceback(executor):
    job = executor.submit(jobs.fail, "no convergence at step 17")
    with pytest.raises(FailedJobError) as raised:
        result_within(job)
    text = str(raised.value)
    assert "Traceback" in text
    assert "ValueError: no convergence at step 17" in text
    assert final_state(job) == "FAILED"


def test_a_cancelled_job_raises_uncompleted(executor, tmp_path):
    started_file = tmp_path / "started"
    job = executor.submit(jobs.wait_forever, str(started_file))
    wait_for_file(started_file, job)
    started = time.perf_counter()
    job.cancel()
    # submitit gives a finished job _results_timeout_s (2 s here, see the executor fixture) to write its result
    # before it calls it uncompleted.
    with pytest.raises(UncompletedJobError, match="has not produced any output"):
        result_within(job, timeout=90)
    elapsed = time.perf_counter() - started
    assert final_state(job).startswith("CANCELLED")
    print(f"cancel -> UncompletedJobError in {elapsed:.2f} s")


def test_a_job_requeued_by_scontrol_runs_again_and_completes(executor, tmp_path, slurm_env):
    starts = tmp_path / "starts"
    job = executor.submit(jobs.wait_for_requeue, str(starts))
    wait_for_file(starts, job)
    subprocess.run(["scontrol", "requeue", job.job_id], check=True, timeout=60)
    seen = states_until_finished(job)
    result = result_within(job)
    # The same job ID ran twice, from scratch (a plain function has no state to resume): Slurm counts the restart.
    assert result["SLURM_JOB_ID"] == job.job_id
    assert result["SLURM_RESTART_COUNT"] == "1"
    assert starts.read_text().split() == ["0", "1"]
    states = [state for state, _ in seen]
    # sacct may still read the first run RUNNING for a moment (slurmdbd hears of the requeue a little later).
    if states[0] == "RUNNING":
        states = states[1:]
    assert states[0] in ("REQUEUED", "PENDING"), f"the requeue was not seen before the rerun: {seen}"
    assert states[-1] == "COMPLETED", seen
    print(f"scontrol requeue -> states {seen}")


def test_a_preempted_checkpointable_job_resumes_from_its_checkpoint(executor, tmp_path):
    paused = tmp_path / "paused"
    job = executor.submit(jobs.Counter(), str(paused))
    wait_for_file(paused, job)
    started = time.perf_counter()
    # What a preemption sends (SIGTERM, then submitit's USR2): submitit's handler calls checkpoint() and
    # requeues the job itself with scontrol.
    job._interrupt()
    seen = states_until_finished(job)
    result = result_within(job)
    elapsed = time.perf_counter() - started
    # The second run began at the first one's progress: the checkpoint carried the object's state.
    assert result["starts"] == [0, 5]
    assert result["progress"] == 10
    assert result["SLURM_RESTART_COUNT"] == "1"
    print(f"preempted Checkpointable -> states {seen}, result after {elapsed:.2f} s")


def free_port_base() -> int:
    """A port whose next two are free too (slurmctld, slurmd, slurmdbd), so a second cluster fits beside the first."""
    for base in range(16817, 17817, 3):
        try:
            for port in range(base, base + 3):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no three free consecutive ports in 16817-17816")


@pytest.fixture
def second_state_dir() -> Iterator[Path]:
    """A state folder straight under the temporary folder: munged refuses a socket below a folder that not
    everyone may enter, such as pytest's own (pytest-of-<user> is mode 700)."""
    path = Path(tempfile.mkdtemp(prefix="gradeff-slurm-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_script_is_idempotent(slurm_cluster, second_state_dir):
    # A second cluster of its own (state folder, ports), so stopping it does not disturb the session's.
    cluster = start_cluster(second_state_dir, port=free_port_base())
    try:
        assert cluster.started_here
        again = cluster.script("start")
        assert again.returncode == 0
        assert "already running" in again.stdout
        status = cluster.script("status", timeout=60)
        assert status.returncode == 0
        assert "slurmd: running" in status.stdout
        assert " idle " in status.stdout  # sinfo's line for the node
        # One daemon gone: status says so (1), and start brings back that one alone.
        pid = int((cluster.state_dir / "run" / "slurmd.pid").read_text())
        subprocess.run(["kill", str(pid)], check=True)
        wait_until_gone(pid)
        assert cluster.script("status", timeout=60).returncode == 1
        repaired = cluster.script("start")
        assert repaired.returncode == 0, repaired.stderr
        assert "started slurmd" in repaired.stdout
        assert "started munged" not in repaired.stdout
    finally:
        cluster.close()
    assert cluster.script("status", timeout=60).returncode == STOPPED
    stopped_again = cluster.script("stop")
    assert stopped_again.returncode == 0
    assert "not running" in stopped_again.stdout


def wait_until_gone(pid: int, timeout: float = 30) -> None:
    """Until the process has exited (a zombie, which keeps its /proc entry until reaped, counts as exited)."""
    deadline = time.monotonic() + timeout
    status = Path(f"/proc/{pid}/status")
    while time.monotonic() < deadline:
        try:
            if "\nState:\tZ" in status.read_text():
                return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    pytest.fail(f"process {pid} still runs {timeout} s after SIGTERM")
