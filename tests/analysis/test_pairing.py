"""Comparisons over seeds, paired by seed: the paired test, Holm's adjustment, rankings and their outcomes."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gradeff.analysis.pairing import (
    IDENTICAL,
    SINGLE_DRAW,
    TIE,
    WINNER,
    holm,
    identical_groups,
    paired,
    paired_ratio,
    rank,
)


def test_paired_test_by_hand():
    """Differences over common seeds; a constant difference is certain, none at all is no evidence."""
    same = paired({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})
    assert same.identical and same.p_value == 1.0 and same.differences == (0.0, 0.0) and same.mean_difference == 0
    shifted = paired({0: 1.5, 1: 2.5, 2: 9.0}, {0: 1.0, 1: 2.0})
    assert shifted.seeds == (0, 1) and not shifted.identical and shifted.p_value == 0.0
    assert shifted.mean_difference == 0.5
    one = paired({0: 1.0}, {0: 1.0, 1: 3.0})
    assert one.seeds == (0,) and one.p_value is None and one.identical
    none = paired({0: 1.0}, {1: 1.0})
    assert none.seeds == () and not none.identical and none.mean_difference is None and none.p_value is None


def test_paired_test_is_scipys_paired_t_test():
    """With spread, the p-value is scipy's ttest_rel on the common seeds."""
    a, b = {0: 1.0, 1: 2.5, 2: 2.0, 3: 7.0}, {0: 0.5, 1: 1.0, 2: 2.1, 3: 5.0}
    expected = stats.ttest_rel([1.0, 2.5, 2.0, 7.0], [0.5, 1.0, 2.1, 5.0]).pvalue
    assert paired(a, b).p_value == pytest.approx(expected)


def test_a_resolution_reads_small_differences_as_none():
    """Differences up to the resolution are 0: the cells tie; beyond it they count."""
    below = paired({0: 10.0, 1: 20.0}, {0: 10.5, 1: 19.4}, resolution=1.0)
    assert below.differences == (0.0, 0.0) and below.p_value == 1.0 and not below.identical
    above = paired({0: 10.0, 1: 20.0}, {0: 12.0, 1: 22.0}, resolution=1.0)
    assert above.differences == (-2.0, -2.0) and above.p_value == 0.0
    edge = paired({0: 10.0, 1: 20.0}, {0: 11.0, 1: 21.0}, resolution=1.0)
    assert edge.differences == (0.0, 0.0)


def test_holm_by_hand():
    """Sorted p-values times m, m-1, ...; kept monotone; capped at 1; in the order given."""
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    assert holm([0.02]) == [0.02]


@given(st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_holm_laws(p_values):
    """Never below the raw p, never above 1, and in the same order as the raw ones."""
    adjusted = holm(p_values)
    assert all(p <= a <= 1 for p, a in zip(p_values, adjusted))
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    assert all(adjusted[i] <= adjusted[j] for i, j in zip(order, order[1:]))


def test_identical_groups_need_the_same_values_and_fingerprints():
    """Equal values on the same seeds group; a different fingerprint (another run) keeps them apart."""
    samples = {"a": {0: 1.0, 1: 2.0}, "b": {0: 1.0, 1: 2.0}, "c": {0: 1.0}, "d": {0: 1.0, 1: 2.0}}
    assert identical_groups(samples) == [("a", "b", "d"), ("c",)]
    assert identical_groups(samples, {"a": 1, "b": 1, "d": 2}) == [("a", "b"), ("c",), ("d",)]


def test_a_clear_winner_beats_every_cell():
    """Every other cell significantly worse after Holm: a winner, nobody tied."""
    found = rank({"a": {0: 1.0, 1: 1.1, 2: 1.2}, "b": {0: 2.0, 1: 2.2, 2: 2.3}, "c": {0: 3.0, 1: 3.0, 2: 3.1}})
    assert found.outcome == WINNER and found.best == "a" and found.identical == ("a",) and found.ties == ()
    assert found.worse == (("b",), ("c",)) and found.n == 3 and found.members == ("a",)
    assert set(found.p_values) == {"b", "c"} and all(p < 0.05 for p in found.p_values.values())


def test_a_tie_names_the_cells_no_test_separates():
    """Noisy differences: tied; a tie is not a winner."""
    found = rank({"a": {0: 1.0, 1: 1.5, 2: 1.2}, "b": {0: 1.4, 1: 1.1, 2: 1.3}, "c": {0: 9.0, 1: 9.1, 2: 9.3}})
    assert found.outcome == TIE and found.best == "a" and found.ties == (("b",),) and found.worse == (("c",),)
    assert found.members == ("a", "b")


def test_maximising_and_the_sign_of_the_difference():
    """goal=max ranks the highest first; a cell whose paired difference favours it is never called worse."""
    found = rank({"low": {0: 1.0, 1: 1.1}, "high": {0: 5.0, 1: 5.2}}, goal="max")
    assert found.best == "high" and found.outcome == WINNER and found.worse == (("low",),)
    # b has the worse mean, but on the seed both share it is better: not "worse", so a tie.
    mixed = rank({"a": {0: 1.0, 1: 1.0, 2: 1.0}, "b": {0: 0.5, 1: 5.0, 3: 5.0}})
    assert mixed.best == "a" and mixed.outcome == TIE


def test_identical_cells_are_merged_and_never_a_tie():
    """Cells with the same numbers on every seed are one entry: ``identical`` when nothing else competes."""
    found = rank({"standard": {0: 2.0, 1: 2.5}, "checkpoint": {0: 2.0, 1: 2.5}})
    assert found.outcome == IDENTICAL and found.identical == ("standard", "checkpoint") and found.ties == ()
    with_loser = rank({"standard": {0: 2.0, 1: 2.5}, "checkpoint": {0: 2.0, 1: 2.5}, "sgd": {0: 9.0, 1: 9.5}})
    assert with_loser.outcome == WINNER and with_loser.identical == ("standard", "checkpoint")
    assert with_loser.worse == (("sgd",),)
    # A tied group of identical cells stays one group.
    tied = rank({"a": {0: 1.0, 1: 1.5}, "b": {0: 1.3, 1: 1.25}, "c": {0: 1.3, 1: 1.25}})
    assert tied.outcome == TIE and tied.ties == (("b", "c"),)


def test_one_seed_is_a_single_draw():
    """One seed: no test; only the same values share the place, and identical runs merge."""
    found = rank({"a": {0: 1.0}, "b": {0: 2.0}, "c": {0: 1.0}}, fingerprints={"a": 1, "b": 2, "c": 3})
    assert found.outcome == SINGLE_DRAW and found.best == "a" and found.identical == ("a",)
    assert found.ties == (("c",),) and found.n == 1 and found.worse == ()
    merged = rank({"a": {0: 1.0}, "b": {0: 2.0}, "c": {0: 1.0}})
    assert merged.identical == ("a", "c") and merged.ties == ()
    # The best's single seed makes a single draw even where others have several.
    assert rank({"a": {0: 1.0}, "b": {0: 2.0, 1: 3.0}}).outcome == SINGLE_DRAW


def test_holm_keeps_a_family_of_comparisons_at_its_level():
    """Two comparisons each at p≈0.03: separate alone, but not after Holm's adjustment."""
    best = {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}
    near = {0: 1.0, 1: 2.0, 2: 0.5, 3: 1.5}
    assert 0.025 < paired(near, best).p_value < 0.05
    alone = rank({"best": best, "near": near})
    assert alone.outcome == WINNER
    family = rank({"best": best, "near": near, "twin": {s: v + 1e-9 for s, v in near.items()}})
    assert family.outcome == TIE and family.p_values["near"] == pytest.approx(2 * paired(near, best).p_value)


def test_untested_comparisons_tie_and_ties_break_by_order():
    """A cell sharing fewer than two seeds with the best cannot be separated; equal means go to the first."""
    found = rank({"a": {0: 1.0, 1: 1.0}, "b": {2: 5.0, 3: 5.0}})
    assert found.outcome == TIE and found.p_values == {"b": None}
    assert rank({"x": {0: 1.0, 1: 3.0}, "y": {0: 3.0, 1: 1.0}}).best == "x"
    assert rank({"y": {0: 3.0, 1: 1.0}, "x": {0: 1.0, 1: 3.0}}).best == "y"
    assert rank({}) is None and rank({"a": {}}) is None


def test_a_resolution_makes_sub_resolution_gaps_a_tie():
    """RSS within its resolution: no winner."""
    samples = {"adam": {0: 100.5, 1: 100.6, 2: 100.55}, "sgd": {0: 100.0, 1: 100.0, 2: 100.0}}
    assert rank(samples, goal="max").outcome == WINNER
    assert rank(samples, goal="max", resolution=1.0).outcome == TIE


def test_paired_ratio():
    """Seed by seed over common seeds with a non-zero denominator; identical and significance flagged."""
    ratio = paired_ratio({0: 2.0, 1: 4.0, 2: 1.0}, {0: 1.0, 1: 2.0, 3: 1.0})
    assert ratio.seeds == (0, 1) and ratio.interval.mean == 2.0 and not ratio.identical and ratio.significant
    same = paired_ratio({0: 3.0, 1: 5.0}, {0: 3.0, 1: 5.0})
    assert same.identical and same.interval.mean == 1.0 and not same.significant
    single = paired_ratio({0: 2.0}, {0: 1.0})
    assert single.interval.n == 1 and not single.significant
    noisy = paired_ratio({0: 1.5, 1: 0.7}, {0: 1.0, 1: 1.0})
    assert not noisy.significant
    assert paired_ratio({0: 1.0}, {0: 0.0}) is None and paired_ratio({0: 1.0}, {1: 1.0}) is None
    assert paired_ratio({0: math.inf}, {0: 1.0}) is None


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from("abcde"), st.lists(st.floats(-100, 100), min_size=1, max_size=4),
                       min_size=1))
def test_ranking_laws(draws):
    """The best has the best mean; identical keys share its values; first place and worse partition the keys."""
    samples = {key: dict(enumerate(values)) for key, values in draws.items()}
    found = rank(samples)
    means = {key: sum(v.values()) / len(v) for key, v in samples.items()}
    assert means[found.best] == min(means.values())
    assert all(samples[key] == samples[found.best] for key in found.identical)
    placed = [*found.identical, *(k for g in found.ties for k in g), *(k for g in found.worse for k in g)]
    assert len(placed) == len(set(placed)) and set(placed) <= set(samples)
    if found.outcome != SINGLE_DRAW:  # one draw tests nothing: the cells behind are not ranked
        assert sorted(placed) == sorted(samples)
    if found.outcome == WINNER:
        assert not found.ties
