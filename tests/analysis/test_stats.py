"""Intervals over seeds: the law the report's verdicts rest on."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradeff.analysis.stats import interval


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


@settings(deadline=None)  # timed under mutation testing's load, a deadline would kill by the clock
@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=8))
def test_interval_contains_its_mean(values):
    """Whatever the values, the interval is ordered and contains the mean."""
    iv = interval(values)
    assert iv.low <= iv.mean <= iv.high or abs(iv.high - iv.low) < 1e-9


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


