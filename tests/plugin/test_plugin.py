"""The pytest plugin end to end: options, records, benchmark JSON, summary, xdist."""

import fnmatch
import json
from pathlib import Path

import pytest

from gradeff.records.store import read_records

PLUGIN = ("-p", "gradeff.pytest_plugin")


def test_cell_run_writes_record_benchmark_rounds_and_summary(grid_pytester, monkeypatch):
    """One cell: its record is in the results file, each epoch is a benchmark round, the summary shows it."""
    # Run from an xdist worker, the inner session would inherit the worker's variables and pytest-benchmark
    # would switch itself off as under xdist.
    for variable in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(variable, raising=False)
    results = grid_pytester.path / "out" / "r.jsonl"
    bench = grid_pytester.path / "bench.json"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, "-k", "llm-adam-standard", "--gradeff-epochs", "2", f"--gradeff-results={results}",
        f"--benchmark-json={bench}")
    outcome.assert_outcomes(passed=1)
    (record,) = list(read_records(results))
    assert record.cell == "llm-adam-standard" and record.status == "ok" and len(record.epochs) == 2
    report = json.loads(bench.read_text())
    assert report["machine_info"]["gradeff"]["torch"] == record.environment["torch"]
    (entry,) = report["benchmarks"]
    assert entry["stats"]["rounds"] == 2 and entry["group"] == "llm"
    assert entry["extra_info"]["status"] == "ok"
    assert json.loads(entry["extra_info"]["record"])["cell"] == "llm-adam-standard"
    outcome.stdout.fnmatch_lines(["*gradeff: 1 cells, profile tiny*", "llm-adam-standard*ok*", "statuses: ok 1*"])


def test_records_are_written_under_xdist(grid_pytester):
    """With -n 2 (pytest-benchmark off) both cells are recorded and summarised by the controller."""
    results = grid_pytester.path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, "-n", "2", "-k", "vit-sgd", "--gradeff-epochs", "1", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=3)
    records = list(read_records(results))
    assert sorted(r.cell for r in records) == ["vit-sgd-accum", "vit-sgd-checkpoint", "vit-sgd-standard"]
    assert len({r.session for r in records}) == 1
    outcome.stdout.fnmatch_lines(["*gradeff: 3 cells*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gradeff-profile", "huge"), "*invalid choice: 'huge' (choose from 'tiny', 'small', 'paper')*"),
        (("--gradeff-epochs", "0"), "*--gradeff-epochs: must be >= 1, got 0*"),
        (("--gradeff-seed", "x"), "*expected a seed (an integer in 0 … 4294967295)*"),
        (("--gradeff-seed", "-3"),
         "*--gradeff-seed: must be in 0 … 4294967295 (numpy seeds are unsigned 32-bit), got -3*"),
        (("--gradeff-seed", "99999999999999999999"),
         "*--gradeff-seed: must be in 0 … 4294967295*got 99999999999999999999*"),
        (("--gradeff-seeds", "0,4294967296"), "*--gradeff-seeds 0,4294967296: seeds must be in 0 … 4294967295*"),
        (("--gradeff-seed", "4294967295", "--gradeff-seeds", "2"),
         "*seeds 4294967295 … 4294967296 go past 4294967295*"),
        (("--gradeff-threads", "0"), "*--gradeff-threads: must be in 1 … 1024, got 0*"),
        (("--gradeff-sample-hz", "inf"), "*--gradeff-sample-hz: expected a finite number, got 'inf'*"),
        (("--gradeff-sample-hz", "5000"), "*--gradeff-sample-hz: must be in (0, 1000] Hz, got 5000*"),
        (("--gradeff-grid-intensity", "inf"), "*--gradeff-grid-intensity: expected a finite number*"),
        (("--gradeff-grid-intensity", "-1"), "*--gradeff-grid-intensity: must be >= 0, got -1*"),
        (("--gradeff-memory-budget", "lots"), "*expected a size like 8MiB, 2GiB*units: B, KiB, MiB*"),
        (("--gradeff-memory-margin", "1.5"), "*--gradeff-memory-margin: must be in [[]0, 1), got 1.5*"),
        (("--gradeff-device", "tpu"), "*unknown device 'tpu'; valid devices: auto, cpu, cuda*"),
        (("--gradeff-workers", "-1"), "*--gradeff-workers: must be in 0 … 256, got -1*"),
        (("--gradeff-compile=tvm",),
         "*--gradeff-compile: invalid choice: 'tvm' (choose from 'inductor', 'aot_eager_decomp_partition')*"),
        (("--gradeff-compare-args", "--time-ratio 3"), "*--gradeff-compare-args: given without --gradeff-baseline*"),
    ],
)
def test_bad_options_are_usage_errors(grid_pytester, args, message):
    """Bad option values stop the run before any cell and name the bad value and the valid choices."""
    outcome = grid_pytester.runpytest(*PLUGIN, *args)
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    assert any(fnmatch.fnmatch(line, message) for line in outcome.errlines + outcome.outlines)


@pytest.mark.parametrize(("compare_args", "message"), [
    ("--bogus", "*--gradeff-compare-args '--bogus': unrecognized arguments: --bogus*"),
    ("--ignore nope", "*unknown metric [[]'nope']; metrics: status, final_loss*"),
    ("--time-ratio x", "*time_per_epoch:ratio=x*"),
])
def test_bad_compare_args_are_refused_before_any_cell(grid_pytester, compare_args, message):
    """Gate options that `gradeff compare` would reject stop the session first, so the gate cannot silently not run."""
    baseline = Path(__file__).parents[2] / "baselines" / "tiny-cpu.jsonl"
    outcome = grid_pytester.runpytest(*PLUGIN, f"--gradeff-baseline={baseline}",
                                      f"--gradeff-compare-args={compare_args}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    assert any(fnmatch.fnmatch(line, message) for line in outcome.errlines + outcome.outlines)


def test_bad_paths_are_refused_before_any_cell(grid_pytester):
    """A folder as results or report file, a missing or empty baseline, a file as cache folder: usage errors."""
    folder = grid_pytester.mkdir("a_folder")
    empty = grid_pytester.path / "empty.jsonl"
    empty.write_text("")
    a_file = grid_pytester.path / "a_file.txt"
    a_file.write_text("x")
    cases = [
        (("--gradeff-results", str(folder)), "*--gradeff-results*a_folder: is a folder; give a file path*"),
        (("--gradeff-report", str(folder)), "*--gradeff-report*a_folder: is a folder; give a file path*"),
        (("--gradeff-baseline", str(grid_pytester.path / "absent.jsonl")), "*--gradeff-baseline*no such file*"),
        (("--gradeff-baseline", str(empty)), "*--gradeff-baseline*empty.jsonl: no records (an empty file)*"),
        (("--gradeff-cache", str(a_file)), "*--gradeff-cache*a_file.txt: is a file; give a folder*"),
    ]
    for args, message in cases:
        outcome = grid_pytester.runpytest(*PLUGIN, "-k", "vit-sgd-standard", *args)
        assert outcome.ret == pytest.ExitCode.USAGE_ERROR, args
        assert any(fnmatch.fnmatch(line, message) for line in outcome.errlines + outcome.outlines), args


def test_cuda_without_gpu_is_a_usage_error(grid_pytester):
    """--gradeff-device cuda on a machine without a GPU is refused up front."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    outcome = grid_pytester.runpytest(*PLUGIN, "--gradeff-device", "cuda")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*no usable CUDA GPU*"])


def test_unwritable_results_path_is_a_usage_error(grid_pytester, tmp_path):
    """A results path under a file (not a folder) is refused before any cell runs."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    outcome = grid_pytester.runpytest(*PLUGIN, f"--gradeff-results={blocker}/r.jsonl")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-results*cannot create its folder*"])


def test_missing_report_template_folder_is_a_usage_error(grid_pytester, tmp_path, monkeypatch):
    """$GRADEFF_TEMPLATES naming no folder is refused before any cell runs when an HTML report is asked for."""
    monkeypatch.setenv("GRADEFF_TEMPLATES", str(tmp_path / "missing"))
    outcome = grid_pytester.runpytest(*PLUGIN, f"--gradeff-report={tmp_path}/r.html")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-report: template folder*missing (from $GRADEFF_TEMPLATES) is not a "
                                  "folder*"])


def test_baseline_gate_fails_the_session_on_a_regression(grid_pytester):
    """--gradeff-baseline: same loss passes; a baseline with a better loss makes the session fail."""
    results = grid_pytester.path / "r.jsonl"
    args = (*PLUGIN, "-k", "llm-sgd-standard", "--gradeff-epochs", "1", f"--gradeff-results={results}",
            "--benchmark-disable")
    grid_pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    baseline = grid_pytester.path / "baseline.jsonl"
    baseline.write_text(results.read_text())
    args = (*args, "--gradeff-compare-args=--ignore time_per_epoch")
    same = grid_pytester.runpytest_subprocess(*args, f"--gradeff-baseline={baseline}")
    assert same.ret == 0
    same.stdout.fnmatch_lines(["*gradeff compare with*: no regression*"])
    record = json.loads(baseline.read_text())
    record["summary"]["final_loss"] *= 0.9
    better = grid_pytester.path / "better.jsonl"
    better.write_text(json.dumps(record) + "\n")
    worse = grid_pytester.runpytest_subprocess(*args, f"--gradeff-baseline={better}")
    assert worse.ret == pytest.ExitCode.TESTS_FAILED
    worse.stdout.fnmatch_lines(["*gradeff compare with*: REGRESSION*", "*final_loss*regression*"])


def test_a_benchmark_outside_a_cell_trains_on_the_sessions_thread_count(pytester):
    """``gradeff_threads`` gives a test torch's --gradeff-threads for its duration (not one thread per core)."""
    pytester.makepyfile(test_threads="""
        import pytest
        import torch

        pytestmark = pytest.mark.usefixtures("gradeff_threads")

        def test_inside(gradeff_threads, pytestconfig):
            assert torch.get_num_threads() == gradeff_threads == pytestconfig.getoption("gradeff_threads")
    """)
    for threads in ("1", "3"):
        pytester.runpytest_subprocess(*PLUGIN, "--gradeff-threads", threads).assert_outcomes(passed=1)


def test_a_cell_that_ends_before_training_leaves_no_benchmark_warning(grid_pytester, monkeypatch):
    """A budget out of reach (8 MiB: below Vim-S's peak with every block checkpointed) ends oom before training, a
    baseline without weights ends skipped: neither times an epoch, so pytest-benchmark's fixture is never requested
    and cannot warn that it was unused; both records are written."""
    for variable in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(variable, raising=False)
    results = grid_pytester.path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(*PLUGIN, "-k", "paligemma-zero_shot-dtd or vim_s-lora-budget-cifar100",
                                                 "--gradeff-memory-budget=8MiB", f"--gradeff-results={results}",
                                                 "-W", "default")
    statuses = {record.cell: record.status for record in read_records(results)}
    assert statuses == {"paligemma-zero_shot-dtd": "skipped", "vim_s-lora-budget-cifar100": "oom"}
    text = outcome.stdout.str()
    assert "PytestBenchmarkWarning" not in text and "was not used" not in text, text[-2000:]
