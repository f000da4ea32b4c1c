"""Comparisons over seeds, paired by seed: the paired test, Holm's adjustment, rankings and their outcomes."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from gradeff.analysis.pairing import (
    EQUIVALENT,
    IDENTICAL,
    OPEN,
    WINNER,
    holm,
    identical_groups,
    minimum_detectable,
    paired,
    paired_ratio,
    rank,
    same_value,
    tost,
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
    """Every other cell significantly worse after Holm, none within the margin: a winner."""
    found = rank({"a": {0: 1.0, 1: 1.1, 2: 1.2}, "b": {0: 2.0, 1: 2.2, 2: 2.3}, "c": {0: 3.0, 1: 3.0, 2: 3.1}},
                 relative_margin=0.01)
    assert found.outcome == WINNER and found.best == "a" and found.identical == ("a",)
    assert found.equivalent == () and found.open == ()
    assert found.worse == (("b",), ("c",)) and found.n == 3 and found.members == ("a",)
    assert {k: c.relation for k, c in found.comparisons.items()} == {"b": "worse", "c": "worse"}
    assert all(c.p_value < 0.05 for c in found.comparisons.values())


def test_noise_leaves_the_first_place_open_and_says_how_many_seeds_would_decide():
    """Noisy differences far larger than the margin: neither separated nor equivalent, so open, never a win."""
    found = rank({"a": {0: 1.0, 1: 1.5, 2: 1.2}, "b": {0: 1.6, 1: 1.4, 2: 1.9}, "c": {0: 9.0, 1: 9.1, 2: 9.3}},
                 relative_margin=0.01)
    assert found.outcome == OPEN and found.best == "a" and found.open == (("b",),) and found.worse == (("c",),)
    assert found.members == ("a", "b") and found.settled == ("a",)
    assert 3 < found.seeds_needed < 30
    # A difference buried in noise far below the margin's reach: no number of seeds the spread can tell.
    hopeless = rank({"a": {0: 1.0, 1: 1.5, 2: 1.2}, "b": {0: 1.4, 1: 1.1, 2: 1.3}}, relative_margin=0.01)
    assert hopeless.outcome == OPEN and hopeless.seeds_needed is None


def test_equivalence_within_the_margin_by_two_one_sided_tests():
    """Paired differences well inside ±1 %: equivalent (a real but negligible difference is equivalent too)."""
    best = {s: 2.0 + 0.01 * s for s in range(5)}
    near = {s: v * 1.001 + (0.0002 if s % 2 else -0.0002) for s, v in best.items()}
    found = rank({"a": best, "b": near}, relative_margin=0.01)
    assert found.outcome == EQUIVALENT and found.equivalent == (("b",),) and found.settled == ("a", "b")
    assert found.comparisons["b"].p_equivalence < 0.05
    # The same pair with a margin of zero is not equivalent: the tiny difference is real, so b is worse.
    assert rank({"a": best, "b": near}, margin=0.0).outcome == WINNER


def test_tost_against_scipys_one_sided_tests():
    """The larger of the two one-sided p-values, each scipy's one-sample t-test shifted by the margin."""
    differences = [0.1, -0.2, 0.05, 0.15, -0.05]
    low = stats.ttest_1samp(differences, -0.5, alternative="greater").pvalue
    high = stats.ttest_1samp(differences, 0.5, alternative="less").pvalue
    assert tost(differences, 0.5) == pytest.approx(max(low, high))
    assert tost([0.3, 0.3], 0.5) == 0.0 and tost([0.5, 0.5], 0.5) == 1.0 and tost([0.1], 0.5) is None


def test_maximising_and_the_sign_of_the_difference():
    """goal=max ranks the highest first; a cell whose paired difference favours it is never called worse."""
    found = rank({"low": {0: 1.0, 1: 1.1}, "high": {0: 5.0, 1: 5.2}}, goal="max")
    assert found.best == "high" and found.outcome == WINNER and found.worse == (("low",),)
    # b has the worse mean, but on the seed both share it is better: not "worse", so open.
    mixed = rank({"a": {0: 1.0, 1: 1.0, 2: 1.0}, "b": {0: 0.5, 1: 5.0, 3: 5.0}})
    assert mixed.best == "a" and mixed.outcome == OPEN


def test_identical_cells_are_merged_and_never_open():
    """Cells with the same numbers on every seed are one entry: ``identical`` when nothing else competes."""
    found = rank({"standard": {0: 2.0, 1: 2.5}, "checkpoint": {0: 2.0, 1: 2.5}})
    assert found.outcome == IDENTICAL and found.identical == ("standard", "checkpoint") and found.open == ()
    with_loser = rank({"standard": {0: 2.0, 1: 2.5}, "checkpoint": {0: 2.0, 1: 2.5}, "sgd": {0: 9.0, 1: 9.5}})
    assert with_loser.outcome == WINNER and with_loser.identical == ("standard", "checkpoint")
    assert with_loser.worse == (("sgd",),)
    # An open group of identical cells stays one group.
    tied = rank({"a": {0: 1.0, 1: 1.5}, "b": {0: 1.3, 1: 1.25}, "c": {0: 1.3, 1: 1.25}})
    assert tied.outcome == OPEN and tied.open == (("b", "c"),)


def test_the_same_sum_in_another_order_is_the_same_number():
    """2.0999999999999375 J and 2.1000000000000085 J are one value: identical, never a winner by float error."""
    found = rank({"x": {0: 2.1000000000000085, 1: 3.0}, "y": {0: 2.0999999999999375, 1: 3.0}})
    assert found.outcome == IDENTICAL and set(found.identical) == {"x", "y"}
    assert same_value(2.1000000000000085, 2.0999999999999375) and not same_value(2.1, 2.1000001)


def test_one_seed_is_open():
    """One seed: nothing is tested; only the same values share the place, and identical runs merge."""
    found = rank({"a": {0: 1.0}, "b": {0: 2.0}, "c": {0: 1.0}}, fingerprints={"a": 1, "b": 2, "c": 3})
    assert found.outcome == OPEN and found.best == "a" and found.identical == ("a",)
    assert found.open == (("b",), ("c",)) and found.n == 1 and found.worse == () and found.seeds_needed is None
    merged = rank({"a": {0: 1.0}, "b": {0: 2.0}, "c": {0: 1.0}})
    assert merged.identical == ("a", "c") and merged.open == (("b",),)
    # The best's single seed leaves the question open even where others have several.
    assert rank({"a": {0: 1.0}, "b": {0: 2.0, 1: 3.0}}).outcome == OPEN
    # A lone cell is the answer, whatever its seeds.
    assert rank({"a": {0: 1.0}}).outcome == WINNER


def test_holm_keeps_a_family_of_comparisons_at_its_level():
    """Two comparisons each at p≈0.03: separate alone, but not after Holm's adjustment."""
    best = {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}
    near = {0: 1.0, 1: 2.0, 2: 0.5, 3: 1.5}
    assert 0.025 < paired(near, best).p_value < 0.05
    alone = rank({"best": best, "near": near})
    assert alone.outcome == WINNER
    family = rank({"best": best, "near": near, "twin": {s: v + 1e-6 for s, v in near.items()}})
    assert family.outcome == OPEN
    assert family.comparisons["near"].p_value == pytest.approx(2 * paired(near, best).p_value, rel=1e-4)


def test_a_stricter_level_decides_less():
    """The level of a sequential plan's look (α / K) leaves open what 5 % would separate."""
    samples = {"a": {0: 1.0, 1: 1.2, 2: 0.9, 3: 1.1}, "b": {0: 1.6, 1: 1.5, 2: 1.9, 3: 1.4}}
    assert rank(samples, level=0.05).outcome == WINNER
    assert rank(samples, level=0.0001).outcome == OPEN


def test_untested_comparisons_are_open_and_equal_means_break_by_order():
    """A cell sharing fewer than two seeds with the best cannot be decided; equal means go to the first."""
    found = rank({"a": {0: 1.0, 1: 1.0}, "b": {2: 5.0, 3: 5.0}})
    assert found.outcome == OPEN and found.comparisons["b"].p_value is None
    assert rank({"x": {0: 1.0, 1: 3.0}, "y": {0: 3.0, 1: 1.0}}).best == "x"
    assert rank({"y": {0: 3.0, 1: 1.0}, "x": {0: 1.0, 1: 3.0}}).best == "y"
    assert rank({}) is None and rank({"a": {}}) is None


def test_a_resolution_makes_sub_resolution_gaps_no_difference():
    """RSS within its resolution: the differences read as none, so the cells are equivalent, not separated."""
    samples = {"adam": {0: 100.5, 1: 100.6, 2: 100.55}, "sgd": {0: 100.0, 1: 100.0, 2: 100.0}}
    assert rank(samples, goal="max").outcome == WINNER
    assert rank(samples, goal="max", resolution=1.0, margin=0.5).outcome == EQUIVALENT


def test_a_rule_of_the_metric_can_declare_two_cells_equal():
    """``equal`` (the speed rule: same step, within the timer's noise) makes an otherwise separated cell equivalent."""
    samples = {"a": {0: 1.0, 1: 1.0}, "b": {0: 1.2, 1: 1.2}}
    assert rank(samples).outcome == WINNER
    assert rank(samples, equal=lambda other, best: {other, best} == {"a", "b"}).outcome == EQUIVALENT


def test_power_statement_at_the_seeds_run():
    """The smallest detectable difference shrinks with the seeds; the nearest comparison carries it."""
    few = [0.1, -0.1, 0.2]
    many = few * 4
    assert minimum_detectable(many, 0.05) < minimum_detectable(few, 0.05)
    assert minimum_detectable([0.1], 0.05) is None
    found = rank({"a": {0: 1.0, 1: 1.1, 2: 0.9}, "b": {0: 1.05, 1: 1.2, 2: 1.0}, "c": {0: 5.0, 1: 5.1, 2: 5.3}})
    assert found.nearest is found.comparisons["b"] and found.nearest.detectable > 0


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
    """The best has the best mean; identical keys share its values; the groups partition the keys; the outcome
    follows the groups."""
    samples = {key: dict(enumerate(values)) for key, values in draws.items()}
    found = rank(samples)
    means = {key: sum(v.values()) / len(v) for key, v in samples.items()}
    assert means[found.best] == min(means.values())
    assert all(all(same_value(samples[key][s], samples[found.best][s]) for s in samples[key])
               for key in found.identical)
    placed = [*found.identical, *(k for g in (*found.equivalent, *found.open, *found.worse) for k in g)]
    assert len(placed) == len(set(placed)) and sorted(placed) == sorted(samples)
    if found.outcome == WINNER:
        assert not found.open and not found.equivalent
    if found.outcome == OPEN:
        assert found.open
