"""Comparisons over seeds, paired by seed: which cell wins, which are equivalent, which are still open.

The cells of one model share their start and their data for a given seed (the same weights, the same
samples in the same order), so two cells are compared seed by seed: the differences ``a_s - b_s`` over
the seeds both have are tested against zero with a paired t-test (:func:`paired`), and against a
practical-equivalence margin ``±δ`` with two one-sided tests (:func:`tost`). A seed's draw moves both
sides together, so pairing removes what the cells share and keeps what the choice changes.

A ranking (:func:`rank`) compares the best mean with every other cell. The separation p-values of one
ranking are adjusted with Holm's step-down method (:func:`holm`), so "A wins" at the level holds for the
ranking as a whole; each equivalence is a two-one-sided test at the level (claiming a set equivalent is an
intersection of those tests, which keeps the level without adjustment). Each other cell is then

- ``worse``: significantly worse than the best (after Holm) and not within the margin;
- ``equivalent``: its difference from the best lies within ``±δ`` with the level's confidence (a real but
  negligible difference is equivalent too: the margin says what matters);
- ``open``: neither yet; the ranking says how many seeds the observed spread suggests would decide it.

The ranking's outcome is ``winner`` (every other cell worse), ``equivalent`` (the rest worse or equivalent, at
least one equivalent), ``open`` (some cell still open; one seed is always open: there is no spread to test) or
``identical`` (the only cells are the same numbers on every seed, e.g. checkpointing's losses: merged and
labelled). A tie that is not shown equivalent is open, never a win.

Cells with the same values on every seed (within float rounding: a few ulps of a sum taken in another order)
are merged into one entry wherever they stand. A metric with a resolution (a sampled meter) treats
differences up to it as none.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gradeff.analysis.stats import Interval, interval

__all__ = ["EQUIVALENT", "IDENTICAL", "OPEN", "OUTCOMES", "WINNER", "Comparison", "Paired", "PairedRatio", "Ranking",
           "holm", "identical_groups", "minimum_detectable", "paired", "paired_ratio", "rank", "same_value",
           "seeds_to_decide", "tost"]

K = TypeVar("K", bound=Hashable)

WINNER, EQUIVALENT, OPEN, IDENTICAL = "winner", "equivalent", "open", "identical"
OUTCOMES = (WINNER, EQUIVALENT, OPEN, IDENTICAL)
# Values this close are the same number summed in another order (2.0999999999999375 J and 2.1000000000000085 J):
# far below any resolution a metric is read at, far above a double's rounding of a sum of a few thousand terms.
_SAME_RELATIVE = 1e-9
# The power at which a difference counts as detectable (the minimum detectable difference, seeds to decide).
POWER = 0.8


def _t_sf(t: float, df: int) -> float:
    """Student t's survival function: scipy.special's ufunc, a thousand times quicker than scipy.stats.t.sf on one
    value (the Answer asks it for every pair of every group, a sequential run at every look)."""
    from scipy import special

    return float(special.stdtr(df, -t))


def _t_ppf(q: float, df: int) -> float:
    """Student t's quantile function (scipy.special's inverse of its distribution function)."""
    from scipy import special

    return float(special.stdtrit(df, q))


def same_value(a: float, b: float) -> bool:
    """Whether two values are one number up to the rounding of a sum taken in another order."""
    return a == b or math.isclose(a, b, rel_tol=_SAME_RELATIVE, abs_tol=0.0)


@dataclass(frozen=True, slots=True)
class Paired:
    """Two cells over the seeds both have.

    Attributes:
        seeds: the common seeds, in order.
        differences: ``a_s - b_s`` per common seed (differences within the resolution read as 0).
        identical: the values are exactly equal on every common seed (and there is one at least).
        p_value: two-sided p of the paired t-test on the differences; ``None`` with fewer than two seeds.
    """

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    identical: bool
    p_value: float | None

    @property
    def mean_difference(self) -> float | None:
        return statistics.fmean(self.differences) if self.differences else None


def paired(a: Mapping[int, float], b: Mapping[int, float], *, resolution: float = 0.0) -> Paired:
    """``a`` against ``b`` seed by seed (see :class:`Paired`).

    A constant non-zero difference on every seed (a deterministic effect, no spread) is as strong as a
    difference gets: its p-value is 0; no difference at all gives 1.
    """
    seeds = tuple(sorted(set(a) & set(b)))
    differences = tuple(0.0 if same_value(a[s], b[s]) or abs(a[s] - b[s]) <= resolution else a[s] - b[s]
                        for s in seeds)
    identical = bool(seeds) and all(same_value(a[s], b[s]) for s in seeds)
    if len(seeds) < 2:
        return Paired(seeds, differences, identical, None)
    if all(d == 0 for d in differences):
        p = 1.0
    elif statistics.pvariance(differences) == 0:
        p = 0.0
    else:
        # The paired t statistic, by hand: scipy's ttest_rel gives the same p but warns (catastrophic
        # cancellation) on the near-constant differences of near-identical cells, where this is exact enough.
        n = len(differences)
        t = statistics.fmean(differences) / (statistics.stdev(differences) / math.sqrt(n))
        p = float(2 * _t_sf(abs(t), n - 1))
    return Paired(seeds, differences, identical, p)


def tost(differences: Sequence[float], margin: float) -> float | None:
    """Two one-sided tests that the mean of ``differences`` lies within ``(-margin, margin)``: the larger p.

    Equivalence at level α holds when the returned p is below α (the 1 - 2α interval of the mean lies inside the
    margin). ``None`` with fewer than two differences (no spread to test against). Differences without spread
    are exact: p is 0 inside the margin, 1 on or outside it.
    """
    if len(differences) < 2:
        return None
    mean = statistics.fmean(differences)
    spread = statistics.stdev(differences)
    if spread == 0:
        # No difference at all is within any margin, zero included; a constant one only inside it.
        return 0.0 if abs(mean) < margin or mean == 0 else 1.0
    n = len(differences)
    error = spread / math.sqrt(n)
    # H0 low: mean <= -margin; H0 high: mean >= margin. Both rejected: equivalent.
    low = _t_sf((mean + margin) / error, n - 1)
    high = _t_sf((margin - mean) / error, n - 1)
    return float(max(low, high))


def seeds_to_decide(differences: Sequence[float], margin: float, level: float, *, limit: int = 1000) -> int | None:
    """How many seeds the observed spread says would decide a comparison (separate it or show it equivalent) with
    :data:`POWER`, or ``None`` where it cannot be estimated (fewer than two differences, or more than ``limit``).

    Separation needs the minimum detectable difference at n seeds (two-sided paired t-test at ``level``) to fall
    below the observed mean difference; equivalence needs the one-sided interval's reach plus the observed mean to
    fall inside the margin. The smaller n of the two.
    """
    if len(differences) < 2:
        return None
    mean, spread = abs(statistics.fmean(differences)), statistics.stdev(differences)
    if spread == 0:
        return len(differences)
    def decides(n: int) -> bool:
        error = spread / math.sqrt(n)
        detectable = (_t_ppf(1 - level / 2, n - 1) + _t_ppf(POWER, n - 1)) * error
        reach = (_t_ppf(1 - level, n - 1) + _t_ppf(POWER, n - 1)) * error
        return detectable <= mean or mean + reach < margin

    # Both bounds shrink as n grows, so the first n that decides is found by bisection.
    low, high = max(2, len(differences)), limit
    if not decides(high):
        return None
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if decides(middle) else (middle + 1, high)
    return low


def minimum_detectable(differences: Sequence[float], level: float) -> float | None:
    """The smallest mean difference a paired t-test at ``level`` would detect with :data:`POWER` at this many
    seeds and the observed spread; ``None`` with fewer than two differences."""
    if len(differences) < 2:
        return None
    n = len(differences)
    return float((_t_ppf(1 - level / 2, n - 1) + _t_ppf(POWER, n - 1)) * statistics.stdev(differences) / math.sqrt(n))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (same order): the family-wise error stays at the level.

    The i-th smallest p is multiplied by ``m - i`` (i from 0), kept at least as large as the adjusted
    p before it, and capped at 1.
    """
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - step) * p_values[index]))
        adjusted[index] = running
    return adjusted


def identical_groups(samples: Mapping[K, Mapping[int, float]],
                     fingerprints: Mapping[K, Hashable] | None = None) -> list[tuple[K, ...]]:
    """Keys whose values are the same (:func:`same_value`) on the same seeds, and whose ``fingerprints`` agree where
    given, grouped; groups and members in the order given.

    Equal values alone can be a coincidence of a coarse metric (two accuracies of 48/256); a fingerprint of
    the whole run (its loss series) tells identical runs from cells that merely scored alike.
    """
    groups: list[tuple[Mapping[int, float], Hashable, list[K]]] = []
    for key, values in samples.items():
        identity = None if fingerprints is None else fingerprints.get(key, key)
        for first, known, members in groups:
            if known == identity and first.keys() == values.keys() and all(
                    same_value(first[s], values[s]) for s in values):
                members.append(key)
                break
        else:
            groups.append((values, identity, [key]))
    return [tuple(members) for _, _, members in groups]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One other cell against the best.

    Attributes:
        relation: ``worse``, ``equivalent`` or ``open``.
        mean_difference: the mean paired difference, oriented so that positive is worse than the best.
        p_value: Holm-adjusted p of the separation test (``None``: fewer than two common seeds).
        p_equivalence: the two-one-sided-tests p against the margin (``None``: fewer than two common seeds).
        differences: the oriented paired differences over the common seeds.
        margin: the equivalence margin it was judged against.
        level: the level it was judged at.
    """

    relation: str
    mean_difference: float | None
    p_value: float | None
    p_equivalence: float | None
    differences: tuple[float, ...] = ()
    margin: float = 0.0
    level: float = 0.05

    @property
    def seeds_needed(self) -> int | None:
        """For an open comparison, how many seeds the observed spread says would decide it (``None``: decided
        already, or not estimable). Computed when asked: the Answer's text needs it, a contention check does not."""
        return seeds_to_decide(self.differences, self.margin, self.level) if self.relation == "open" else None

    @property
    def detectable(self) -> float | None:
        """The smallest difference the seeds compared could have detected (``None``: fewer than two)."""
        return minimum_detectable(self.differences, self.level)


@dataclass(frozen=True, slots=True)
class Ranking(Generic[K]):
    """The outcome of comparing cells on one metric over seeds (see the module docstring).

    Attributes:
        outcome: one of :data:`OUTCOMES`.
        best: the key with the best mean (first in the order given among equal means).
        identical: the keys with the best's values on every seed, the best first.
        equivalent: the other groups shown equivalent to the best within the margin.
        open: the other groups neither separated from the best nor shown equivalent.
        worse: the groups significantly worse than the best (after Holm) and outside the margin.
        n: the best's seeds.
        margin: the equivalence margin, in the metric's unit.
        level: the significance level every test of the ranking was made at.
        comparisons: per group's first key, its :class:`Comparison` with the best.
    """

    outcome: str
    best: K
    identical: tuple[K, ...]
    equivalent: tuple[tuple[K, ...], ...] = ()
    open: tuple[tuple[K, ...], ...] = ()
    worse: tuple[tuple[K, ...], ...] = ()
    n: int = 1
    margin: float = 0.0
    level: float = 0.05
    comparisons: Mapping[K, Comparison] = field(default_factory=dict)

    @property
    def members(self) -> tuple[K, ...]:
        """Every key that shares the first place as far as the data say: the best, those identical or equivalent
        to it, and those still open against it."""
        return self.identical + tuple(key for group in (*self.equivalent, *self.open) for key in group)

    @property
    def settled(self) -> tuple[K, ...]:
        """The best, its identical cells and those shown equivalent: the set a next criterion chooses among."""
        return self.identical + tuple(key for group in self.equivalent for key in group)

    @property
    def nearest(self) -> Comparison | None:
        """The comparison with the smallest mean difference from the best: the one the power statement is about."""
        known = [c for c in self.comparisons.values() if c.mean_difference is not None]
        return min(known, key=lambda c: abs(c.mean_difference), default=None)

    @property
    def seeds_needed(self) -> int | None:
        """For an open ranking, the most seeds any open comparison needs (``None``: not estimable)."""
        needed = [self.comparisons[group[0]].seeds_needed for group in self.open]
        return None if not needed or None in needed else max(needed)


def _better_first(goal: str, means: Mapping[K, float]) -> list[K]:
    sign = 1 if goal == "min" else -1
    order = {key: index for index, key in enumerate(means)}
    return sorted(means, key=lambda key: (sign * means[key], order[key]))


def rank(samples: Mapping[K, Mapping[int, float]], *, goal: str = "min", level: float = 0.05,
         resolution: float = 0.0, fingerprints: Mapping[K, Hashable] | None = None,
         margin: float | None = None, relative_margin: float | None = None,
         equal: Callable[[K, K], bool] | None = None) -> Ranking[K] | None:
    """Rank cells measured per seed: the best mean against every other group, paired by seed.

    Args:
        samples: key (a cell) → ``seed → value`` (keys without values are left out). The order given
            breaks ties between equal means.
        goal: ``min`` or ``max``.
        level: the significance level of every test (the family-wise level of the separations).
        resolution: differences up to this size are no difference.
        fingerprints: key → what makes two runs the same run (see :func:`identical_groups`); without, equal
            values on the same seeds are identical.
        margin: the practical-equivalence margin in the metric's unit; or
        relative_margin: the margin as a fraction of the best's mean (one of the two; neither: 0, so only
            identical cells are equivalent).
        equal: ``equal(other, best)`` is true where a rule of the metric's own says the two are the same (time to
            target reached at the same step, apart by less than the timer's noise): such a cell is equivalent.

    Returns:
        The ranking, or ``None`` without any value.
    """
    present = {key: dict(values) for key, values in samples.items() if values}
    if not present:
        return None
    means = {key: statistics.fmean(values.values()) for key, values in present.items()}
    best = _better_first(goal, means)[0]
    delta = margin if margin is not None else (relative_margin or 0.0) * abs(means[best])
    groups = identical_groups(present, fingerprints)
    best_group = next(group for group in groups if best in group)
    identical = (best, *(key for key in best_group if key != best))
    others = [group for group in groups if group is not best_group]
    n = len(present[best])
    sign = 1 if goal == "min" else -1
    tests = [paired(present[group[0]], present[best], resolution=resolution) for group in others]
    testable = [i for i, test in enumerate(tests) if test.p_value is not None]
    adjusted = dict(zip(testable, holm([tests[i].p_value for i in testable])))
    comparisons, buckets = {}, {"worse": [], "equivalent": [], "open": []}
    for index, group in enumerate(others):
        test = tests[index]
        oriented = tuple(sign * d for d in test.differences)
        p, p_same = adjusted.get(index), tost(oriented, delta)
        mean = statistics.fmean(oriented) if oriented else None
        if (p_same is not None and p_same < level) or (equal is not None and equal(group[0], best)):
            relation = "equivalent"
        elif p is not None and p < level and mean > 0:
            relation = "worse"
        else:
            relation = "open"
        comparisons[group[0]] = Comparison(relation, mean, p, p_same, oriented, delta, level)
        buckets[relation].append(group)
    # One seed leaves every comparison open (no spread to test against: p and the equivalence test are None).
    if buckets["open"]:
        outcome = OPEN
    elif buckets["equivalent"]:
        outcome = EQUIVALENT
    elif not others and len(identical) > 1:
        outcome = IDENTICAL
    else:
        outcome = WINNER
    return Ranking(outcome=outcome, best=best, identical=identical, equivalent=tuple(buckets["equivalent"]),
                   open=tuple(buckets["open"]), worse=tuple(buckets["worse"]), n=n, margin=delta, level=level,
                   comparisons=comparisons)


@dataclass(frozen=True, slots=True)
class PairedRatio:
    """``a / b`` seed by seed: the mean ratio over the common seeds and its 95 % t-interval.

    Attributes:
        interval: the ratios' mean and interval (``n`` common seeds).
        identical: ``a`` and ``b`` are exactly equal on every common seed.
        seeds: the common seeds.
    """

    interval: Interval
    identical: bool
    seeds: tuple[int, ...]

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 1 (never with one seed: no spread to exceed)."""
        return self.interval.n > 1 and not self.interval.low <= 1 <= self.interval.high


def paired_ratio(a: Mapping[int, float], b: Mapping[int, float]) -> PairedRatio | None:
    """``a_s / b_s`` over the seeds both have with ``b_s`` non-zero, or ``None`` without such a seed."""
    seeds = tuple(s for s in sorted(set(a) & set(b)) if b[s] != 0)
    if not seeds:
        return None
    ratios = [a[s] / b[s] for s in seeds]
    if not all(math.isfinite(r) for r in ratios):
        return None
    return PairedRatio(interval(ratios), all(a[s] == b[s] for s in seeds), seeds)
