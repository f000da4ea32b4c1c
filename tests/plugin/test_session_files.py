"""What a session leaves besides its results: the last-session files only where gradeff cells were selected, and
pytest-benchmark's storage options refused under pytest-xdist, where they would write nothing."""

import pytest
from pytest_benchmark.logger import PytestBenchmarkWarning

PLUGIN = ("-p", "gradeff.pytest_plugin")


def test_a_session_without_gradeff_cells_leaves_no_files(pytester):
    """A project's own unit tests, run with gradeff installed: no results folder, no last-session files."""
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")
    pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    # (.benchmarks is pytest-benchmark's own storage folder, made in every session it is installed in.)
    assert sorted(p.name for p in pytester.path.iterdir() if p.name != ".benchmarks") == ["test_plain.py"]


@pytest.mark.parametrize("option", ["--benchmark-json={tmp}/bench.json", "--benchmark-autosave"])
def test_benchmark_storage_under_xdist_is_refused_with_the_reason(grid_pytester, option, monkeypatch):
    """-n 2 switches pytest-benchmark off: its storage options would write nothing, so the session stops at once,
    saying why and what to run instead; without -n the same selection is accepted."""
    # The sessions below run in this process: where this suite itself runs under -n, they must not read its
    # worker's environment as their own (pytest-benchmark and the plugin would take them for xdist workers).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    flag = option.format(tmp=grid_pytester.path)
    refused = grid_pytester.runpytest(*PLUGIN, "-n", "2", flag, "-k", "llm-adam-standard")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"ERROR: {flag.split('=')[0]}: pytest-benchmark switches itself off under "
                                  "pytest-xdist (-n 2)*Run without -n (one cell at a time)*--gradeff-results*"])
    assert not (grid_pytester.path / "bench.json").exists()
    # Without -n pytest-benchmark stays on (its storage step says that nothing ran: the run only collected).
    with pytest.warns(PytestBenchmarkWarning, match="Not saving anything, no benchmarks have been run"):
        accepted = grid_pytester.runpytest(*PLUGIN, flag, "-k", "llm-adam-standard", "--collect-only", "-q")
    assert accepted.ret == pytest.ExitCode.OK
    # Switched off on purpose, benchmark storage is not asked for: -n 2 runs.
    off = grid_pytester.runpytest(*PLUGIN, "-n", "2", flag, "--benchmark-disable", "-k", "llm-adam-standard",
                                  "--collect-only", "-q")
    assert off.ret == pytest.ExitCode.OK


def test_collecting_with_a_baseline_runs_no_gate_and_keeps_the_last_session(grid_pytester, tmp_path):
    """--collect-only (what the docs' commands test does) and --gradeff-dry-run run no cell: no verdict on cells
    that were never meant to run, and the previous session's files stay as they were."""
    results = tmp_path / "r.jsonl"
    last = tmp_path / "last-session.jsonl"
    last.write_text("kept\n")
    baseline = grid_pytester.path.parent / "baseline.jsonl"
    from tests.conftest import build_record

    baseline.write_text(build_record("llm-adam-standard").to_json() + "\n")
    for extra in (("--collect-only",), ("--gradeff-dry-run",)):
        outcome = grid_pytester.runpytest(*PLUGIN, "-k", "llm-adam-standard", f"--gradeff-results={results}",
                                          f"--gradeff-baseline={baseline}", *extra)
        assert outcome.ret == pytest.ExitCode.OK, outcome.stdout.str()[-2000:]
        assert "gradeff compare with" not in outcome.stdout.str()
    assert last.read_text() == "kept\n" and not (tmp_path / "last-session.cells").exists()
