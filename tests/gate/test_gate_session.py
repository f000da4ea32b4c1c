"""The gate at a session's end: refused up front when it could not be honest, a verdict whatever the disk does,
and numbers that do not depend on how pytest was started."""

import fnmatch
import json
from pathlib import Path

import pytest

from gradeff.pytest.option_values import default_threads
from gradeff.records.store import read_records

PLUGIN = ("-p", "gradeff.pytest_plugin")
CELL = ("-k", "vit-sgd-standard", "--gradeff-epochs", "1", "--benchmark-disable")

# Loaded by the inner session (pytester's conftest): every atomic write fails as on a full disk.
FULL_DISK = """
import errno, os
from gradeff.records import outputs

class Full:
    def __init__(self, path):
        path.write_text("")
    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    def flush(self):
        pass
    def fileno(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        pass

def _open_temporary(path):
    temporary = path.parent / f".{path.name}.full.tmp"
    return Full(temporary), temporary

outputs._open_temporary = _open_temporary
"""
# A capability check that broke: every cell is now skipped with a reason.
BROKEN_CHECK = """
import gradeff.cell.plan
gradeff.cell.plan.cannot_run = lambda cell, config: "needs a library that is not installed"
"""


def _matches(outcome, pattern: str) -> bool:
    return any(fnmatch.fnmatch(line, pattern) for line in outcome.errlines + outcome.outlines)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """One tiny cell's record, to serve as a baseline (recorded by the suite's own code, like every baseline).

    It is recorded in this test process, so its process RSS peak is this process's whole history (1.5 GiB late in
    a serial run of the suite), not the cell's: the sessions below leave ``peak_rss_bytes`` out of the gate."""
    from gradeff.cell.config import RunConfig
    from gradeff.cell.run import run_cell
    from gradeff.records.store import append_record
    from gradeff.studies.grid import Cell

    path = tmp_path_factory.mktemp("baseline") / "baseline.jsonl"
    append_record(path, run_cell(Cell("vit", "sgd", "standard"), RunConfig(epochs=1, device="cpu", threads=1)))
    return path


def _baseline(grid_pytester, recorded: Path) -> Path:
    baseline = grid_pytester.path / "baseline.jsonl"
    baseline.write_text(recorded.read_text())
    return baseline


@pytest.mark.parametrize(("args", "message"), [
    (("--gradeff-results={tmp}/r.jsonl", "--gradeff-baseline={tmp}/r.jsonl"),
     "*--gradeff-baseline *r.jsonl is this session's own --gradeff-results file: the session's records would be "
     "compared with themselves and always pass; give a baseline recorded before*"),
    (("--gradeff-results={tmp}/r.jsonl", "--gradeff-report={tmp}/r.jsonl"),
     "*--gradeff-results and --gradeff-report are both *r.jsonl*"),
    (("--gradeff-results={tmp}/out/last-session.jsonl", "--gradeff-baseline={tmp}/b.jsonl"),
     "*--gradeff-results and the session's records (last-session.jsonl, beside --gradeff-results) are both *"),
    (("--gradeff-results={tmp}/out/r.jsonl", "--gradeff-baseline={tmp}/out/last-session.jsonl"),
     "*the session's records (last-session.jsonl, beside --gradeff-results) and --gradeff-baseline are both *"),
    (("--gradeff-results={tmp}/r.jsonl", "--gradeff-baseline={tmp}/b.jsonl", "--gradeff-report={tmp}/b.jsonl"),
     "*--gradeff-report and --gradeff-baseline are both *b.jsonl*"),
    (("--gradeff-results={tmp}/r.jsonl", "--gradeff-baseline={tmp}/b.jsonl",
      "--gradeff-compare-args=--output {tmp}/r.jsonl"),
     "*--gradeff-results and --output of --gradeff-compare-args are both *r.jsonl*"),
    (("--gradeff-results={tmp}/b.perturbed.jsonl", "--gradeff-baseline={tmp}/b.jsonl"),
     "*--gradeff-results and its perturbation runs are both *b.perturbed.jsonl*"),
])
def test_self_comparison_and_colliding_outputs_are_refused_before_any_cell(grid_pytester, recorded, args, message):
    """A baseline that is the session's own results always passes; two outputs on one path lose one of them:
    both stop the session at its start (usage error), naming the options."""
    tmp = grid_pytester.path
    for name in ("r.jsonl", "b.jsonl", "out/last-session.jsonl"):
        (tmp / name).parent.mkdir(exist_ok=True)
        (tmp / name).write_text(recorded.read_text())
    outcome = grid_pytester.runpytest(*PLUGIN, *CELL, *(arg.format(tmp=tmp) for arg in args))
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    assert _matches(outcome, message), outcome.errlines
    assert (tmp / "r.jsonl").read_text() == recorded.read_text()  # nothing ran, nothing was written


def test_an_unreadable_baseline_line_under_strict_is_refused_before_any_cell(grid_pytester, recorded):
    """.ci/run passes --strict: a torn baseline line stops the session at its start instead of dropping a cell
    from the judgement at its end."""
    baseline = _baseline(grid_pytester, recorded)
    with open(baseline, "a") as handle:
        handle.write("{torn\n")
    outcome = grid_pytester.runpytest(*PLUGIN, *CELL, f"--gradeff-baseline={baseline}",
                                      "--gradeff-compare-args=--strict")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    assert _matches(outcome, "*--gradeff-baseline: *baseline.jsonl: unreadable line under --strict: *baseline.jsonl:2*")


def test_a_cell_that_newly_skips_fails_the_session(grid_pytester, recorded):
    """ok → skipped (a broken capability check, a missing optional dependency) is a regression, with the reason."""
    baseline = _baseline(grid_pytester, recorded)
    grid_pytester.makeconftest(BROKEN_CHECK)
    outcome = grid_pytester.runpytest_subprocess(*PLUGIN, *CELL, f"--gradeff-results={grid_pytester.path}/r.jsonl",
                                                 f"--gradeff-baseline={baseline}")
    assert outcome.ret == pytest.ExitCode.TESTS_FAILED
    outcome.stdout.fnmatch_lines(["*gradeff compare with*: REGRESSION*",
                                  "vit-sgd-standard*status*ok*skipped*ok → skipped*regression*needs a library*"])


@pytest.mark.parametrize("regression", [False, True], ids=["unchanged", "regressed"])
def test_a_full_disk_at_the_end_still_gives_summary_and_verdict(grid_pytester, recorded, regression):
    """Every file of the session's end (last-session records and cells, report) fails with ENOSPC: each is one
    line, the summary and the gate's verdict still print, and the exit code is 74 (incomplete output) unless the
    gate found a regression (1: the verdict stands)."""
    baseline = _baseline(grid_pytester, recorded)
    if regression:
        record = json.loads(baseline.read_text())
        record["summary"]["final_loss"] *= 0.9
        baseline.write_text(json.dumps(record) + "\n")
    grid_pytester.makeconftest(FULL_DISK)
    results = grid_pytester.path / "out" / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, *CELL, f"--gradeff-results={results}", f"--gradeff-baseline={baseline}",
        f"--gradeff-report={grid_pytester.path}/report.html",
        "--gradeff-compare-args=--ignore time_per_epoch --ignore peak_rss_bytes")
    assert outcome.ret == (pytest.ExitCode.TESTS_FAILED if regression else 74)
    verdict = "REGRESSION" if regression else "no regression"
    outcome.stdout.fnmatch_lines([
        "*gradeff: 1 cells, profile tiny*", "vit-sgd-standard*ok*",
        f"gradeff: error: cannot write {results.parent}/last-session.jsonl: No space left on device (ENOSPC)",
        f"gradeff: error: cannot write {results.parent}/last-session.cells: No space left on device (ENOSPC)",
        f"gradeff: error: cannot write {grid_pytester.path}/report.html: No space left on device (ENOSPC)",
        f"*gradeff compare with*: {verdict}*",
        "gradeff: incomplete output: 3 write(s) lost (exit 74)",
    ])
    # The verdict in one line, after pytest's own count: the last line of the session.
    last = [line for line in outcome.stdout.lines if line.strip()][-1]
    assert last == ("GATE FAILED: 1 regression in 1 cell (exit 1) — details above" if regression
                    else "gate: no regression (0 improvements, 1 cell compared)")
    assert "Traceback" not in outcome.stdout.str() + outcome.stderr.str()
    assert len(list(read_records(results))) == 1  # the store appends without the atomic writer: its record is there
    assert sorted(p.name for p in results.parent.iterdir()) == ["r.jsonl"]  # no half-written file left behind


def test_a_figure_that_improved_is_a_regression_the_verdict_says_changed_better(grid_pytester, recorded):
    """A deterministic loss that came out lower than the baseline's fails the gate (it must repeat until the
    baseline is refreshed): the total line counts it among the regressions, not the improvements, and says why; the
    session's last line is the verdict, after pytest's count."""
    baseline = _baseline(grid_pytester, recorded)
    record = json.loads(baseline.read_text())
    record["summary"]["final_loss"] *= 1.1
    baseline.write_text(json.dumps(record) + "\n")
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, *CELL, f"--gradeff-results={grid_pytester.path}/r.jsonl", f"--gradeff-baseline={baseline}",
        "--gradeff-compare-args=--ignore time_per_epoch --ignore peak_rss_bytes")
    assert outcome.ret == pytest.ExitCode.TESTS_FAILED
    outcome.stdout.fnmatch_lines(["1 regression in 1 cell (1 of them changed: better: a deterministic figure must "
                                  "repeat until the baseline is refreshed), 0 improvements, 1 cell compared"])
    lines = [line for line in outcome.stdout.lines if line.strip()]
    assert lines[-1] == "GATE FAILED: 1 regression in 1 cell, 1 of them changed: better (exit 1) — details above"
    assert "1 passed" in lines[-2]
    answer = next(i for i, line in enumerate(lines) if "gradeff: the answer" in line)
    regression = next(i for i, line in enumerate(lines) if "gradeff compare with" in line)
    assert regression < answer < len(lines) - 2


def test_the_gates_own_output_on_a_full_disk_is_one_line_too(grid_pytester, recorded):
    """--gradeff-compare-args=--output: that file failing is said once, and the session exits 74."""
    baseline = _baseline(grid_pytester, recorded)
    grid_pytester.makeconftest(FULL_DISK)
    table = grid_pytester.path / "gate.md"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, *CELL, f"--gradeff-results={grid_pytester.path}/r.jsonl", f"--gradeff-baseline={baseline}",
        f"--gradeff-compare-args=--ignore time_per_epoch --ignore peak_rss_bytes --markdown --output {table}")
    assert outcome.ret == 74
    lines = outcome.stdout.lines
    assert sum(f"cannot write {table}: No space left on device (ENOSPC)" in line for line in lines) == 1
    outcome.stdout.fnmatch_lines(["*gradeff compare with*: no regression*", "0 regressions in 0 cells*"])


def test_serial_and_two_workers_record_the_same_numbers(grid_pytester):
    """Each cell sets its own thread count (1 by default): a conjugate-gradient cell, which amplifies any last-bit
    difference, records the same losses and memory run serially or under -n 2; --gradeff-threads is recorded."""
    cells = ("-k", "llm-cgd-standard or vit-cgd-accum", "--gradeff-epochs", "1", "--benchmark-disable")
    runs = {}
    for name, extra in (("serial", ()), ("xdist", ("-n", "2")), ("two", ("--gradeff-threads", "2"))):
        results = grid_pytester.path / f"{name}.jsonl"
        grid_pytester.runpytest_subprocess(*PLUGIN, *cells, *extra, f"--gradeff-results={results}").assert_outcomes(
            passed=2)
        runs[name] = {r.cell: r for r in read_records(results)}
        # Without a baseline too, the session leaves its own records and selection for `gradeff compare`.
        assert [r.to_json() for r in read_records(grid_pytester.path / "last-session.jsonl")] == [
            r.to_json() for r in read_records(results)]
        cells_file = (grid_pytester.path / "last-session.cells").read_text().split()
        assert sorted(cells_file) == ["llm-cgd-standard", "vit-cgd-accum"]

    def numbers(record):
        return ([e.loss for e in record.epochs], [e.heldout_loss for e in record.epochs], record.summary.final_loss,
                record.meters["memory"], record.environment["torch_threads"])

    for cell in ("llm-cgd-standard", "vit-cgd-accum"):
        assert numbers(runs["serial"][cell]) == numbers(runs["xdist"][cell])
        assert runs["serial"][cell].environment["torch_threads"] == 1
        assert runs["two"][cell].environment["torch_threads"] == 2


@pytest.mark.parametrize(("environ", "threads"), [({}, 1), ({"OMP_NUM_THREADS": "3"}, 3),
                                                  ({"OMP_NUM_THREADS": "4,2"}, 4), ({"OMP_NUM_THREADS": " "}, 1)])
def test_the_default_thread_count_never_follows_the_machine(environ, threads):
    """$OMP_NUM_THREADS when it is set (its first level), else 1: never the core count."""
    assert default_threads(environ) == threads


def test_a_bad_omp_num_threads_is_a_usage_error():
    with pytest.raises(pytest.UsageError, match=r"\$OMP_NUM_THREADS many: expected a thread count"):
        default_threads({"OMP_NUM_THREADS": "many"})
    with pytest.raises(pytest.UsageError, match=r"must be in 1 … 1024, got 0"):
        default_threads({"OMP_NUM_THREADS": "0"})
