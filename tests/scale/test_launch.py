"""gradeff launch: planned once, split as the shards split, sized from the plan, run by submitit (locally here; on
Slurm in tests/cluster), merged into one results file with every cell once, equal to a run in one process."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradeff.cli import main, parse_args
from gradeff.records.store import append_record, read_records
from gradeff.scale.collect import CollectError, collect, merge_results
from gradeff.scale.launch import (
    LaunchError,
    LaunchOptions,
    check_options,
    choose_engine,
    shard_command,
    wait_for_shards,
)
from gradeff.scale.manifest import LaunchManifest, load_manifest, save_manifest
from gradeff.scale.status import ShardStatus, shard_statuses, status_lines
from tests.conftest import build_record
from tests.scale.same_records import answer_verdicts, differences

ROOT = Path(__file__).parents[2]
XDIST = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def _options(tmp_path, *args, **overrides) -> LaunchOptions:
    return LaunchOptions(**({"shards": 2, "pytest_args": args, "folder": tmp_path / "run"} | overrides))


def test_each_shard_runs_the_same_command_with_its_own_shard_and_results_and_resumes(tmp_path):
    options = _options(tmp_path, "benchmarks", "-k", "vit", costs=Path("base.jsonl"))
    first, second = shard_command(options, 1), shard_command(options, 2)
    assert first[:6] == [sys.executable, "-m", "pytest", "benchmarks", "-k", "vit"]
    assert first[6:8] == ["--gradeff-shard", "1/2"] and second[6:8] == ["--gradeff-shard", "2/2"]
    assert f"--gradeff-results={tmp_path / 'run' / 'shard-1.jsonl'}" in first
    assert "--gradeff-shard-costs=base.jsonl" in first
    # A shard that starts again (requeued, preempted, timed out) skips what it recorded.
    assert first[-1] == second[-1] == "--gradeff-resume"


@pytest.mark.parametrize(("args", "overrides", "message"), [
    (("--gradeff-shard", "1/2"), {}, "--gradeff-shard is set by gradeff launch"),
    (("--gradeff-results=x.jsonl",), {}, "--gradeff-results is set by gradeff launch"),
    (("--gradeff-dry-run=H100",), {}, "--gradeff-dry-run is set by gradeff launch"),
    ((), {"shards": 0}, "must be >= 1"),
    ((), {"costs": Path("absent.jsonl")}, "--costs absent.jsonl: no such file"),
    ((), {"throttle": 0}, "--throttle must be >= 1"),
    ((), {"engine": "pbs"}, "unknown engine 'pbs'; valid: auto, local, slurm"),
    ((), {"sbatch": ("time=10",)}, "sets --time itself; use --timeout-min"),
    ((), {"sbatch": ("array=0-3",)}, "sets --array itself; use --throttle"),
    ((), {"time_margin": 0.5}, "--time-margin must be >= 1"),
])
def test_bad_launches_are_refused_before_any_job(tmp_path, args, overrides, message):
    with pytest.raises(LaunchError, match=message):
        check_options(_options(tmp_path, *args, **overrides))


def test_an_existing_merged_file_is_not_overwritten(tmp_path):
    output = tmp_path / "merged.jsonl"
    append_record(output, build_record())
    with pytest.raises(LaunchError, match="exists"):
        check_options(_options(tmp_path, output=output))


def _no_cluster() -> str:
    return "sinfo exited 1: Unable to contact slurm controller"


def test_auto_runs_locally_unless_a_cluster_answers(tmp_path):
    """srun on PATH is no cluster: auto asks sinfo (here, a probe) and takes Slurm only when it answers."""
    assert choose_engine(_options(tmp_path), probe=_no_cluster) == "local"
    assert choose_engine(_options(tmp_path), probe=lambda: None) == "slurm"
    assert choose_engine(_options(tmp_path, engine="local"), probe=lambda: None) == "local"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"engine": "slurm"}, r"--engine slurm: no Slurm cluster answers here \(sinfo exited 1: Unable to contact slurm "
                          r"controller\); start one, or use --engine local"),
    ({"partition": "gpu"}, "--partition given for Slurm, but no Slurm cluster answers here"),
    ({"engine": "local", "throttle": 2}, "--throttle: Slurm options; the local engine runs every shard at once"),
    ({"engine": "local", "wait": False}, "--no-wait: local shards are this process's children"),
])
def test_slurm_without_a_cluster_is_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(LaunchError, match=message) as raised:
        choose_engine(_options(tmp_path, **overrides), probe=_no_cluster)
    assert "\n" not in str(raised.value)


def test_an_explicit_slurm_launch_without_a_cluster_submits_nothing(tmp_path, monkeypatch, capsys):
    """The real probe: a PATH whose sinfo fails, as a machine with Slurm's client and no controller."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'sinfo: error: Unable to contact slurm controller' >&2\nexit 1\n")
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code = main(["launch", "2", "--engine", "slurm", "--folder", str(tmp_path / "run"), "--", "benchmarks"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == ("gradeff: error: --engine slurm: no Slurm cluster answers here (sinfo exited 1: sinfo: "
                           "error: Unable to contact slurm controller); start one, or use --engine local")
    assert not (tmp_path / "run").exists()


def test_merge_keeps_a_resumed_cells_last_record_and_refuses_a_cell_in_two_shards(tmp_path):
    one, two = tmp_path / "shard-1.jsonl", tmp_path / "shard-2.jsonl"
    append_record(one, build_record("llm-adam-standard"))
    # Shard 2 was stopped mid-cell and resumed: its interrupted record is superseded by the rerun's.
    append_record(two, build_record("llm-sgd-standard", "interrupted"))
    append_record(two, build_record("llm-sgd-standard"))
    merged = merge_results([one, two])
    assert [(r.cell, r.status) for r in merged] == [("llm-adam-standard", "ok"), ("llm-sgd-standard", "ok")]
    append_record(two, build_record("llm-adam-standard"))
    with pytest.raises(CollectError, match="llm-adam-standard .seed 0. is in .*shard-1.jsonl and in .*shard-2.jsonl"):
        merge_results([one, two])


def _manifest(tmp_path, tests, **overrides) -> LaunchManifest:
    axes = {test["cell"]: test["cell"].split("-") for test in tests if test["cell"]}
    cells = {cell: {"grid": "main", "model": model, "optimizer": optimizer, "strategy": strategy, "method": "full",
                    "dataset": ""} for cell, (model, optimizer, strategy) in axes.items()}
    values = dict(engine="slurm", shards=2, pytest_args=("benchmarks",), folder=str(tmp_path), cwd=str(tmp_path),
                  output=str(tmp_path / "results.jsonl"), profile="tiny", code_version="0.1.0+abc", tests=tuple(tests),
                  cells=cells, array_id="57", jobs=("57_0", "57_1"), created_at=0.0)
    return LaunchManifest(**(values | overrides))


def test_a_cell_no_shard_recorded_is_recorded_as_failed_naming_its_shard(tmp_path):
    tests = [{"nodeid": "g::t[llm-adam-standard]", "cell": "llm-adam-standard", "seed": 0, "shard": 1},
             {"nodeid": "g::t[llm-sgd-standard]", "cell": "llm-sgd-standard", "seed": 0, "shard": 2},
             {"nodeid": "g::t[llm-sgd-accum]", "cell": "llm-sgd-accum", "seed": 0, "shard": 2},
             {"nodeid": "mine::test_own", "cell": None, "seed": 0, "shard": 2}]
    manifest = _manifest(tmp_path, tests)
    append_record(manifest.shard_results(1), build_record("llm-adam-standard"))
    append_record(manifest.shard_results(2), build_record("llm-sgd-standard"))
    statuses = [ShardStatus(index=1, job="57_0", state="COMPLETED", recorded=1, assigned=1, exit_code=0),
                ShardStatus(index=2, job="57_1", state="CANCELLED", recorded=1, assigned=3,
                            error="batch script exit 0:15")]
    collected = collect(manifest, statuses)
    records = {r.cell: r for r in read_records(collected.output)}
    assert sorted(records) == ["llm-adam-standard", "llm-sgd-accum", "llm-sgd-standard"]
    failed = records["llm-sgd-accum"]
    assert failed.status == "error" and failed.code_version == "0.1.0+abc" and failed.epochs == ()
    assert failed.detail == (f"shard 2/2 (Slurm job 57_1) ended CANCELLED (batch script exit 0:15) before recording "
                             f"this cell; its log: {tmp_path / 'shard-2.log'}")
    # The test of one's own has no cell to record; its dead shard's loss is still named.
    assert collected.unrecorded == ((2, "llm-sgd-accum", 0), (2, "mine::test_own", 0))


def test_status_reads_every_run_of_a_requeued_task_and_a_task_slurm_forgot(tmp_path):
    from gradeff.scale.slurm import GONE, TaskState, parse_sacct

    tests = [{"nodeid": f"g::t[{c}]", "cell": c, "seed": 0, "shard": s}
             for c, s in (("llm-adam-standard", 1), ("llm-sgd-standard", 2), ("llm-sgd-accum", 3))]
    manifest = _manifest(tmp_path, tests, shards=3, jobs=("57_0", "57_1", "57_2"))
    save_manifest(manifest)
    assert load_manifest(tmp_path) == manifest
    append_record(manifest.shard_results(2), build_record("llm-sgd-standard"))
    runs = parse_sacct("57_0|RUNNING|2026-01-01T00:00:01|Unknown|0:0\n"
                       "57_1|REQUEUED|2026-01-01T00:00:01|2026-01-01T00:00:09|0:0\n"
                       "57_1|PENDING|Unknown|Unknown|0:0\n", "57")
    tasks = {0: TaskState("RUNNING", tuple(runs[0])), 1: TaskState("PENDING", tuple(runs[1])), 2: TaskState(GONE, ())}
    statuses = shard_statuses(manifest, tasks_of=lambda array, count: tasks)
    assert [(s.state, s.recorded, s.assigned, len(s.runs)) for s in statuses] == [
        ("RUNNING", 0, 1, 1), ("PENDING", 1, 1, 2), ("GONE", 0, 1, 0)]
    assert statuses[2].ended and not statuses[2].succeeded
    assert statuses[2].error == "Slurm knows no such task any more: cancelled before it started"
    lines = status_lines(manifest, statuses)
    assert "runs: REQUEUED 2026-01-01T00:00:01→2026-01-01T00:00:09, PENDING Unknown→Unknown" in lines[2]
    assert lines[-1] == "1 of 3 shards ended (1 failed); 1 of 3 tests recorded"


def test_a_waiting_launch_follows_each_change_of_state_and_rides_out_a_silent_controller(tmp_path):
    tests = [{"nodeid": "g::t[llm-adam-standard]", "cell": "llm-adam-standard", "seed": 0, "shard": 1}]
    manifest = _manifest(tmp_path, tests, shards=1, jobs=("57_0",))

    def status(state: str) -> list[ShardStatus]:
        return [ShardStatus(index=1, job="57_0", state=state, recorded=0, assigned=1,
                            exit_code=0 if state == "COMPLETED" else None)]

    answers = iter([status("RUNNING"), RuntimeError("squeue --jobs=57 exited 1: Unable to contact slurm controller"),
                    status("RUNNING"), status("PENDING"), status("RUNNING"), status("COMPLETED")])

    def statuses_of(_):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    lines: list[str] = []
    final = wait_for_shards(manifest, echo=lines.append, poll_s=0.01, statuses_of=statuses_of)
    assert [s.state for s in final] == ["COMPLETED"]
    assert [line.split(" after ")[0] for line in lines] == [
        "gradeff launch: shard 1/1 (job 57_0) RUNNING",
        "gradeff launch: cannot read the shards' states (squeue --jobs=57 exited 1: Unable to contact slurm "
        "controller); asking again in 0.01 s",
        "gradeff launch: shard 1/1 (job 57_0) RUNNING → PENDING",
        "gradeff launch: shard 1/1 (job 57_0) PENDING → RUNNING",
        "gradeff launch: shard 1/1 (job 57_0) RUNNING → COMPLETED"]


def test_launch_tools_and_the_executor_alias_parse():
    assert parse_args(["launch", "status", "results/launch-1"]).folder == "results/launch-1"
    collect_args = parse_args(["launch", "collect", "results/launch-1", "-o", "all.jsonl", "--report", "r.html"])
    assert (collect_args.output, collect_args.report) == ("all.jsonl", "r.html")
    assert parse_args(["launch", "2", "--executor", "local"]).engine == "local"
    assert parse_args(["launch", "2", "--engine", "slurm", "--gpus-per-node", "2"]).gpus == 2


def test_a_selection_that_cannot_be_collected_submits_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(["launch", "2", "--engine", "local", "--folder", str(tmp_path / "run"), "--",
                 "benchmarks/test_grid.py", "--gradeff-models", "nosuchmodel"])
    assert code == 2
    assert "unknown model 'nosuchmodel'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_two_local_shards_merge_every_cell_once_and_equal_one_process(tmp_path, capsys, monkeypatch):
    """End to end: 2 local shards of a 3-cell selection → one results file, each cell once, a report; its records
    equal, in every deterministic field, those of the same selection run in one pytest process, and so does the
    Answer's verdicts on them."""
    monkeypatch.chdir(ROOT)
    for variable in XDIST:
        monkeypatch.delenv(variable, raising=False)
    cells = ["vit-sgd-standard", "llm-sgd-standard", "modernbert-sgd-standard"]
    selection = ["benchmarks/test_grid.py", "-k", " or ".join(cells), "--gradeff-epochs", "1", "--gradeff-threads",
                 "1", "-p", "no:cacheprovider"]
    started = time.perf_counter()
    code = main(["launch", "2", "--engine", "local", "--folder", str(tmp_path / "run"), "--report",
                 str(tmp_path / "report.csv"), "--", *selection])
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 0, err
    records = list(read_records(tmp_path / "run" / "results.jsonl"))
    assert sorted(r.cell for r in records) == sorted(cells)
    assert {r.status for r in records} == {"ok"}
    shards = [list(read_records(tmp_path / "run" / f"shard-{i}.jsonl")) for i in (1, 2)]
    assert sorted(len(shard) for shard in shards) == [1, 2]
    assert len({r.session for r in records}) == 2  # two independent pytest sessions
    assert "gradeff launch: 3 selected tests in 2 shards on local" in err
    assert "3 records from 2 shards merged" in err
    assert (tmp_path / "report.csv").read_text().count("sgd-standard") == 3
    single = tmp_path / "single.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", *selection, "-q", f"--gradeff-results={single}"], cwd=ROOT,
                   env={k: v for k, v in os.environ.items() if k not in XDIST}, capture_output=True, check=True,
                   timeout=600)
    one_process = list(read_records(single))
    assert differences(one_process, records) == []
    assert answer_verdicts(one_process) == answer_verdicts(records)
    print(f"2-shard launch of 3 tiny cells: {elapsed:.1f} s on {os.cpu_count()} cores", file=sys.__stderr__)


def test_command_line_options_before_and_after_n(tmp_path, monkeypatch):
    """Launch's options may follow N; everything after -- is pytest's; no pytest arguments means the grids."""
    import gradeff.scale.launch_command

    seen = []

    def fake_launch(options, echo):
        seen.append(options)
        raise LaunchError("stop here")

    monkeypatch.setattr(gradeff.scale.launch_command, "launch", fake_launch)
    assert main(["launch", "3", "--engine", "slurm", "--partition", "gpu", "--account", "lab", "--qos", "high",
                 "--throttle", "2", "--sbatch", "constraint=a100", "--gpu", "H100", "--", "benchmarks", "-k",
                 "vit"]) == 2
    assert main(["launch", "--executor", "local", "2"]) == 2
    first, second = seen
    assert (first.shards, first.engine, first.pytest_args) == (3, "slurm", ("benchmarks", "-k", "vit"))
    assert (first.partition, first.account, first.qos, first.throttle, first.sbatch, first.gpu) == (
        "gpu", "lab", "high", 2, ("constraint=a100",), "H100")
    assert (second.shards, second.engine, second.pytest_args) == (2, "local", ("benchmarks",))
