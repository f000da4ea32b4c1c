"""gradeff launch: shards submitted with submitit's local executor, merged into one results file, each cell once."""

import os
import sys
import time
from pathlib import Path

import pytest

from gradeff.cli import main
from gradeff.records.results import append_record, read_records
from gradeff.scale.launch import (
    LaunchError,
    LaunchOptions,
    check_options,
    merge_results,
    shard_command,
)
from tests.conftest import build_record

ROOT = Path(__file__).parents[2]


def _options(tmp_path, *args, **overrides) -> LaunchOptions:
    return LaunchOptions(**({"shards": 2, "pytest_args": args, "folder": tmp_path / "run"} | overrides))


def test_each_shard_runs_the_same_command_with_its_own_shard_and_results(tmp_path):
    options = _options(tmp_path, "benchmarks", "-k", "vit", costs=Path("base.jsonl"))
    first, second = shard_command(options, 1), shard_command(options, 2)
    assert first[:6] == [sys.executable, "-m", "pytest", "benchmarks", "-k", "vit"]
    assert first[6:8] == ["--gradeff-shard", "1/2"] and second[6:8] == ["--gradeff-shard", "2/2"]
    assert f"--gradeff-results={tmp_path / 'run' / 'shard-1.jsonl'}" in first
    assert "--gradeff-shard-costs=base.jsonl" in first


@pytest.mark.parametrize(("args", "overrides", "message"), [
    (("--gradeff-shard", "1/2"), {}, "--gradeff-shard is set by gradeff launch"),
    (("--gradeff-results=x.jsonl",), {}, "--gradeff-results is set by gradeff launch"),
    ((), {"shards": 0}, "must be >= 1"),
    ((), {"costs": Path("absent.jsonl")}, "--costs absent.jsonl: no such file"),
])
def test_bad_launches_are_refused_before_any_job(tmp_path, args, overrides, message):
    with pytest.raises(LaunchError, match=message):
        check_options(_options(tmp_path, *args, **overrides))


def test_an_existing_merged_file_is_not_overwritten(tmp_path):
    output = tmp_path / "merged.jsonl"
    append_record(output, build_record())
    with pytest.raises(LaunchError, match="exists"):
        check_options(_options(tmp_path, output=output))


def test_merge_refuses_a_cell_in_two_shards(tmp_path):
    one, two = tmp_path / "shard-1.jsonl", tmp_path / "shard-2.jsonl"
    append_record(one, build_record("llm-adam-standard"))
    append_record(two, build_record("llm-sgd-standard"))
    merged = merge_results([one, two], tmp_path / "merged.jsonl")
    assert [r.cell for r in read_records(merged)] == ["llm-adam-standard", "llm-sgd-standard"]
    append_record(two, build_record("llm-adam-standard"))
    with pytest.raises(LaunchError, match="llm-adam-standard .seed 0. is in .*shard-1.jsonl and in .*shard-2.jsonl"):
        merge_results([one, two], tmp_path / "again.jsonl")


def test_a_selection_that_cannot_be_collected_submits_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(["launch", "2", "--executor", "local", "--folder", str(tmp_path / "run"), "--",
                 "benchmarks/test_grid.py", "--gradeff-models", "nosuchmodel"])
    assert code == 2
    assert "unknown model 'nosuchmodel'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_two_local_shards_merge_every_cell_once(tmp_path, capsys, monkeypatch):
    """End to end: 2 shards of a 3-cell selection on the local executor → one results file, each cell once, a report."""
    monkeypatch.chdir(ROOT)
    for variable in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(variable, raising=False)
    cells = ["vit-sgd-standard", "llm-sgd-standard", "modernbert-sgd-standard"]
    started = time.perf_counter()
    code = main(["launch", "2", "--executor", "local", "--folder", str(tmp_path / "run"), "--report",
                 str(tmp_path / "report.csv"), "--", "benchmarks/test_grid.py", "-k", " or ".join(cells),
                 "--gradeff-epochs", "1", "-p", "no:cacheprovider"])
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 0, err
    records = list(read_records(tmp_path / "run" / "results.jsonl"))
    assert sorted(r.cell for r in records) == sorted(cells)
    assert {r.status for r in records} == {"ok"}
    shards = [list(read_records(tmp_path / "run" / f"shard-{i}.jsonl")) for i in (1, 2)]
    assert sorted(len(shard) for shard in shards) == [1, 2]
    assert len({r.session for r in records}) == 2  # two independent pytest sessions
    assert "gradeff launch: 3 selected tests in 2 shards" in err and "3 records from 2 shards merged" in err
    assert (tmp_path / "report.csv").read_text().count("sgd-standard") == 3
    print(f"2-shard launch of 3 tiny cells: {elapsed:.1f} s on {os.cpu_count()} cores", file=sys.__stderr__)


def test_command_line_options_before_and_after_n(tmp_path, monkeypatch):
    """Launch's options may follow N; everything after -- is pytest's; no pytest arguments means the grids."""
    import gradeff.scale.launch

    seen = []

    def fake_launch(options, echo):
        seen.append(options)
        raise LaunchError("stop here")

    monkeypatch.setattr(gradeff.scale.launch, "launch", fake_launch)
    assert main(["launch", "3", "--executor", "local", "--partition", "gpu", "--", "benchmarks", "-k", "vit"]) == 2
    assert main(["launch", "--executor", "slurm", "2"]) == 2
    first, second = seen
    assert (first.shards, first.executor, first.pytest_args) == (3, "local", ("benchmarks", "-k", "vit"))
    assert first.parameters == {"slurm_partition": "gpu"}
    assert (second.shards, second.executor, second.pytest_args) == (2, "slurm", ("benchmarks",))
