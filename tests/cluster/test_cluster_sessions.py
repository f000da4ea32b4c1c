"""Sessions share the local cluster through leases: the last to leave stops a cluster that a session started, and no
session stops it under another, or one that was started by hand. The script is stood in for: no Slurm needed."""

import subprocess
import sys

import pytest

from tests.cluster import slurm_cluster
from tests.cluster.slurm_cluster import start_cluster


class FakeScript:
    """slurm-local.sh's start, stop and status on a flag; writes env.sh as start does."""

    def __init__(self, running: bool = False):
        self.running = running
        self.calls: list[str] = []

    def __call__(self, command, state_dir, *, port=None, timeout=None):
        self.calls.append(command)
        if command == "start":
            self.running = True
            (state_dir / "env.sh").write_text(f"export SLURM_CONF={state_dir}/etc/slurm.conf\n")
        elif command == "stop":
            self.running = False
        code = 0 if command != "status" or self.running else slurm_cluster.STOPPED
        return subprocess.CompletedProcess([command], code, "", "")


@pytest.fixture
def script(monkeypatch):
    fake = FakeScript()
    monkeypatch.setattr(slurm_cluster, "run_script", fake)
    return fake


def test_the_last_session_to_leave_stops_the_cluster_a_session_started(script, tmp_path):
    first = start_cluster(tmp_path)
    assert first.started_here and script.running
    # Another session (a pytest-xdist worker) holds a lease while this one leaves: the cluster stays up.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / slurm_cluster.LEASES / str(other.pid)).touch()
        first.close()
        assert script.running and "stop" not in script.calls
    finally:
        other.kill()
        other.wait()
    # That session died without giving its lease back: the next session to leave stops the cluster all the same.
    second = start_cluster(tmp_path)
    assert not second.started_here
    second.close()
    assert not script.running and script.calls.count("stop") == 1
    assert not (tmp_path / slurm_cluster.STARTED_BY_A_SESSION).exists()


def test_a_cluster_started_by_hand_outlives_the_sessions(script, tmp_path):
    script.running = True
    session = start_cluster(tmp_path)
    assert not session.started_here
    session.close()
    session.close()  # a second close gives back nothing
    assert script.running and "stop" not in script.calls
