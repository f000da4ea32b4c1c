"""A shard's job stops so that it can resume: its pytest records the running cell before it goes, and the job does
not report a result while the scheduler is about to run it again."""

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gradeff.scale.shard_job import ShardJob

# Stands in for the shard's pytest: says it is ready, then records the signal that stops it and exits 2 (pytest's
# code for an interrupted session).
CHILD = """
import pathlib, signal, sys, time
def stop(signum, frame):
    pathlib.Path(sys.argv[1]).write_text("recorded " + signal.Signals(signum).name)
    sys.exit(2)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[2]).touch()
time.sleep(60)
"""


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.05)


def test_checkpoint_stops_pytest_so_it_records_and_requeues_the_same_call(tmp_path):
    """submitit's USR2 (time limit near, or a signalling preemption): USR2 itself leaves pytest alone; checkpoint()
    stops it with SIGTERM, waits for it, and hands back the same call on a fresh ShardJob."""
    command = [sys.executable, "-c", CHILD, str(tmp_path / "stopped"), str(tmp_path / "ready")]
    arguments = (command, str(tmp_path), str(tmp_path / "shard.log"), {"OMP_NUM_THREADS": "1"})
    job = ShardJob()
    returned = []
    # Off the main thread the job installs no handler of its own: the test process keeps its signals.
    runner = threading.Thread(target=lambda: returned.append(job(*arguments)))
    runner.start()
    _wait_for(tmp_path / "ready")
    os.kill(job._process.pid, signal.SIGUSR2)  # what Slurm sends every process of the job
    time.sleep(0.5)
    assert job._process.poll() is None, "pytest died of the USR2 meant for submitit"
    delayed = job.checkpoint(*arguments)
    runner.join(timeout=30)
    assert returned == [2]
    assert (tmp_path / "stopped").read_text() == "recorded SIGTERM"
    assert isinstance(delayed.function, ShardJob) and delayed.function is not job
    assert delayed.args == arguments
    pickle.dumps(delayed.function)  # submitit pickles it for the requeued job
    assert (tmp_path / "shard.log").read_text().startswith("gradeff launch: shard started as process ")


def test_a_job_told_to_stop_waits_for_the_kill_instead_of_reporting_a_result(tmp_path):
    """Preempted or requeued, Slurm sends SIGTERM to every process of the job, then SIGKILL: pytest records and
    exits, and the job waits (here a 3 s grace), since a result written now would be taken for the shard's end."""
    command = [sys.executable, "-c", CHILD, str(tmp_path / "stopped"), str(tmp_path / "ready")]
    script = (f"import gradeff.scale.shard_job as m; m.KILL_GRACE_S = 3; "
              f"print('returned', m.ShardJob()({command!r}, {str(tmp_path)!r}, {str(tmp_path / 'shard.log')!r}, {{}}))")
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(tmp_path / "ready")
        os.killpg(job.pid, signal.SIGTERM)
        _wait_for(tmp_path / "stopped")
        time.sleep(1)
        assert job.poll() is None, "the job reported a result while the scheduler was ending it"
        out, _ = job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
    assert out.strip() == "returned 2"  # no kill came within the grace: pytest's exit code after all
    assert (tmp_path / "stopped").read_text() == "recorded SIGTERM"
    assert "pytest exited 2 after signal SIGTERM; waiting for the scheduler" in (tmp_path / "shard.log").read_text()
