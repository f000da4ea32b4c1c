"""Fixtures of the Slurm tests: one local cluster for the session, and a submitit executor pointed at it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import submitit

from tests.cluster.slurm_cluster import ROOT, ClusterUnavailable, SlurmCluster, start_cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The cluster of scripts/slurm-local.sh (GRADEFF_SLURM_DIR, default gradeff-slurm in the temporary folder),
    started if needed.

    Skips when Slurm cannot run on this machine; at the end, the last session using the cluster stops it, unless it
    was started by hand (tests/cluster/slurm_cluster.py).
    """
    try:
        cluster = start_cluster()
    except ClusterUnavailable as error:
        pytest.skip(f"no local Slurm cluster: {error}")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def slurm_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This test's environment reaches the cluster: sbatch, sacct and scancel read SLURM_CONF, and the jobs
    (which inherit the submitter's environment) import tests.cluster.jobs from the checkout whatever the cwd."""
    for name, value in slurm_cluster.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return slurm_cluster.env


@pytest.fixture
def executor(slurm_env, tmp_path, monkeypatch: pytest.MonkeyPatch) -> submitit.AutoExecutor:
    """A submitit executor on the local cluster: Slurm named explicitly, so a missing sbatch fails instead of
    quietly running the jobs as local processes."""
    executor = submitit.AutoExecutor(folder=tmp_path / "jobs", cluster="slurm")
    executor.update_parameters(timeout_min=10, cpus_per_task=1)
    # A job that Slurm reports ended gets this long to show its result file before submitit calls it uncompleted:
    # 15 s by default, for shared file systems that show a file late; this cluster's files are local.
    monkeypatch.setattr(submitit.core.core.Job, "_results_timeout_s", 2)
    return executor
