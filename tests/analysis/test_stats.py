"""Intervals, significance and time to target: the laws the report's verdicts rest on."""

import random
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gradeff.analysis.stats import differs, interval, winners
from gradeff.records.curve import target_loss, time_to_target


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


@settings(deadline=None)  # timed under mutation testing's load, a deadline would kill by the clock
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


# -- boundaries and laws ----------------------------------------------------------------------------


def test_interval_of_three_values_is_the_student_t_interval():
    """[1, 2, 3]: mean 2, sd 1, t(0.975, 2) = 4.3027 → 2 ± 2.4841; a wider confidence gives a wider interval."""
    iv = interval([1.0, 2.0, 3.0])
    assert (iv.mean, iv.n) == (2.0, 3)
    assert iv.half_width == pytest.approx(4.302653 / 3 ** 0.5, rel=1e-6)
    assert iv.low == pytest.approx(2.0 - iv.half_width) and iv.high == pytest.approx(2.0 + iv.half_width)
    assert interval([1.0, 2.0, 3.0], confidence=0.99).half_width > iv.half_width > interval(
        [1.0, 2.0, 3.0], confidence=0.5).half_width


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.1, 1.5])
def test_a_confidence_outside_the_open_unit_interval_is_refused_naming_it(confidence):
    """0 and 1 themselves are outside (a 0 % or 100 % interval is not an interval)."""
    with pytest.raises(ValueError, match=f"got {confidence}"):
        interval([1.0, 2.0], confidence=confidence)


@pytest.mark.parametrize("confidence", [1e-9, 0.5, 1 - 1e-9])
def test_a_confidence_just_inside_the_unit_interval_is_accepted(confidence):
    iv = interval([1.0, 2.0], confidence=confidence)
    assert iv.low <= 1.5 <= iv.high


@settings(deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=8))
def test_interval_counts_its_values_and_is_symmetric_about_the_mean(values):
    iv = interval(values)
    assert iv.n == len(values)
    assert iv.high - iv.mean == pytest.approx(iv.mean - iv.low, abs=1e-6)


@settings(deadline=None)
@given(st.lists(st.integers(-100, 100), min_size=2, max_size=5, unique=True), st.integers(1, 4))
def test_interval_half_width_shrinks_as_the_same_spread_is_seen_more_often(pattern, more):
    """Repeating a sample k times keeps its spread about the same; more values, a narrower interval."""
    pattern = [float(v) for v in pattern]
    once = interval(pattern)
    repeated = interval(pattern * (more + 1))
    assert repeated.mean == pytest.approx(once.mean, abs=1e-9)
    assert repeated.half_width < once.half_width


def test_welch_with_two_values_a_side_can_already_differ():
    """Two seeds a side is enough evidence when the means are far apart, on either side."""
    assert differs([0.0, 0.1], [10.0, 10.1])
    assert differs([10.0, 10.1], [0.0, 0.1])


def test_one_value_on_either_side_is_never_significant():
    """Not against a noisy side, nor against a deterministic repeat of another value: one seed is one draw."""
    assert not differs([1.0], [5.0, 5.0]) and not differs([5.0, 5.0], [1.0])
    assert not differs([1.0], [5.0, 5.1, 4.9])
    assert not differs([5.0, 5.1, 4.9], [1.0])


@pytest.mark.parametrize("a, b", [
    ([0.0, 0.0, 0.0], [0.1, 5.0, -4.8]),  # a constant side against a noisy one with a close mean
    ([1.5, 1.5], [0.0, 2.0]),  # the noisy side's population variance is exactly 1
    ([1.5, 1.5, 1.5], [0.0, 2.0]),
])
def test_a_constant_side_against_a_noisy_one_is_tested_not_compared_exactly(a, b):
    """Only constant values on *both* sides are compared exactly; otherwise the noise decides, either way round."""
    assert not differs(a, b)
    assert not differs(b, a)


def test_welch_does_not_pool_variances():
    """A noisy 3-seed cell against a tight 8-seed one: Welch's test (p 0.32) finds no difference, where a pooled
    Student t-test (p 0.04) would let the tight cell's many seeds vouch for the noisy one's spread."""
    noisy, tight = [0.0, 4.0, -4.0], [2.9, 3.0, 3.1, 3.0, 2.9, 3.1, 3.0, 3.0]
    assert not differs(noisy, tight) and not differs(tight, noisy)


@settings(deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=6), st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=6))
def test_differs_is_symmetric(a, b):
    assert differs(a, b) == differs(b, a)


@settings(deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=6), st.floats(0.001, 1.0))
@example([0.0, 1.0], 1.0)  # identical samples have p = 1 exactly: a level of 1 is still not passed
def test_a_sample_never_differs_from_itself_at_any_level(values, level):
    assert not differs(values, list(values), level=level)


def test_winners_with_two_seeds_are_confirmed():
    """Two seeds on one cell are a spread to test against: the winner is confirmed."""
    assert winners({"a": [1.0, 1.1], "b": [2.0, 2.1]}).confirmed is True
    mixed = winners({"a": [1.0, 1.1], "b": [5.0]})  # one seed cannot be shown worse: it stays a tie
    assert mixed.confirmed is True and mixed.ties == ("a", "b")
    assert winners({"a": [1.0], "b": [2.0]}).confirmed is False


def test_a_stricter_level_widens_the_ties():
    """Cells apart at 5 % but not at 0.1 % tie at the stricter level; the best stays the best."""
    samples = {"a": [1.0, 1.1, 0.9], "b": [1.5, 1.6, 1.4]}
    assert differs(samples["a"], samples["b"], level=0.05) and not differs(samples["a"], samples["b"], level=0.001)
    assert winners(samples).ties == ("a",)
    strict = winners(samples, level=0.001)
    assert strict.best == "a" and strict.ties == ("a", "b")


def test_an_epoch_exactly_at_the_target_reaches_it():
    """The target is reached at ≤, and the result carries the target it was measured against."""
    reached = time_to_target([_epoch(0, 3.0), _epoch(1, 2.5), _epoch(2, 2.0)], 2.5)
    assert (reached.target, reached.epoch, reached.optimizer_steps, reached.seconds) == (2.5, 1, 16, 2.0)
    assert time_to_target([_epoch(0, 2.5000001)], 2.5) is None
