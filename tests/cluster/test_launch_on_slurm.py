"""`gradeff launch --engine slurm` on the local cluster, for real: a job array of shards, one shard requeued mid-run
(what a preemption does to it), resumed where it stopped, collected into records equal to a run in one process; and a
shard cancelled for good, recorded as failed rather than missing.

Why ``scontrol requeue`` stands for a preemption: a cluster that preempts with PreemptMode=REQUEUE does exactly this
to the job (slurmctld's requeue: SIGCONT and SIGTERM to every process of the job, SIGKILL after KillWait, the task
back in the queue under its id with SLURM_RESTART_COUNT + 1), and the job gets no say in it. A plain ``scancel``
ends the task for good (the second test); ``scancel --signal=USR2`` is the other path, submitit's checkpoint on a
time limit or a signalling preemption, tested in tests/scale/test_shard_job.py and by the preempted Checkpointable in
test_slurm_local.py.

Every wait is bounded. Each test prints what it measured (pytest -rP shows it).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradeff.records.store import read_records
from gradeff.scale.slurm import array_runs, array_tasks, current_state, is_final
from tests.cluster.slurm_cluster import ROOT
from tests.scale.same_records import answer_verdicts, deterministic_view, differences

pytestmark = pytest.mark.cluster

# 8 main-study cells of one epoch, one torch thread each (a record repeats bit for bit in another process).
SELECTION = ["benchmarks/test_grid.py", "-m", "main", "-k", "(vit or llm) and (adam- or cgd-) and not checkpoint",
             "--gradeff-epochs", "1", "--gradeff-threads", "1", "-p", "no:cacheprovider"]
CELLS = 8
COSTS = ROOT / "baselines" / "tiny-cpu.jsonl"
XDIST = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
# The plan, 4 pytest sessions on a 2-CPU node and a requeue take 1-3 minutes on 2 loaded cores.
LAUNCH_TIMEOUT_S = 600


def _env() -> dict[str, str]:
    """This process's environment (SLURM_CONF from the slurm_env fixture) without pytest-xdist's worker variables."""
    return {key: value for key, value in os.environ.items() if key not in XDIST}


def _gradeff(*args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gradeff", *args], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=log.open("w"))


def _until(what: str, check, log: Path, timeout: float, *, process: subprocess.Popen | None = None,
           poll: float = 0.1):
    """``check()``'s first true value, polled; fails if ``process`` (the launch) exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if process is not None and process.poll() is not None:
            pytest.fail(f"gradeff launch exited {process.returncode} before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s:\n{log.read_text()[-3000:]}")
        time.sleep(poll)
    return value


def _manifest(folder: Path) -> dict | None:
    path = folder / "launch.json"
    if not path.exists():
        return None
    manifest = json.loads(path.read_text())
    return manifest if manifest.get("array_id") else None


def _records(path: Path) -> list:
    return list(read_records(path, errors=[])) if path.exists() else []


def _finish(process: subprocess.Popen, log: Path, timeout: float = LAUNCH_TIMEOUT_S) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"gradeff launch did not end within {timeout} s:\n{log.read_text()[-3000:]}")


def test_a_sharded_launch_survives_a_requeue_and_equals_a_local_run(slurm_env, tmp_path):
    started = time.perf_counter()
    folder, local = tmp_path / "launch", tmp_path / "local.jsonl"
    # The same selection in one pytest process, beside the launch (it fills the launch's idle gaps: planning,
    # scheduling, the requeued task's hold).
    one_process = subprocess.Popen([sys.executable, "-m", "pytest", *SELECTION, "-q", f"--gradeff-results={local}"],
                                   cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    log = tmp_path / "launch.log"
    launch = _gradeff("launch", "4", "--engine", "slurm", "--folder", str(folder), "--costs", str(COSTS),
                      "--throttle", "2", "--poll-s", "1", "--report", str(tmp_path / "report.csv"), "--",
                      *SELECTION, log=log)
    try:
        manifest = _until("the array's submission", lambda: _manifest(folder), log, timeout=300, process=launch)
        # The shard with the most cells (the last of them on a tie), requeued once it has recorded one: it is then
        # training its next cell.
        counts = {index: sum(t["shard"] == index for t in manifest["tests"]) for index in range(1, 5)}
        victim = max(counts, key=lambda index: (counts[index], index))
        assert counts[victim] >= 2, counts
        job = f"{manifest['array_id']}_{victim - 1}"
        results = folder / f"shard-{victim}.jsonl"
        _until(f"shard {victim}'s first record", lambda: _records(results), log, timeout=300, process=launch)
        before = [(r.cell, r.status) for r in _records(results)]
        subprocess.run(["scontrol", "requeue", job], check=True, timeout=60, capture_output=True)
        requeued_at = time.perf_counter() - started
        code = _finish(launch, log)
        assert one_process.wait(timeout=LAUNCH_TIMEOUT_S) == 0
    finally:
        for process in (launch, one_process):
            if process.poll() is None:
                process.kill()
    elapsed = time.perf_counter() - started
    err = log.read_text()
    assert code == 0, err

    # The requeued shard ran twice under its task id: sacct's runs, its log's starts, its results file.
    runs = array_runs(manifest["array_id"])[victim - 1]
    assert [run.state for run in runs] == ["REQUEUED", "COMPLETED"], runs
    assert current_state(runs) == "COMPLETED"
    starts = [line for line in (folder / f"shard-{victim}.log").read_text().splitlines()
              if line.startswith("gradeff launch: shard started")]
    assert [f"restart {n}," in line for n, line in enumerate(starts)] == [True, True], starts
    shard = _records(results)
    settled = [cell for cell, status in before if status == "ok"]
    # What the first run settled was not run again; what it was training (interrupted, or cut before it could
    # record) was run to its end by the second.
    assert all([r.cell for r in shard].count(cell) == 1 for cell in settled), [(r.cell, r.status) for r in shard]
    assert {r.cell for r in shard if r.status == "ok"} == {t["cell"] for t in manifest["tests"]
                                                          if t["shard"] == victim}
    interrupted = [r.cell for r in shard if r.status == "interrupted"]
    # The waiting launch followed the task back into the queue (through COMPLETING, REQUEUED or PENDING, as squeue
    # happened to show it) and running again, and waited for its second end.
    seen = re.findall(rf"shard {victim}/4 \(job {job}\) (?:\S+ → )?(\S+) after", err)
    assert seen.count("RUNNING") == 2 and seen[-1] == "COMPLETED", seen

    # Collected: every cell once, equal to the one-process run in every deterministic field, the same Answer.
    merged, single = list(read_records(folder / "results.jsonl")), list(read_records(local))
    assert len(merged) == len(single) == CELLS
    assert {r.status for r in merged} == {"ok"}
    assert differences(single, merged) == []
    assert answer_verdicts(single) == answer_verdicts(merged)
    with (tmp_path / "report.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == CELLS

    # The array asked for what the plan sized: its sbatch script, as submitit wrote it.
    script = next((folder / "jobs").glob(f"*/{manifest['array_id']}_submission.sh")).read_text()
    sbatch = manifest["sbatch"]
    assert "#SBATCH --array=0-3%2" in script
    assert f"#SBATCH --time={sbatch['time_min']}" in script and f"#SBATCH --mem={int(sbatch['mem_gb'])}GB" in script
    fields = sorted(deterministic_view(merged[0]))
    print(f"launch of {CELLS} cells in 4 shards on Slurm with shard {victim} requeued at {requeued_at:.1f} s: "
          f"{elapsed:.1f} s in all (load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)\n"
          f"shard {victim} ({job}): recorded {before} before the requeue; interrupted then: {interrupted}; "
          f"sacct runs: {[(run.state, run.start, run.end) for run in runs]}\n"
          f"records equal to the one-process run in {', '.join(fields)}\n"
          f"resources: {manifest['basis']}\n--- {script}\n--- launch's output:\n{err}")


def test_a_cancelled_shard_is_recorded_as_failed_not_missing(slurm_env, tmp_path, capsys):
    """--no-wait, scancel of a running shard, then status and collect: the cancelled shard's cell is in the merged
    file as a failure (interrupted if the cancel came mid-cell, else an error record naming the shard), not missing."""
    from gradeff.cli import main

    started = time.perf_counter()
    folder, log = tmp_path / "launch", tmp_path / "launch.log"
    selection = ["benchmarks/test_grid.py", "-m", "main", "-k", "vit and sgd- and not checkpoint", "--gradeff-epochs",
                 "1", "--gradeff-threads", "1", "-p", "no:cacheprovider"]
    launch = _gradeff("launch", "2", "--engine", "slurm", "--no-wait", "--folder", str(folder), "--timeout-min", "10",
                      "--", *selection, log=log)
    assert _finish(launch, log, timeout=300) == 0, log.read_text()
    manifest = json.loads((folder / "launch.json").read_text())
    cancelled = f"{manifest['array_id']}_1"
    _until("shard 2's start", (folder / "shard-2.log").exists, log, timeout=300)
    subprocess.run(["scancel", cancelled], check=True, timeout=60)

    def ended() -> bool:
        return all(is_final(task.state) for task in array_tasks(manifest["array_id"], 2).values())

    _until("both shards' end", ended, log, timeout=300, poll=1)
    assert main(["launch", "status", str(folder)]) == 0
    status = capsys.readouterr().out
    assert f"shard 2/2  job {cancelled:<10} CANCELLED " in status, status
    assert main(["launch", "collect", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "shard 2 failed (CANCELLED" in err
    records = {r.cell: r for r in read_records(folder / "results.jsonl")}
    assert sorted(records) == sorted(t["cell"] for t in manifest["tests"])
    assert all(records[t["cell"]].status == "ok" for t in manifest["tests"] if t["shard"] == 1)
    for cell in (t["cell"] for t in manifest["tests"] if t["shard"] == 2):
        record = records[cell]
        assert record.status in ("interrupted", "error"), record.status
        if record.status == "error":
            assert record.detail.startswith(f"shard 2/2 (Slurm job {cancelled}) ended CANCELLED"), record.detail
    print(f"cancelled shard: {time.perf_counter() - started:.1f} s\n{status}\n{err}\n"
          f"{[(r.cell, r.status, r.detail) for r in records.values()]}")
