"""The history store (SQLite round trip), change points on constructed series, the bisection of a constructed
history, and the comparable time estimates of an interleaved run (gradeff/gate/history.py)."""

import math
import random
import sqlite3
from dataclasses import replace

import pytest

from gradeff.gate.ab import Slice, balanced_order
from gradeff.gate.change_points import change_points
from gradeff.gate.history import (
    Commit,
    Estimate,
    HistoryStore,
    Measurement,
    Point,
    bisect_change,
    interleaved_estimates,
    machine_of,
    measurements_of_record,
)
from tests.conftest import build_record


def _commit(i: int) -> Commit:
    return Commit(f"{i:040x}", f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00", f"change {i}")


def _series(values, *, rel_half_width: float | None = 0.03) -> list[Point]:
    return [Point(commit=_commit(i), value=v,
                  low=None if rel_half_width is None else v * (1 - rel_half_width),
                  high=None if rel_half_width is None else v * (1 + rel_half_width)) for i, v in enumerate(values)]


def test_the_store_keeps_what_it_was_given_in_commit_order_and_a_rerun_replaces_its_row(tmp_path):
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store:
        for i in (2, 0, 1):  # added out of order
            store.add_commit(_commit(i))
            store.add([Measurement(commit=_commit(i).commit, machine="m", cell="llm-adam-standard", seed=0,
                                   metric="time_per_step", value=0.01 * (i + 1), low=0.009, high=0.011, run="r1")])
        store.add_machine("m", "cpu=AMD EPYC; torch=2.13.0")
    with HistoryStore(path) as store:
        series = store.series("m", "llm-adam-standard", "time_per_step")
        assert [p.commit.message for p in series] == ["change 0", "change 1", "change 2"]
        assert [p.value for p in series] == pytest.approx([0.01, 0.02, 0.03])
        assert store.machines() == {"m": "cpu=AMD EPYC; torch=2.13.0"}
        store.add([Measurement(commit=_commit(1).commit, machine="m", cell="llm-adam-standard", seed=0,
                               metric="time_per_step", value=0.5, run="r2")])
        again = store.measurement(_commit(1).commit, "m", "llm-adam-standard", "time_per_step")
        assert again.value == 0.5 and again.run == "r2" and again.low is None
        assert store.keys() == [("m", "llm-adam-standard", 0, "time_per_step", "grid")]
        # The same figure measured in another setting (short slices) is a row of its own, a series of its own.
        store.add([Measurement(commit=_commit(1).commit, machine="m", cell="llm-adam-standard", seed=0,
                               metric="time_per_step", value=0.7, setting="slices: 33 4-batch epochs, cpu clock")])
        assert store.measurement(_commit(1).commit, "m", "llm-adam-standard", "time_per_step").value == 0.5
        assert len(store.keys()) == 2 and len(store.series("m", "llm-adam-standard", "time_per_step")) == 3
        assert [c.commit for c in store.commits()] == [_commit(i).commit for i in range(3)]


def test_the_store_refuses_unknown_metrics_non_finite_figures_and_files_that_are_not_a_store(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite") as store:
        with pytest.raises(ValueError, match="unknown metric 'speed'; metrics: time_per_step, final_loss"):
            store.add([Measurement(commit="c", machine="m", cell="x", seed=0, metric="speed", value=1.0)])
        with pytest.raises(ValueError, match="nan is not a finite figure"):
            store.add([Measurement(commit="c", machine="m", cell="x", seed=0, metric="final_loss", value=math.nan)])
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database at all, just words " * 20)
    with pytest.raises(ValueError, match="not a gradeff history store"):
        HistoryStore(text)
    newer = tmp_path / "newer.sqlite"
    HistoryStore(newer).close()
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ValueError, match="history schema version 99; this gradeff reads 1"):
        HistoryStore(newer)
    with pytest.raises(ValueError, match="is a folder"):
        HistoryStore(tmp_path)


def test_a_record_becomes_rows_for_what_it_measured_and_nothing_for_what_it_did_not():
    record = build_record(losses=(2.0, 1.5), seconds=(0.8, 0.8), meters={"memory": {"peak_bytes": 4096}},
                          environment={"cpu": "AMD EPYC", "cpu_count": 2, "torch": "2.13.0", "torch_threads": 1})
    machine, description = machine_of(record)
    assert len(machine) == 12 and "cpu=AMD EPYC" in description and "torch_threads=1" in description
    rows = {m.metric: m for m in measurements_of_record(record, commit="c", machine=machine, run="s", source="t")}
    assert rows["time_per_step"].value == pytest.approx(0.1)  # 0.8 s over 8 steps
    assert rows["final_loss"].value == 1.5 and rows["peak_bytes"].value == 4096
    assert "heldout_loss" not in rows  # the record has no test split: no row, never a 0
    failed = replace(record, status="diverged")
    assert "time_per_step" not in {m.metric for m in measurements_of_record(failed, commit="c", machine=machine,
                                                                            run="s", source="t")}
    # Another CPU, another machine: its series never mix.
    other = replace(record, environment={**record.environment, "cpu": "Intel Xeon"})
    assert machine_of(other)[0] != machine


def test_a_step_in_a_noisy_series_is_found_at_its_commit_with_its_size_and_interval():
    rnd = random.Random(7)
    values = [0.030 * (1.2 if i >= 9 else 1.0) * math.exp(rnd.gauss(0, 0.015)) for i in range(16)]
    (found,) = change_points(_series(values), log=True)
    assert found.index == 9 and found.commit == _commit(9)
    assert found.low < 1.2 < found.high and found.size == pytest.approx(1.2, rel=0.05)


def test_a_flat_noisy_series_shows_no_step_in_nearly_every_draw():
    """The penalty (5 ln n, chi-square units) against Gaussian noise whose size the intervals give, or understate
    twofold: over 80 flat series, at most 6 with a change point (the module's simulation: under 1 % and 3 - 11 %)."""
    rnd = random.Random(11)
    with_steps = 0
    for _ in range(80):
        n = rnd.choice([6, 12, 25])
        extra = rnd.choice([0.0, 0.03])  # noise the points' intervals do not know about
        values = [0.03 * math.exp(rnd.gauss(0, math.hypot(0.015, extra))) for _ in range(n)]
        with_steps += bool(change_points(_series(values, rel_half_width=0.03), log=True))
    assert with_steps <= 6


def test_points_are_weighed_by_their_intervals():
    """One point far off: a change if it was measured tightly (it says the level moved and came back), none if its
    own interval says it was a noisy measurement."""
    values = [1.0] * 6 + [1.3] + [1.0] * 6
    tight = [replace(p, low=p.value * 0.999, high=p.value * 1.001) for p in _series(values)]
    assert [c.index for c in change_points(tight, log=True)] == [6, 7]
    loose = list(tight)
    loose[6] = replace(loose[6], low=0.6, high=2.6)
    assert change_points(loose, log=True) == []


def test_an_exact_figure_changes_at_any_move_beyond_the_gate_tolerance_and_not_within_it():
    losses = [1.5] * 5 + [1.5001] * 5
    (found,) = change_points(_series(losses, rel_half_width=None), log=False)
    assert found.index == 5 and found.size == pytest.approx(1e-4) and found.low < 1e-4 < found.high
    assert change_points(_series([1.5] * 5 + [1.5 * (1 + 1e-8)] * 5, rel_half_width=None), log=False) == []
    assert change_points(_series([1.5, 1.4]), log=False) == []  # too short to say


def _history(n: int, step_at: int, after: float, *, noise: float = 0.01, seed: int = 0):
    rnd = random.Random(seed)
    commits = [f"c{i:02d}" for i in range(n)]
    calls = []

    def measure(revisions):
        calls.append(list(revisions))
        level = math.exp(rnd.uniform(-0.5, 0.5))  # this run's load: shared by every commit it measures
        estimates = {}
        for c in revisions:
            v = level * (after if commits.index(c) >= step_at else 1.0) * math.exp(rnd.gauss(0, noise))
            estimates[c] = Estimate(v, v * 0.98, v * 1.02)
        return estimates

    return commits, measure, calls


@pytest.mark.parametrize("step_at", [1, 6, 11, 16])
def test_find_bisects_a_constructed_history_to_the_commit_that_changed_in_log2_runs(step_at):
    commits, measure, calls = _history(17, step_at, 1.3)
    found = bisect_change(commits, measure, log=True)
    assert found.first_changed == commits[step_at] and found.last_unchanged == commits[step_at - 1]
    assert len(calls) <= 1 + math.ceil(math.log2(16))
    # Every run after the first measures the middle with both current ends, side by side.
    assert all(len(c) == 3 for c in calls[1:]) and calls[0] == [commits[0], commits[-1]]


def test_find_on_an_exact_figure_a_range_whose_ends_agree_and_a_range_too_short():
    commits = [f"c{i}" for i in range(9)]
    losses = {c: (1.5 if i < 4 else 1.25) for i, c in enumerate(commits)}
    found = bisect_change(commits, lambda revs: {c: Estimate(losses[c], losses[c], losses[c]) for c in revs},
                          log=False)
    assert found.first_changed == "c4" and found.changed
    same = bisect_change(commits, lambda revs: {c: Estimate(1.5, 1.5, 1.5) for c in revs}, log=False)
    assert not same.changed and same.first_changed == "" and len(same.runs) == 1
    overlapping = bisect_change(commits, lambda revs: {c: Estimate(1.0, 0.9, 1.1) for c in revs}, log=True)
    assert not overlapping.changed
    with pytest.raises(ValueError, match="at least two commits"):
        bisect_change(commits[:1], lambda revs: {}, log=False)


def test_interleaved_estimates_compare_commits_whatever_load_each_round_carried():
    truth = {"a": 0.02, "b": 0.024, "c": 0.018}
    rnd = random.Random(3)
    slices = []
    rounds = 6
    loads = {r: math.exp(rnd.uniform(-1, 1)) for r in range(rounds)}
    for r, side in balanced_order(list(truth), rounds):
        seconds = truth[side] * loads[r] * math.exp(rnd.gauss(0, 0.01)) * 10
        slices.append(Slice(side, r, seconds, 10, cpu=seconds))
    estimates = interleaved_estimates(slices)
    assert estimates["b"].value / estimates["a"].value == pytest.approx(1.2, rel=0.03)
    assert estimates["c"].value / estimates["a"].value == pytest.approx(0.9, rel=0.03)
    assert all(e.low < e.value < e.high for e in estimates.values())
    assert interleaved_estimates([s for s in slices if s.side == "a"]) == {}  # one side: nothing to compare
