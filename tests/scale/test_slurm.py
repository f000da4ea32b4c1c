"""Slurm as launch meets it, without a cluster: whether one answers, the array's sbatch parameters, sacct's runs."""

import os

import pytest

from gradeff.scale.slurm import (
    SbatchRequest,
    cluster_unavailable,
    current_state,
    is_final,
    parse_sacct,
    parse_sbatch_flags,
    parse_squeue,
    submitit_parameters,
)


def _fake_sinfo(tmp_path, monkeypatch, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_cluster_is_one_whose_sinfo_answers(tmp_path, monkeypatch):
    _fake_sinfo(tmp_path, monkeypatch, "echo debug; exit 0")
    assert cluster_unavailable() is None


@pytest.mark.parametrize(("body", "reason"), [
    ("echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1",
     "sinfo exited 1: slurm_load_partitions: Unable to contact slurm controller (connect failure)"),
    ("exec sleep 30", "sinfo did not answer within 0.5 s"),
])
def test_an_installed_client_without_a_controller_is_no_cluster(tmp_path, monkeypatch, body, reason):
    _fake_sinfo(tmp_path, monkeypatch, body)
    assert cluster_unavailable(timeout=0.5) == reason


def test_no_sinfo_is_no_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cluster_unavailable() == "sinfo is not installed"


def test_sbatch_flags_pass_through_except_those_launch_sets():
    assert parse_sbatch_flags(["constraint=a100", "--exclusive", "mail_type=END"]) == {
        "constraint": "a100", "exclusive": True, "mail-type": "END"}
    with pytest.raises(ValueError, match="--sbatch 'mem=4G': gradeff launch sets --mem itself; use --mem-gb"):
        parse_sbatch_flags(["mem=4G"])
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        parse_sbatch_flags(["=3"])


def test_a_request_becomes_submitit_parameters():
    request = SbatchRequest(time_min=42, mem_gb=8.0, gpus=1, cpus=4, partition="gpu", account="lab", qos="high",
                            throttle=2, extra={"constraint": "h100"})
    assert submitit_parameters(request) == {
        "timeout_min": 42, "name": "gradeff", "mem_gb": 8.0, "cpus_per_task": 4, "slurm_partition": "gpu",
        "slurm_account": "lab", "slurm_qos": "high", "slurm_gres": "gpu:1", "slurm_array_parallelism": 2,
        "slurm_additional_parameters": {"constraint": "h100"}}
    # Nothing asked for, nothing passed: the partition's defaults apply.
    assert submitit_parameters(SbatchRequest(time_min=5)) == {"timeout_min": 5, "name": "gradeff"}


def test_sacct_gives_every_run_of_every_task_pending_ranges_included():
    text = ("57_0|COMPLETED|2026-01-01T00:00:01|2026-01-01T00:00:30|0:0\n"
            "57_1|REQUEUED|2026-01-01T00:00:01|2026-01-01T00:00:09|0:0\n"
            "57_1|RUNNING|2026-01-01T00:00:20|Unknown|0:0\n"
            "57_[2-3%2]|PENDING|Unknown|Unknown|0:0\n"
            "58_0|CANCELLED by 0|2026-01-01T00:00:01|2026-01-01T00:00:02|0:15\n"
            "garbage\n")
    runs = parse_sacct(text, "57")
    assert sorted(runs) == [0, 1, 2, 3]
    assert [run.state for run in runs[1]] == ["REQUEUED", "RUNNING"]
    assert current_state(runs[1]) == "RUNNING" and not is_final("RUNNING")
    assert current_state(runs[3]) == "PENDING"
    assert parse_sacct(text, "58")[0][0].state == "CANCELLED" and is_final("CANCELLED")
    assert current_state([]) == "PENDING"  # sacct has not heard of the task yet


def test_squeue_gives_each_tasks_state_while_slurmctld_holds_it():
    text = "57_0|RUNNING\n57_1|PENDING\n57_2|COMPLETED\n58_0|RUNNING\n"
    assert parse_squeue(text, "57") == {0: "RUNNING", 1: "PENDING", 2: "COMPLETED"}
