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
def test_benchmark_storage_under_xdist_is_refused_with_the_reason(grid_pytester, option):
    """-n 2 switches pytest-benchmark off: its storage options would write nothing, so the session stops at once,
    saying why and what to run instead; without -n the same selection is accepted."""
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
