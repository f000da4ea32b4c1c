"""Judging an interleaved A/B run: the balanced order, the paired ratio and its interval, the verdict, and the exact
comparison of deterministic figures (gradeff/gate/ab.py). The runs themselves: tests/scale/test_ab.py."""

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradeff.gate.ab import (
    BASE,
    CURRENT,
    NOT_COMPARED,
    OK,
    REGRESSION,
    CellAB,
    Slice,
    TimeVerdict,
    ab_lines,
    abba_order,
    balanced_order,
    exact_differences,
    judge_time,
    minimum_detectable,
    round_log_ratios,
)
from gradeff.gate.ab import IMPROVEMENT as IMPROVED
from gradeff.records.results import EpochRecord
from tests.conftest import build_record


def _slices(ratio: float, rounds: int, *, noise: float = 0.02, load: float = 0.5, seed: int = 0) -> list[Slice]:
    """Slices of an A/B in ABBA order: the current side ``ratio`` times slower, each round under its own load (a
    factor on both sides), each slice with its own noise."""
    rnd = random.Random(seed)
    slices = []
    loads = {r: math.exp(rnd.uniform(-load, load)) for r in range(rounds)}
    for r, side in abba_order(rounds):
        base = 0.03 * loads[r] * math.exp(rnd.gauss(0, noise))
        seconds = base * (ratio if side == CURRENT else 1.0) * 24
        slices.append(Slice(side, r, seconds, 24, cpu=seconds * 0.9))
    return slices


def test_abba_runs_each_side_twice_a_round_mirrored_and_alternates_who_goes_first():
    order = abba_order(4)
    assert [side for _, side in order[:8]] == [BASE, CURRENT, CURRENT, BASE, CURRENT, BASE, BASE, CURRENT]
    assert [r for r, _ in order] == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    with pytest.raises(ValueError, match="at least one round"):
        abba_order(0)


@settings(deadline=None)
@given(sides=st.integers(2, 6), rounds=st.integers(1, 30))
def test_a_balanced_order_gives_every_side_the_same_mean_position_in_every_round(sides, rounds):
    """The law that makes a linear drift in load cancel: within a round each side's two slices sit symmetrically
    around the round's middle; over ``sides`` rounds each side goes first once."""
    labels = [f"s{i}" for i in range(sides)]
    order = balanced_order(labels, rounds)
    assert len(order) == 2 * sides * rounds
    for r in range(rounds):
        sequence = [side for round_, side in order if round_ == r]
        assert sequence == sequence[::-1]  # mirrored
        positions = {label: [i for i, side in enumerate(sequence) if side == label] for label in labels}
        assert all(len(p) == 2 and sum(p) == len(sequence) - 1 for p in positions.values())
    firsts = [next(side for round_, side in order if round_ == r) for r in range(rounds)]
    if rounds >= sides:
        assert set(firsts[:sides]) == set(labels)


def test_a_balanced_order_refuses_a_side_named_twice():
    with pytest.raises(ValueError, match="distinct sides"):
        balanced_order(["a", "a"], 2)


@settings(deadline=None)  # the first example imports scipy
@given(ratio=st.floats(0.5, 2.0), loads=st.lists(st.floats(0.2, 5.0), min_size=2, max_size=8))
def test_a_load_that_falls_on_both_sides_of_a_round_leaves_its_ratio_alone(ratio, loads):
    """Pairing: a factor that multiplies every slice of a round (the machine's load then) cancels in the round's
    ratio, however large and however it changes from round to round."""
    slices = []
    for r, side in abba_order(len(loads)):
        seconds = 0.1 * loads[r] * (ratio if side == CURRENT else 1.0)
        slices.append(Slice(side, r, seconds, 10, cpu=seconds))
    for log_ratio in round_log_ratios(slices):
        assert log_ratio == pytest.approx(math.log(ratio), abs=1e-9)
    verdict = judge_time(slices, 0.05)
    assert verdict.measured.ratio == pytest.approx(ratio)


def test_a_slowdown_beyond_the_threshold_is_a_regression_and_unchanged_code_is_not():
    slowed = judge_time(_slices(1.25, 12), threshold=0.05)
    assert slowed.verdict == REGRESSION and slowed.measured.low > 1.05
    assert slowed.measured.low < 1.25 < slowed.measured.high
    unchanged = judge_time(_slices(1.0, 12, seed=1), threshold=0.05)
    assert unchanged.verdict == OK and unchanged.measured.low < 1.0 < unchanged.measured.high
    faster = judge_time(_slices(0.7, 12, seed=2), threshold=0.05)
    assert faster.verdict == IMPROVED


def test_a_slowdown_inside_the_threshold_or_the_noise_is_not_called_a_regression():
    inside = judge_time(_slices(1.03, 12, noise=0.005), threshold=0.05)
    assert inside.verdict == OK and inside.measured.low > 1.0  # measured, and still below what fails
    noisy = judge_time(_slices(1.10, 3, noise=0.3, seed=3), threshold=0.05)
    assert noisy.verdict == OK and noisy.detectable > 1.10  # the run says it could not have told


def test_the_minimum_detectable_slowdown_is_the_ratio_whose_interval_would_clear_the_threshold():
    verdict = judge_time(_slices(1.0, 8, noise=0.05), threshold=0.05)
    m = verdict.measured
    # A run measuring that ratio with this width would put its low end exactly on 1 + threshold.
    assert verdict.detectable * m.low / m.ratio == pytest.approx(1.05)
    assert minimum_detectable(m, 0.10) > verdict.detectable


def test_the_clock_decides_which_seconds_are_compared():
    slices = [replace(s, cpu=s.cpu * (1.3 if s.side == CURRENT else 1.0)) for s in _slices(1.0, 8, noise=0.001)]
    assert judge_time(slices, 0.05, clock="cpu").verdict == REGRESSION
    assert judge_time(slices, 0.05, clock="wall").verdict == OK
    with pytest.raises(ValueError, match="unknown clock 'sundial'; clocks: cpu, wall"):
        judge_time(slices, 0.05, clock="sundial")


def test_fewer_than_two_paired_rounds_are_not_compared():
    one_round = [s for s in _slices(2.0, 3) if s.round == 0]
    assert judge_time(one_round).verdict == NOT_COMPARED
    only_base = [s for s in _slices(2.0, 3) if s.side == BASE]
    assert judge_time(only_base).verdict == NOT_COMPARED
    with pytest.raises(ValueError, match="threshold"):
        judge_time(_slices(1.0, 3), threshold=-0.1)


def _epochs(losses, heldout=0.5):
    return tuple(EpochRecord(epoch=i, loss=loss, seconds=1.0 + i, optimizer_steps=8, closure_calls=8, samples=64,
                             targets=64, heldout_loss=heldout) for i, loss in enumerate(losses))


def test_identical_runs_have_no_deterministic_difference_whatever_their_times():
    a = build_record(epochs=_epochs([2.0, 1.5]), meters={"memory": {"peak_bytes": 1000}})
    b = replace(a, epochs=tuple(replace(e, seconds=e.seconds * 3) for e in a.epochs), session="other")
    assert exact_differences(a, b) == []


def test_a_last_bit_of_a_loss_a_byte_of_memory_or_a_status_is_a_difference():
    a = build_record(epochs=_epochs([2.0, 1.5]), meters={"memory": {"peak_bytes": 1000, "activation_bytes": 10}})
    nudged = replace(a, epochs=(a.epochs[0], replace(a.epochs[1], loss=math.nextafter(1.5, 2.0))))
    assert exact_differences(a, nudged) == [("epochs[1].loss", 1.5, math.nextafter(1.5, 2.0))]
    heavier = replace(a, meters={"memory": {"peak_bytes": 1001, "activation_bytes": 10}})
    assert exact_differences(a, heavier) == [("memory.peak_bytes", 1000, 1001)]
    failed = replace(a, status="diverged")
    assert ("status", "ok", "diverged") in exact_differences(a, failed)
    shorter = replace(a, epochs=a.epochs[:1])
    names = [name for name, _, _ in exact_differences(a, shorter)]
    assert "epochs" in names and "epochs[1].loss" in names


def test_a_nan_loss_on_both_sides_is_the_same_outcome():
    a = build_record(epochs=_epochs([2.0, math.nan]))
    assert exact_differences(a, replace(a)) == []
    assert exact_differences(a, replace(a, epochs=_epochs([2.0, 1.0]))) != []


def test_a_cell_regresses_on_time_on_a_changed_figure_or_when_the_current_code_cannot_run_it():
    ok = TimeVerdict(verdict=OK, threshold=0.05)
    assert not CellAB(cell="c", time=ok).regressed
    assert CellAB(cell="c", time=replace(ok, verdict=REGRESSION)).regressed
    assert CellAB(cell="c", time=ok, differences=(("status", "ok", "error"),)).regressed
    assert CellAB(cell="c", time=ok, missing=CURRENT, note="the current side could not run it").regressed
    # A cell the base revision does not have yet (a new model) is not the current code's fault.
    assert not CellAB(cell="c", time=ok, missing=BASE, note="the base side could not run it").regressed


def test_the_table_names_each_cell_its_ratio_interval_detectable_slowdown_and_changed_figures():
    slow = CellAB(cell="llm-adam-standard", time=judge_time(_slices(1.25, 8), 0.05),
                  differences=(("epochs[0].loss", 2.0, 2.5),), slices=tuple(_slices(1.25, 8)))
    fine = CellAB(cell="vit-adam-standard", time=judge_time(_slices(1.0, 8, seed=4), 0.05))
    lines = ab_lines([slow, fine], base="HEAD~1", current="the working tree")
    text = "\n".join(lines)
    m = slow.time.measured
    assert f"x{m.ratio:.3f}" in text and f"x{m.low:.3f} - x{m.high:.3f}" in text
    assert f"x{slow.time.detectable:.3f}" in text
    assert "REGRESSION (above x1.05)" in text and "changed epochs[0].loss: 2 -> 2.5" in text
    assert lines[-1].endswith("-> REGRESSION") and "1 slower beyond the threshold" in lines[-1]
    assert ab_lines([fine], base="a", current="b")[-1].endswith("-> no regression")
    as_dict = slow.as_dict()
    assert as_dict["verdict"] == REGRESSION and len(as_dict["slices"]) == 32
