"""The single-node Slurm cluster of ``scripts/slurm-local.sh``, started and stopped from Python.

:func:`start_cluster` starts it (or finds it running) and says how submitting processes reach it;
:meth:`SlurmCluster.close` stops it again only when this process started it, so a cluster someone brought
up by hand before the test session outlives the session.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
# The script's exit codes (see its header).
UNAVAILABLE = 2
STOPPED = 3
# Installing the packages (once per machine) takes 12-25 s, starting 2-7 s; these leave room for a loaded machine.
START_TIMEOUT_S = 900
STOP_TIMEOUT_S = 300


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


@dataclasses.dataclass
class SlurmCluster:
    state_dir: Path
    port: int | None
    started_here: bool
    # What a process that submits jobs needs in its environment (SLURM_CONF).
    env: dict[str, str]
    start_output: str = ""

    def script(self, command: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
        return run_script(command, self.state_dir, port=self.port, timeout=timeout)

    def close(self) -> None:
        """Stop the cluster if :func:`start_cluster` started it; a cluster found running is left running."""
        if self.started_here:
            done = self.script("stop", timeout=STOP_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"slurm-local.sh stop failed ({done.returncode}):\n{done.stdout}{done.stderr}")
            self.started_here = False


def start_cluster(state_dir: Path | None = None, port: int | None = None) -> SlurmCluster:
    """Start the cluster of ``state_dir`` unless it already runs.

    Raises :class:`ClusterUnavailable` when the script says Slurm cannot run here, ``RuntimeError`` when it
    could but a daemon did not start (that is a fault to fix, not a machine to skip).
    """
    state_dir = state_dir or default_state_dir()
    # Asked before starting so that close() knows whether the cluster is ours to stop.
    running = run_script("status", state_dir, port=port, timeout=60).returncode == 0
    done = run_script("start", state_dir, port=port)
    output = done.stdout + done.stderr
    if done.returncode == UNAVAILABLE:
        raise ClusterUnavailable(output.strip())
    if done.returncode != 0:
        raise RuntimeError(f"slurm-local.sh start failed ({done.returncode}):\n{output}")
    return SlurmCluster(state_dir=state_dir, port=port, started_here=not running,
                        env=read_env_file(state_dir / "env.sh"), start_output=output)
