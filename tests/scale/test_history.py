"""`gradeff history run` for real: two commits of this repository's own history (the last before the floors'
layout, which the worker reaches through gradeff.runner, and the first in it, through gradeff.cell.run) measured side
by side in a temporary clone, written to a history store, read back and rendered; the range's parsing."""

import subprocess
from pathlib import Path

import pytest

from gradeff.gate.history import METRICS, HistoryStore, slices_setting
from gradeff.report.history import build_history_view, render_history
from gradeff.scale.ab import ABSettings, RevisionError, select_cells
from gradeff.scale.history import MAX_REVISIONS, commits_in_range, find_change, measure_side_by_side, run_history
from tests.gate.injection import loader_source

CHECKOUT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> tuple[Path, str, str]:
    """A clone of this checkout, the commit that moved the runner to gradeff/cell/run.py, and its parent."""
    repo = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(CHECKOUT), str(repo)], check=True)
    added = _git(repo, "log", "--diff-filter=A", "--format=%H", "--", "gradeff/cell/run.py").split()
    if not added or _git(repo, "rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("this clone lacks the history before gradeff/cell/run.py (a shallow clone?)")
    moved = added[-1]
    return repo, _git(repo, "rev-parse", f"{moved}~1"), moved


def test_a_range_is_its_first_commit_and_every_one_after_it_oldest_first(clone):
    repo, before, moved = clone
    assert commits_in_range(repo, f"{before}..{moved}") == [before, moved]
    assert commits_in_range(repo, f"{before}~2..{moved}")[-3:] == [_git(repo, "rev-parse", f"{before}~1"), before,
                                                                   moved]
    assert commits_in_range(repo, moved) == [moved]
    with pytest.raises(RevisionError, match="is not an ancestor"):
        commits_in_range(repo, f"{moved}..{before}")
    with pytest.raises(ValueError, match=f"at most {MAX_REVISIONS} run side by side"):
        measure_side_by_side(repo, [moved] * (MAX_REVISIONS + 1), [], {}, ABSettings())


def test_past_commits_are_measured_side_by_side_stored_and_rendered(clone, tmp_path):
    repo, before, moved = clone
    cells = select_cells("main", ids=["llm-adam-standard"])
    config = {"profile": "tiny", "seed": 0, "threads": 1, "device": "cpu"}
    path = tmp_path / "history.sqlite"
    settings = ABSettings(rounds=3, slice_steps=4)
    with HistoryStore(path) as store:
        written = run_history(repo, [before, moved], cells, config, settings, store)
    # Filed apart from a session's grid figures: these losses come from 7 epochs of 4 batches.
    setting = slices_setting(rounds=3, warmup=1, slice_steps=4, clock="cpu")
    assert setting == "slices: 7 4-batch epochs, cpu clock"
    assert written == 2 * 4  # time, final loss, test loss, peak memory on each commit (no test accuracy: text)
    with HistoryStore(path) as store:
        (machine,) = store.machines()
        assert [c.commit for c in store.commits()] == [before, moved]
        assert store.commits()[1].message == _git(repo, "show", "-s", "--format=%s", moved)
        assert {key[4] for key in store.keys()} == {setting}
        times = store.series(machine, "llm-adam-standard", "time_per_step", setting=setting)
        assert len(times) == 2 and all(p.low < p.value < p.high for p in times)
        assert all(0.1 < p.value / times[0].value < 10 for p in times)  # one run, one machine: the same scale
        for metric in ("final_loss", "heldout_loss", "peak_bytes"):
            series = store.series(machine, "llm-adam-standard", metric, setting=setting)
            assert [p.commit.commit for p in series] == [before, moved] and all(p.value > 0 for p in series)
        view = build_history_view(store, generated_at="now")
    assert {t.metric for t in view.trends} == {METRICS[m].label for m in
                                               ("time_per_step", "final_loss", "heldout_loss", "peak_bytes")}
    page = render_history(view)
    assert "llm-adam-standard" in page and moved[:10] in page and "<script src" not in page


FAULT = loader_source("fault_plugin", '_load_fault_plugin().inject("lr")')


@pytest.mark.slow
def test_find_names_the_commit_that_moved_adams_learning_rate(tmp_path):
    """Three commits on top of this checkout's HEAD: one touching no code, one making Adam's rate 1 % higher, one
    touching no code again; find bisects the final loss of an Adam cell to the second, in three runs."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(CHECKOUT), str(repo)], check=True)
    commit = ["-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "--quiet", "-am"]
    notes = repo / "docs" / "gate.md"
    notes.write_text(notes.read_text(encoding="utf-8") + "\nA line.\n", encoding="utf-8")
    _git(repo, *commit, "a line of docs")
    run = repo / "gradeff" / "cell" / "run.py"
    run.write_text(run.read_text(encoding="utf-8") + FAULT, encoding="utf-8")
    _git(repo, *commit, "Adam's rate 1 % higher")
    notes.write_text(notes.read_text(encoding="utf-8") + "\nAnother line.\n", encoding="utf-8")
    _git(repo, *commit, "another line of docs")
    commits = commits_in_range(repo, "HEAD~3..HEAD")
    (cell,) = select_cells("main", ids=["llm-adam-standard"])
    config = {"profile": "tiny", "seed": 0, "threads": 1, "device": "cpu"}
    with HistoryStore(tmp_path / "h.sqlite") as store:
        found = find_change(repo, "final_loss", cell, commits, config, ABSettings(rounds=2, slice_steps=4),
                            store=store)
        assert store.commits()  # what it measured is kept
    assert found.changed and found.first_changed == commits[2] and found.last_unchanged == commits[1]
    assert len(found.runs) == 3  # 4 commits: the ends, then 2 halvings
