"""--gradeff-ab REV and --gradeff-history PATH: checked before any cell, the A/B's verdict failing the session, the
session's figures filed under the commit checked out."""

import subprocess

import pytest

import gradeff.pytest.ab
from gradeff.gate.ab import REGRESSION, CellAB, RatioInterval, TimeVerdict
from gradeff.gate.history import HistoryStore
from gradeff.scale.ab import ABRun, ABSettings

PLUGIN = ("-p", "gradeff.pytest_plugin")


def _git(path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo_pytester(grid_pytester):
    """The grid's test modules in a git repository of one commit."""
    _git(grid_pytester.path, "init", "--quiet")
    _git(grid_pytester.path, "add", "-A")
    _git(grid_pytester.path, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "--quiet", "-m",
         "the grids")
    return grid_pytester


def test_an_ab_revision_that_names_no_commit_is_refused_before_any_cell(repo_pytester):
    outcome = repo_pytester.runpytest(*PLUGIN, "--gradeff-ab", "no-such-branch")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-ab no-such-branch: 'no-such-branch' names no commit*"])


def test_an_ab_run_cannot_share_a_session_with_a_baseline_or_workers(repo_pytester, request):
    baseline = request.config.rootpath / "baselines" / "tiny-cpu.jsonl"
    outcome = repo_pytester.runpytest(*PLUGIN, "--gradeff-ab", "HEAD", f"--gradeff-baseline={baseline}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-ab runs the cells side by side*give one of them*"])
    outcome = repo_pytester.runpytest(*PLUGIN, "--gradeff-ab", "HEAD", "-n", "1")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-ab runs its own two worker processes*without -n*"])


def test_an_ab_session_hands_its_cells_to_the_ab_and_fails_on_its_regression(repo_pytester, monkeypatch):
    """The session's selection (-k) is what runs side by side; no cell runs in the session itself; a regressed
    cell fails it and the table is printed."""
    asked = {}

    def run_revisions(repo, base, current, cells, config, settings, *, echo):
        asked.update(repo=repo, base=base, current=current, cells=[c.id for c in cells], config=config)
        echo("llm-adam-standard: x1.300 (x1.200 - x1.400) regression")
        time = TimeVerdict(verdict=REGRESSION, threshold=0.03, measured=RatioInterval(1.3, 1.2, 1.4, 16),
                           detectable=1.1)
        return ABRun(base="HEAD (abc)", current="the working tree", settings=ABSettings(), config=config,
                     results=(CellAB(cell=cells[0].id, time=time),), seconds=1.0)

    monkeypatch.setattr(gradeff.pytest.ab, "run_revisions", run_revisions)
    results = repo_pytester.path / "r.jsonl"
    outcome = repo_pytester.runpytest(*PLUGIN, "-k", "test_grid and llm-adam-standard", "--gradeff-ab", "HEAD",
                                      f"--gradeff-results={results}")
    assert outcome.ret == pytest.ExitCode.TESTS_FAILED
    assert asked["base"] == "HEAD" and asked["current"] is None and asked["cells"] == ["llm-adam-standard"]
    assert asked["repo"] == repo_pytester.path and asked["config"]["profile"] == "tiny"
    outcome.stdout.fnmatch_lines(["*gradeff ab against HEAD*", "*llm-adam-standard*x1.300*REGRESSION*"])
    assert not results.exists()  # nothing trained in the session itself
    assert not (repo_pytester.path / "results" / "last-session.jsonl").exists()


def test_a_history_path_that_is_not_a_store_is_refused_before_any_cell(grid_pytester):
    notes = grid_pytester.path / "notes.sqlite"
    notes.write_text("these are notes, not a database " * 10)
    outcome = grid_pytester.runpytest(*PLUGIN, f"--gradeff-history={notes}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-history*not a gradeff history store*"])
    outcome = grid_pytester.runpytest(*PLUGIN, f"--gradeff-history={grid_pytester.path}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-history*is a folder*"])


def test_a_session_files_its_figures_under_the_commit_checked_out(repo_pytester):
    store = repo_pytester.path / "history.sqlite"
    commit = _git(repo_pytester.path, "rev-parse", "HEAD")
    outcome = repo_pytester.runpytest_subprocess(
        *PLUGIN, "-k", "test_grid and llm-sgd-standard", "--gradeff-epochs", "2", "--benchmark-disable",
        f"--gradeff-results={repo_pytester.path / 'r.jsonl'}", f"--gradeff-history={store}")
    outcome.assert_outcomes(passed=1)
    outcome.stdout.fnmatch_lines([f"*gradeff history: 4 figures of 1 cells added to*{commit[:10]}*"])
    with HistoryStore(store) as history:
        (machine,) = history.machines()
        assert [c.commit for c in history.commits()] == [commit]
        assert {key[3] for key in history.keys()} == {"time_per_step", "final_loss", "heldout_loss", "peak_bytes"}
        (time,) = history.series(machine, "llm-sgd-standard", "time_per_step")
        assert time.low < time.value < time.high  # over the session's two epochs
