"""Hostile sessions: options and signals a user (or a CI runner) may throw at a gradeff session, each of which once
lost records or gave a wrong answer without a word. Run them all with ``-k hostile``."""

import pytest

PLUGIN = ("-p", "gradeff.pytest_plugin")
KEPT = '{"kept": true}\n'


# --- every output against every other ----------------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--junitxml", "--benchmark-json", "--log-file"])
def test_hostile_a_plugin_output_on_the_results_file_is_refused_before_anything_is_written(grid_pytester, tmp_path,
                                                                                        option):
    """pytest's JUnit XML (written even under --collect-only), pytest-benchmark's JSON and pytest's log file on the
    results file: refused naming both options (exit 4), and the records stay as they were."""
    results = tmp_path / "r.jsonl"
    results.write_text(KEPT)
    outcome = grid_pytester.runpytest(*PLUGIN, "-k", "llm-adam-standard", "--collect-only",
                                      f"--gradeff-results={results}", f"{option}={results}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines([f"ERROR: --gradeff-results and {option} are both {results}"])
    assert results.read_text() == KEPT


def test_hostile_two_plugin_outputs_on_one_path_and_the_report_are_refused(grid_pytester, tmp_path):
    report, xml = tmp_path / "report.html", tmp_path / "out.xml"
    clash = grid_pytester.runpytest(*PLUGIN, "-k", "llm-adam-standard", "--collect-only", f"--gradeff-report={report}",
                                    f"--junitxml={report}", f"--gradeff-results={tmp_path / 'r.jsonl'}")
    assert clash.ret == pytest.ExitCode.USAGE_ERROR
    clash.stderr.fnmatch_lines([f"ERROR: --gradeff-report and --junitxml are both {report}"])
    apart = grid_pytester.runpytest(*PLUGIN, "-k", "llm-adam-standard", "--collect-only", f"--junitxml={xml}",
                                    f"--gradeff-report={report}", f"--gradeff-results={tmp_path / 'r.jsonl'}")
    assert apart.ret == pytest.ExitCode.OK and xml.is_file()


def test_hostile_benchmark_save_onto_the_results_file_is_refused(grid_pytester, tmp_path):
    """--benchmark-save writes STORAGE/<machine>/NNNN_NAME.json: a results file given that very path is refused."""
    from pytest_benchmark.utils import get_machine_id

    storage = tmp_path / "storage"
    results = storage / get_machine_id() / "0001_mine.json"
    outcome = grid_pytester.runpytest(*PLUGIN, "-k", "llm-adam-standard", "--collect-only",
                                      f"--gradeff-results={results}", f"--benchmark-storage={storage}",
                                      "--benchmark-save=mine")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines([f"ERROR: --gradeff-results and --benchmark-save (in --benchmark-storage) are both "
                                  f"{results}"])


# --- resume keeps only the very same experiment ---------------------------------------------------------------

def test_hostile_resume_keeps_the_same_experiment_and_reruns_another_saying_what_differs(grid_pytester, tmp_path):
    """Resumed with --gradeff-threads 2 (or --gradeff-fused, real data, a budget...), a record of another experiment
    was once kept as 'already recorded as ok'. Now the same experiment is kept, another one re-run, with one line
    naming what differs; the gate counts the kept record only."""
    results = tmp_path / "r.jsonl"
    args = (*PLUGIN, "-p", "no:cacheprovider", "--benchmark-disable", "--gradeff-epochs", "1", "-k",
            "llm-adam-standard", f"--gradeff-results={results}", f"--gradeff-cache={tmp_path / 'cache'}", "-rs")
    grid_pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    kept = grid_pytester.runpytest_subprocess(*args, "--gradeff-resume")
    kept.assert_outcomes(skipped=1)
    kept.stdout.fnmatch_lines(["*--gradeff-resume: already recorded as ok in * (the same experiment: v1:*)"])
    rerun = grid_pytester.runpytest_subprocess(*args, "--gradeff-resume", "--gradeff-threads", "2", "--gradeff-fused")
    rerun.assert_outcomes(passed=1)
    rerun.stdout.fnmatch_lines(["*gradeff --gradeff-resume: 1 cell(s) re-run, their records not kept*",
                                "re-run llm-adam-standard (seed 0): fused false → true; *threads 1 → 2"])
    from gradeff.records.store import read_records

    records = list(read_records(results))
    assert len(records) == 2 and records[-1].environment["torch_threads"] == 2
    assert records[0].experiment["fingerprint"] != records[1].experiment["fingerprint"]


# --- a full disk keeps the verdict ---------------------------------------------------------------------------------

# Where no tmpfs can be mounted: every append refused as a full disk refuses it.
FULL_DISK = """
import errno

import gradeff.pytest.session_records as session_records
from gradeff.records.outputs import OutputError


def _refuse(path, record):
    raise OutputError(path, OSError(errno.ENOSPC, "No space left on device"))


session_records.append_record = _refuse
"""


def test_hostile_a_full_disk_still_gets_the_summary_and_the_verdict_and_exits_74(grid_pytester, tmp_path):
    """Disk full while appending results once gave a traceback per cell, a partial line, every later record lost and
    a gate that failed cells that trained fine as missing (exit 1). Now each lost write is one line, nothing partial
    is left, the summary and the gate judge the records kept in memory, and the session exits 74."""
    from tests.records.test_hostile_inputs import fill, small_disk

    args = (*PLUGIN, "-p", "no:cacheprovider", "--benchmark-disable", "--gradeff-epochs", "1", "-k",
            "llm-adam-standard or llm-adam-accum", f"--gradeff-cache={tmp_path / 'cache'}")
    baseline = tmp_path / "baseline.jsonl"
    grid_pytester.runpytest_subprocess(*args, f"--gradeff-results={baseline}").assert_outcomes(passed=2)
    with small_disk(tmp_path / "disk") as disk:
        if disk is None:
            grid_pytester.makeconftest(FULL_DISK)
            disk = tmp_path
        else:
            fill(disk)
        results = disk / "r.jsonl"
        # (Time left out: two runs on a loaded machine; the deterministic rules are what this is about.)
        outcome = grid_pytester.runpytest_subprocess(*args, f"--gradeff-results={results}",
                                                     f"--gradeff-baseline={baseline}",
                                                     "--gradeff-compare-args=--ignore time_per_epoch")
        on_disk = results.read_bytes() if results.exists() else b""
    text = outcome.stdout.str()
    assert outcome.ret == 74, text[-3000:]
    outcome.assert_outcomes(passed=2)
    for cell in ("llm-adam-standard", "llm-adam-accum"):
        outcome.stdout.fnmatch_lines([f"gradeff: error: cannot write {results}: No space left on device (ENOSPC): the "
                                      f"record of {cell} (seed 0, ok) is not on disk; it is kept in memory for this "
                                      "session's summary and gate only"])
    outcome.stdout.fnmatch_lines(["*gradeff compare with *: no regression*",
                                  "0 regressions in 0 cells, 0 improvements, 2 cells compared",
                                  "gradeff: incomplete output: * write(s) lost (exit 74)"])
    assert "Traceback" not in text and on_disk == b""  # nothing partial left behind


# --- SIGTERM to pytest-xdist's controller ----------------------------------------------------------------------------

# Marks, per worker, that a cell has started (the moment to send the signal).
STARTED = """
import os
from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    Path(f"started-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}").touch()
"""


def test_hostile_sigterm_to_the_xdist_controller_records_the_cells_in_flight(grid_pytester, tmp_path):
    """A CI timeout's SIGTERM reaches the controller only: its workers' running cells were left to xdist's shutdown
    (no record where it killed them; 'Ctrl-C' where it did not). The controller passes it on: each in-flight cell is
    recorded interrupted by SIGTERM, and the session ends interrupted (exit 2) within the timeout."""
    import signal
    import subprocess
    import sys
    import time

    from gradeff.records.store import read_records

    grid_pytester.makeconftest(STARTED)
    results = tmp_path / "r.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "-n", "2", "test_grid.py", "-k",
         "llm-adam-standard or llm-cgd-standard", f"--gradeff-results={results}", f"--gradeff-cache={tmp_path / 'c'}"],
        cwd=grid_pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not all((grid_pytester.path / f"started-gw{i}").exists() for i in (0, 1)):
            assert process.poll() is None and time.monotonic() < deadline, "the workers never started a cell"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=120)[0]
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    records = {r.cell: r for r in read_records(results)}
    assert set(records) == {"llm-adam-standard", "llm-cgd-standard"}, output[-3000:]
    for record in records.values():
        assert record.status == "interrupted", (record.cell, record.status)
        assert record.detail.startswith("interrupted by SIGTERM") and "Ctrl-C" not in record.detail
