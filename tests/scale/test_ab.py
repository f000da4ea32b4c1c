"""`gradeff ab` for real: two worker processes on revisions of a temporary clone of this repository, one cell, a few
short rounds. Unchanged code passes with identical figures; every optimizer step made x3 slower (spinning, so the
numbers stay the same) is a time regression with identical figures. The worker's protocol and its refusals run
without training."""

import subprocess
import sys
from pathlib import Path

import pytest

from gradeff.gate.ab import BASE, CURRENT, REGRESSION
from gradeff.scale.ab import (
    ABSettings,
    RevisionError,
    Worker,
    WorkerError,
    cell_config,
    checkout,
    repository_root,
    resolve_revision,
    run_revisions,
    select_cells,
)
from tests.gate.injection import loader_source

# Their figures are times and meter readings: run while no other test does (tests/conftest.py).
pytestmark = pytest.mark.serial

CHECKOUT = Path(__file__).resolve().parents[2]
CELL = "llm-adam-standard"
# Short: 4 rounds of 4-batch slices (one accumulation block at the tiny profile: 4 optimizer steps of a standard
# cell). Enough to tell x3 from x1 under load; not a calibration (docs/gate.md).
QUICK = ABSettings(rounds=4, slice_steps=4)
CONFIG = {"profile": "tiny", "seed": 0, "threads": 1, "device": "cpu"}

SLOWED = loader_source("slowdown_plugin",
                       'optimizer_step = _load_slowdown_plugin().slowed(optimizer_step, 3.0, "spin")')


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> tuple[Path, str, str]:
    """A clone of this checkout's HEAD, its working tree at HEAD, and a commit on top that slows every step x3."""
    repo = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(CHECKOUT), str(repo)], check=True)
    base = _git(repo, "rev-parse", "HEAD")
    loop = repo / "gradeff" / "cell" / "loop.py"
    loop.write_text(loop.read_text(encoding="utf-8") + SLOWED, encoding="utf-8")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "--quiet", "-am", "slow steps x3")
    slowed = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "--quiet", base)
    return repo, base, slowed


def test_unchanged_code_passes_with_every_deterministic_figure_identical(clone):
    repo, base, _ = clone
    run = run_revisions(repo, base, None, select_cells("main", ids=[CELL]), CONFIG, QUICK)
    (result,) = run.results
    assert result.missing == "" and result.note == ""
    assert result.differences == ()  # the same code, the same machine: every loss and byte repeats
    assert result.time.verdict != REGRESSION
    m = result.time.measured
    assert m.rounds == 4 and m.low < m.ratio < m.high
    assert sorted({s.side for s in result.slices}) == [BASE, CURRENT] and len(result.slices) == 16
    assert all(s.steps == 4 and s.cpu > 0 for s in result.slices)
    assert not run.regressed and run.current == "the working tree"


@pytest.mark.slow
def test_a_slowdown_injected_in_a_commit_is_a_time_regression_with_the_same_numbers(clone):
    repo, base, slowed = clone
    run = run_revisions(repo, base, slowed, select_cells("main", ids=[CELL]), CONFIG, QUICK)
    (result,) = run.results
    assert result.time.verdict == REGRESSION and run.regressed
    assert result.time.measured.low > 2.0  # x3 per step, measured on the CPU clock
    assert result.differences == ()  # spinning changes the time, never a figure


def test_a_revision_that_names_no_commit_is_refused_with_its_name(clone):
    repo, _, _ = clone
    with pytest.raises(RevisionError, match="'no-such-branch' names no commit"):
        resolve_revision(repo, "no-such-branch")
    with pytest.raises(RevisionError, match="not inside a git working tree"):
        repository_root(Path("/"))


def test_a_checkout_is_a_worktree_of_the_revision_removed_afterwards(clone):
    repo, base, slowed = clone
    with checkout(repo, slowed) as tree:
        assert "optimizer_step = _load_slowdown_plugin()" in (tree / "gradeff" / "cell" / "loop.py").read_text()
        assert _git(tree, "rev-parse", "HEAD") == slowed
    assert not tree.exists()
    assert str(tree) not in _git(repo, "worktree", "list")


def _fake_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_a_revision_older_than_the_slice_protocol_is_refused_by_name(tmp_path):
    tree = _fake_tree(tmp_path / "tree", {"gradeff/__init__.py": ""})
    with pytest.raises(WorkerError, match="neither gradeff.cell.run nor gradeff.runner"):
        Worker(tree, "old", tmp_path / "worker.log")


# A revision's three names, stand-ins that train nothing: the protocol around them.
_STANDIN = {
    "gradeff/__init__.py": "",
    "gradeff/cell/__init__.py": "",
    "gradeff/studies/__init__.py": "",
    "gradeff/cell/config.py": ("import dataclasses\n@dataclasses.dataclass\nclass RunConfig:\n"
                               "    profile: str = 'tiny'\n"),
    "gradeff/studies/grid.py": "import dataclasses\n@dataclasses.dataclass\nclass Cell:\n    model: str\n",
    "gradeff/cell/run.py": """
import json, types

class Record:
    def __init__(self, epochs):
        self.epochs = epochs
    def to_json(self):
        return json.dumps({"epochs": self.epochs})

def run_cell(cell, config, timer):
    done = []
    timer(lambda: done.append(1) or types.SimpleNamespace(seconds=0.5, optimizer_steps=5), 3, lambda: None)
    return Record(len(done))
""",
}


def test_the_worker_serves_slices_inside_the_cell_and_answers_its_record_at_close(tmp_path):
    tree = _fake_tree(tmp_path / "tree", _STANDIN)
    worker = Worker(tree, "stand-in", tmp_path / "worker.log")
    try:
        assert worker.layout == "cell"
        worker.send({"op": "open", "cell": {"model": "m"}, "config": {"profile": "tiny"}})
        assert worker.receive() == {"ok": True, "epochs": 3}
        answer = worker.ask({"op": "slice"})
        assert answer["seconds"] == 0.5 and answer["steps"] == 5 and answer["cpu"] >= 0
        with pytest.raises(WorkerError, match="expected slice or close, got 'open'"):
            worker.ask({"op": "open"})
        worker.ask({"op": "slice"})
        assert worker.ask({"op": "close"}) == {"ok": True, "ended": True, "record": {"epochs": 2}}
        with pytest.raises(WorkerError, match="RunConfig has no field seed"):
            worker.ask({"op": "open", "cell": {"model": "m"}, "config": {"seed": 1}})
        with pytest.raises(WorkerError, match="unknown request 'dance'; expected hello, open or quit"):
            worker.ask({"op": "dance"})
    finally:
        worker.stop()


def test_the_worker_imports_the_revisions_gradeff_not_the_environments(tmp_path):
    """The installed (editable) gradeff is on the path too: the revision's tree must win, or the run compares the
    working tree with itself."""
    tree = _fake_tree(tmp_path / "tree", _STANDIN)
    worker = Worker(tree, "stand-in", tmp_path / "worker.log")
    try:
        hello = worker.ask({"op": "hello"})
        assert Path(hello["package"]).resolve() == (tree / "gradeff").resolve()
    finally:
        worker.stop()


def test_gradeff_ab_refuses_a_bad_selection_or_revision_before_any_worker_starts(tmp_path):
    def ab(*args):
        return subprocess.run([sys.executable, "-m", "gradeff", "ab", *args], cwd=CHECKOUT, capture_output=True,
                              text=True, timeout=120)

    unknown = ab("HEAD", "--cells", "llm-adam-nothing")
    assert unknown.returncode == 2 and "no cell llm-adam-nothing" in unknown.stderr
    assert "llm-adam-standard" in unknown.stderr  # the valid ones are named
    bad = ab("no-such-revision", "--cells", CELL, "--rounds", "2")
    assert bad.returncode == 2 and "'no-such-revision' names no commit" in bad.stderr
    rounds = ab("HEAD", "--cells", CELL, "--rounds", "1")
    assert rounds.returncode == 2 and "at least 2 rounds" in rounds.stderr


def test_a_slice_is_an_epoch_cut_to_whole_batches_and_settings_are_checked():
    (cell,) = select_cells("main", ids=[CELL])
    assert cell_config(cell, CONFIG, 4) == {**CONFIG, "train_samples": 4 * 32}  # the tiny llm's batch is 32
    assert cell_config(cell, CONFIG, None) == CONFIG
    with pytest.raises(ValueError, match="at least 2 rounds"):
        ABSettings(rounds=1)
    with pytest.raises(ValueError, match="unknown clock 'sundial'; clocks: cpu, wall"):
        ABSettings(clock="sundial")
    with pytest.raises(KeyError, match="no cell llm-adam-nothing in this selection of grid main"):
        select_cells("main", {"optimizer": ["adam"]}, ids=["llm-adam-nothing"])
