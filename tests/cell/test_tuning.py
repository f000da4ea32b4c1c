"""The learning-rate search: log grids, the best rate, the edge flag and the widening past an edge."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.cell.tuning import at_edge, log_grid, search


def test_log_grid_spans_its_decades_around_the_centre():
    """Five points over two decades: centre/10 … centre×10, evenly spaced in log, the centre in the middle."""
    grid = log_grid(1e-3, 5, 2.0)
    assert grid == pytest.approx((1e-4, 10**-3.5, 1e-3, 10**-2.5, 1e-2))
    assert log_grid(0.5, 1, 2.0) == (0.5,)
    with pytest.raises(ValueError, match="at least one point"):
        log_grid(1e-3, 0, 2.0)


@given(st.lists(st.floats(1e-6, 10.0), min_size=2, max_size=8, unique=True), st.integers(0, 7))
def test_the_edge_flag_names_the_end_a_rate_sits_on(rates, index):
    """at_edge: "low" for the smallest rate, "high" for the largest, None inside (and for a single rate)."""
    chosen = rates[index % len(rates)]
    expected = "low" if chosen == min(rates) else "high" if chosen == max(rates) else None
    assert at_edge(chosen, rates) == expected
    assert at_edge(chosen, [chosen]) is None and at_edge(None, rates) is None


def test_a_best_rate_at_the_edge_is_flagged_when_the_search_may_not_widen():
    """Loss falling all the way to the largest rate: the search keeps it and says it sits at the high edge."""
    found = search(lambda lr: -math.log10(lr), log_grid(1e-3, 5, 2.0))
    assert found.chosen == pytest.approx(1e-2) and found.at_edge == "high" and found.widened == 0
    found = search(lambda lr: math.log10(lr), log_grid(1e-3, 5, 2.0))
    assert found.chosen == pytest.approx(1e-4) and found.at_edge == "low"


def test_widening_follows_the_edge_until_the_best_rate_is_inside():
    """Minimum at 10**-1.5, above a grid that ends at 1e-2: the search adds half-decade points (10**-1.5, then
    10**-1, past which the loss rises again) and stops with the best rate inside the grid."""
    calls = []

    def score(lr):
        calls.append(lr)
        return (math.log10(lr) + 1.5) ** 2

    found = search(score, log_grid(1e-3, 5, 2.0), widen=6)
    assert found.chosen == pytest.approx(10**-1.5) and found.at_edge is None
    assert found.widened == 2
    assert [t.lr for t in found.trials][-3:] == pytest.approx([10**-2, 10**-1.5, 10**-1])
    assert len(calls) == len(set(calls)) == 7  # every rate scored once


def test_widening_stops_when_spent_and_leaves_the_flag():
    """A loss that keeps falling: every allowed point is added and the best is still at the edge."""
    found = search(lambda lr: -lr, [1e-3, 1e-2], widen=2)
    assert found.widened == 2 and found.at_edge == "high" and found.chosen == pytest.approx(1.0)


def test_failed_rates_are_never_chosen():
    """None or NaN (a diverged trial) scores nothing; with nothing scored there is no choice and no edge."""
    found = search(lambda lr: None if lr > 1e-3 else (math.nan if lr < 1e-3 else 1.0), log_grid(1e-3, 3, 2.0))
    assert found.chosen == pytest.approx(1e-3) and found.at_edge is None
    nothing = search(lambda lr: None, [1e-3, 1e-2], widen=3)
    assert nothing.chosen is None and nothing.at_edge is None and nothing.widened == 0
