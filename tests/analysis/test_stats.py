"""Intervals, significance and time to target: the laws the report's verdicts rest on."""

import random
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.analysis.stats import differs, interval, target_loss, time_to_target, winners


def test_interval_covers_the_true_mean_95_percent_of_the_time():
    """Over 2 000 draws of 3 normal values, the 95 % t-interval holds the true mean 93–97 % of the time."""
    rng = random.Random(0)
    draws = 2_000
    covered = 0
    for _ in range(draws):
        iv = interval([rng.gauss(10, 2) for _ in range(3)])
        covered += iv.low <= 10 <= iv.high
    assert 0.93 <= covered / draws <= 0.97


def test_interval_of_one_value_has_no_width_and_bad_input_is_refused():
    """One seed: the value itself; none, or a confidence of 1, is an error."""
    one = interval([2.5])
    assert (one.mean, one.low, one.high, one.n, one.half_width) == (2.5, 2.5, 2.5, 1, 0.0)
    with pytest.raises(ValueError):
        interval([])
    with pytest.raises(ValueError):
        interval([1.0, 2.0], confidence=1.0)


def test_identical_distributions_tie_and_separated_ones_differ():
    """Welch's test: the same distribution is a tie (mostly); means 10 σ apart always differ."""
    rng = random.Random(1)
    false_alarms = sum(differs([rng.gauss(0, 1) for _ in range(5)], [rng.gauss(0, 1) for _ in range(5)])
                       for _ in range(400))
    assert false_alarms / 400 <= 0.08
    assert all(differs([rng.gauss(0, 1) for _ in range(3)], [rng.gauss(10, 1) for _ in range(3)]) for _ in range(50))


def test_single_seeds_are_never_significant_and_deterministic_repeats_are_exact():
    """One value a side: no evidence; constant repeats: different constants differ, equal ones do not."""
    assert not differs([1.0], [5.0])
    assert differs([1.0, 1.0, 1.0], [1.1, 1.1, 1.1]) and not differs([1.0, 1.0], [1.0, 1.0])


def test_winners_report_a_tie_when_the_data_cannot_separate():
    """Overlapping seeds: best and runner-up tie; a clearly worse cell is out; one seed each: unconfirmed."""
    result = winners({"a": [1.0, 1.2, 0.9], "b": [1.1, 0.95, 1.15], "c": [3.0, 3.1, 2.9]})
    assert result.best == "a" and set(result.ties) == {"a", "b"} and result.tie and result.confirmed
    assert winners({"x": [2.0], "y": [1.0]}, goal="max").best == "x"
    single = winners({"x": [2.0], "y": [1.0], "z": [1.0]})
    assert single.best == "y" and not single.confirmed and single.ties == ("y", "z")  # only exact ties
    assert winners({"x": []}) is None


@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=8))
def test_interval_contains_its_mean(values):
    """Whatever the values, the interval is ordered and contains the mean."""
    iv = interval(values)
    assert iv.low <= iv.mean <= iv.high or abs(iv.high - iv.low) < 1e-9


def _epoch(i, loss, steps=8, seconds=1.0):
    return SimpleNamespace(epoch=i, heldout_loss=loss, optimizer_steps=steps, seconds=seconds, joules=2.0)


def test_time_to_target_on_a_hand_made_series():
    """Target halfway from 4.0 to a floor of 1.0 = 2.5: reached at epoch 2 after 24 steps, 3 s, 6 J."""
    target = target_loss(4.0, 1.0)
    assert target == 2.5 and target_loss(4.0, None) == 2.0
    series = [_epoch(0, 3.5), _epoch(1, 2.6), _epoch(2, 2.4), _epoch(3, 2.0)]
    reached = time_to_target(series, target, joules=lambda e: e.joules)
    assert (reached.epoch, reached.optimizer_steps, reached.seconds, reached.joules) == (2, 24, 3.0, 6.0)
    assert time_to_target(series[:2], target) is None
    assert time_to_target([_epoch(0, None), _epoch(1, 2.0)], target).epoch == 1
    assert time_to_target(series, target).joules is None  # energy not given: not a made-up 0
