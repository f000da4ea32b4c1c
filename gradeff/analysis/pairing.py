"""Comparisons over seeds, paired by seed: which cell wins, which tie, which are identical.

The cells of one model share their start and their data for a given seed (the same weights, the same
samples in the same order), so two cells are compared seed by seed: the differences ``a_s - b_s`` over
the seeds both have are tested against zero with a paired t-test (:func:`paired`). A seed's draw moves
both sides together, so pairing removes what the cells share and keeps what the choice changes.

A ranking (:func:`rank`) compares the best mean with every other cell; the p-values of one ranking are
adjusted with Holm's step-down method (:func:`holm`), so "A wins" at 5 % holds for the ranking as a
whole, not for each comparison alone. Its outcome is one of:

- ``winner``: every other cell is significantly worse;
- ``tie``: some cell cannot be told from the best (the tie set is named; a tie is never a win);
- ``identical``: the only cells are the same numbers on every seed (checkpointing leaves a loss
  bit-identical): merged and labelled, neither a tie nor a win;
- ``single draw``: the best has one seed: there is no spread to test against.

Cells with exactly the same values on every seed are merged into one entry wherever they stand. A
metric with a resolution (a sampled meter) treats differences up to it as none.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gradeff.analysis.stats import Interval, interval

__all__ = ["IDENTICAL", "OUTCOMES", "SINGLE_DRAW", "TIE", "WINNER", "Paired", "PairedRatio", "Ranking", "holm",
           "identical_groups", "paired", "paired_ratio", "rank"]

K = TypeVar("K", bound=Hashable)

WINNER, TIE, IDENTICAL, SINGLE_DRAW = "winner", "tie", "identical", "single draw"
OUTCOMES = (WINNER, TIE, IDENTICAL, SINGLE_DRAW)


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
    raw = [a[s] - b[s] for s in seeds]
    differences = tuple(0.0 if abs(d) <= resolution else d for d in raw)
    identical = bool(seeds) and all(d == 0 for d in raw)
    if len(seeds) < 2:
        return Paired(seeds, differences, identical, None)
    if all(d == 0 for d in differences):
        p = 1.0
    elif statistics.pvariance(differences) == 0:
        p = 0.0
    else:
        from scipy import stats

        # The paired t statistic, by hand: scipy's ttest_rel gives the same p but warns (catastrophic
        # cancellation) on the near-constant differences of near-identical cells, where this is exact enough.
        n = len(differences)
        t = statistics.fmean(differences) / (statistics.stdev(differences) / math.sqrt(n))
        p = float(2 * stats.t.sf(abs(t), n - 1))
    return Paired(seeds, differences, identical, p)


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
    """Keys whose values are the same on the same seeds (and whose ``fingerprints`` agree, where given), grouped;
    groups and members in the order given.

    Equal values alone can be a coincidence of a coarse metric (two accuracies of 48/256); a fingerprint of
    the whole run (its loss series) tells identical runs from cells that merely scored alike.
    """
    groups: dict[tuple, list[K]] = {}
    for key, values in samples.items():
        identity = (tuple(sorted(values.items())), None if fingerprints is None else fingerprints.get(key, key))
        groups.setdefault(identity, []).append(key)
    return [tuple(members) for members in groups.values()]


@dataclass(frozen=True, slots=True)
class Ranking(Generic[K]):
    """The outcome of comparing cells on one metric over seeds (see the module docstring).

    Attributes:
        outcome: one of :data:`OUTCOMES`.
        best: the key with the best mean (first in the order given among equal means).
        identical: the keys with exactly the best's values on every seed, the best first.
        ties: the other groups of identical keys that no test separates from the best.
        worse: the groups significantly worse than the best (after Holm's adjustment).
        n: the best's seeds.
        p_values: per group's first key, Holm-adjusted p against the best (``None``: fewer than two
            common seeds, so untested and counted as a tie).
    """

    outcome: str
    best: K
    identical: tuple[K, ...]
    ties: tuple[tuple[K, ...], ...] = ()
    worse: tuple[tuple[K, ...], ...] = ()
    n: int = 1
    p_values: Mapping[K, float | None] = field(default_factory=dict)

    @property
    def members(self) -> tuple[K, ...]:
        """Every key that shares the first place: the best, those identical to it, and the ties."""
        return self.identical + tuple(key for group in self.ties for key in group)


def _better_first(goal: str, means: Mapping[K, float]) -> list[K]:
    sign = 1 if goal == "min" else -1
    order = {key: index for index, key in enumerate(means)}
    return sorted(means, key=lambda key: (sign * means[key], order[key]))


def rank(samples: Mapping[K, Mapping[int, float]], *, goal: str = "min", level: float = 0.05,
         resolution: float = 0.0, fingerprints: Mapping[K, Hashable] | None = None) -> Ranking[K] | None:
    """Rank cells measured per seed: the best mean against every other group, paired by seed.

    Args:
        samples: key (a cell) → ``seed → value`` (keys without values are left out). The order given
            breaks ties between equal means.
        goal: ``min`` or ``max``.
        level: the family-wise significance level of the ranking.
        resolution: differences up to this size are no difference.
        fingerprints: key → what makes two runs the same run (see :func:`identical_groups`); without, equal
            values on the same seeds are identical.

    Returns:
        The ranking, or ``None`` without any value.
    """
    present = {key: dict(values) for key, values in samples.items() if values}
    if not present:
        return None
    means = {key: statistics.fmean(values.values()) for key, values in present.items()}
    best = _better_first(goal, means)[0]
    groups = identical_groups(present, fingerprints)
    best_group = next(group for group in groups if best in group)
    identical = (best, *(key for key in best_group if key != best))
    others = [group for group in groups if group is not best_group]
    n = len(present[best])
    if n < 2:
        # One draw: no spread to test against; only the same values share the place.
        equal = tuple(group for group in others if present[group[0]] == present[best])
        return Ranking(outcome=SINGLE_DRAW, best=best, identical=identical, ties=equal, n=n)
    tests = [paired(present[group[0]], present[best], resolution=resolution) for group in others]
    testable = [i for i, test in enumerate(tests) if test.p_value is not None]
    adjusted = dict(zip(testable, holm([tests[i].p_value for i in testable])))
    sign = 1 if goal == "min" else -1
    ties, worse, p_values = [], [], {}
    for index, group in enumerate(others):
        p = adjusted.get(index)
        p_values[group[0]] = p
        separated = p is not None and p < level and sign * tests[index].mean_difference > 0
        (worse if separated else ties).append(group)
    if ties:
        outcome = TIE
    elif not others and len(identical) > 1:
        outcome = IDENTICAL
    else:
        outcome = WINNER
    return Ranking(outcome=outcome, best=best, identical=identical, ties=tuple(ties), worse=tuple(worse), n=n,
                   p_values=p_values)


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
