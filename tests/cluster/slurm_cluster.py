"""The single-node Slurm cluster of ``scripts/slurm-local.sh``, started and stopped from Python.

:func:`start_cluster` starts it (or finds it running) and says how submitting processes reach it;
:meth:`SlurmCluster.close` stops it when the last session using it leaves, and only if a session started it, so a
cluster someone brought up by hand outlives every session. Sessions that share the cluster (pytest-xdist workers,
two test runs at once) each hold a lease, a file named by their process ID, taken and given back under a lock, so
that one session cannot stop the cluster under another: checking whether it runs, starting it and taking the lease
are one step, and so are giving the lease back and stopping it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
# The script's exit codes (see its header).
UNAVAILABLE = 2
STOPPED = 3
# Installing the packages (once per machine) takes 12-25 s, starting 2-7 s; these leave room for a loaded machine.
START_TIMEOUT_S = 900
STOP_TIMEOUT_S = 300
# In the state folder: the sessions' leases, the mark of a cluster a session started, and the lock over both (not the
# script's own .lock, which the script takes inside it).
LEASES = "leases"
STARTED_BY_A_SESSION = "started-by-a-test-session"
SESSION_LOCK = ".session-lock"


class ClusterUnavailable(Exception):
    """Slurm cannot run on this machine (no root, no apt-get, the packages do not install)."""


def default_state_dir() -> Path:
    return Path(os.environ.get("GRADEFF_SLURM_DIR") or Path(tempfile.gettempdir()) / "gradeff-slurm")


def run_script(command: str, state_dir: Path, *, port: int | None = None,
               timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
    """``scripts/slurm-local.sh command`` for the cluster of ``state_dir`` (``port``: its slurmctld port)."""
    env = os.environ | {"GRADEFF_SLURM_DIR": str(state_dir)}
    if port is not None:
        env["GRADEFF_SLURM_PORT"] = str(port)
    return subprocess.run(["bash", str(SCRIPT), command], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of the ``export NAME=value`` lines the script writes to ``env.sh``."""
    variables = {}
    for line in path.read_text().splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            variables[name] = value
    return variables


@contextlib.contextmanager
def _session_lock(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / SESSION_LOCK, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _live_leases(state_dir: Path) -> list[Path]:
    """The leases of sessions still alive; a dead session's (killed before it could give it back) is removed."""
    live = []
    for lease in sorted((state_dir / LEASES).glob("*")):
        try:
            os.kill(int(lease.name), 0)
        except (ValueError, ProcessLookupError):
            lease.unlink(missing_ok=True)
            continue
        except PermissionError:
            pass  # alive, another user's
        live.append(lease)
    return live


@dataclasses.dataclass
class SlurmCluster:
    state_dir: Path
    port: int | None
    started_here: bool
    # What a process that submits jobs needs in its environment (SLURM_CONF).
    env: dict[str, str]
    start_output: str = ""
    lease: Path | None = None

    def script(self, command: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
        return run_script(command, self.state_dir, port=self.port, timeout=timeout)

    def close(self) -> None:
        """Give the lease back; the last session to leave a cluster that a session started stops it."""
        if self.lease is None:
            return
        with _session_lock(self.state_dir):
            self.lease.unlink(missing_ok=True)
            self.lease = None
            marked = self.state_dir / STARTED_BY_A_SESSION
            if _live_leases(self.state_dir) or not marked.exists():
                return
            done = self.script("stop", timeout=STOP_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"slurm-local.sh stop failed ({done.returncode}):\n{done.stdout}{done.stderr}")
            marked.unlink()


def start_cluster(state_dir: Path | None = None, port: int | None = None) -> SlurmCluster:
    """Start the cluster of ``state_dir`` unless it already runs, and take a lease on it for this process.

    Raises :class:`ClusterUnavailable` when the script says Slurm cannot run here, ``RuntimeError`` when it
    could but a daemon did not start (that is a fault to fix, not a machine to skip).
    """
    state_dir = state_dir or default_state_dir()
    with _session_lock(state_dir):
        # Asked before starting: a cluster found running was started by hand or by another session.
        running = run_script("status", state_dir, port=port, timeout=60).returncode == 0
        done = run_script("start", state_dir, port=port)
        output = done.stdout + done.stderr
        if done.returncode == UNAVAILABLE:
            raise ClusterUnavailable(output.strip())
        if done.returncode != 0:
            raise RuntimeError(f"slurm-local.sh start failed ({done.returncode}):\n{output}")
        if not running:
            (state_dir / STARTED_BY_A_SESSION).touch()
        lease = state_dir / LEASES / str(os.getpid())
        lease.parent.mkdir(exist_ok=True)
        lease.touch()
    return SlurmCluster(state_dir=state_dir, port=port, started_here=not running,
                        env=read_env_file(state_dir / "env.sh"), start_output=output, lease=lease)
