"""Statistics over repeated seeds: intervals, significance-aware winners, time to a target.

A cell run with several seeds has one value of a metric per seed. Its :class:`Interval` is the mean
with a Student-t confidence interval (the seeds are few — 3 to 10 — and a bootstrap of 3 values is
not an interval). Two cells differ when Welch's t-test (unequal variances) rejects equal means at
the given level; the winners of a metric are the best cell and every cell that does not differ
from it, so "A wins" is said only when the data carry it and "A, B tie" otherwise. With one seed
per cell there is no spread: nothing is significant, and a winner is reported as unconfirmed.

Time to target (AlgoPerf's primary measure): the optimizer steps, seconds and joules a cell needed
until its held-out loss first reached a target, per task the halfway point between the untrained
model's held-out loss and the task's floor (or half the untrained loss where the floor is unknown).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Interval", "Winners", "differs", "interval", "winners"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean over seeds and its confidence interval (``low == high == mean`` with one seed)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` with a two-sided Student-t confidence interval.

    Raises:
        ValueError: no values, or a confidence outside (0, 1).
    """
    if not values:
        raise ValueError("an interval needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = statistics.fmean(values)
    if len(values) == 1:
        return Interval(mean, mean, mean, 1)
    from scipy import stats

    half = stats.t.ppf((1 + confidence) / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def differs(a: Sequence[float], b: Sequence[float], level: float = 0.05) -> bool:
    """Whether the means of two samples differ at ``level`` by Welch's t-test.

    Fewer than two values on a side, or no spread on both: there is no evidence either way, so
    ``False`` unless the constant values themselves differ (identical repeated values of a
    deterministic run are a measurement, not noise).
    """
    if len(a) < 2 or len(b) < 2:
        return False
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        return statistics.fmean(a) != statistics.fmean(b)
    from scipy import stats

    return bool(stats.ttest_ind(a, b, equal_var=False).pvalue < level)


@dataclass(frozen=True, slots=True)
class Winners:
    """The best key of a metric and the keys not significantly worse (``ties``, best included).

    ``confirmed`` is false when no key had two seeds: the best mean is then a single draw.
    """

    best: object
    ties: tuple
    confirmed: bool

    @property
    def tie(self) -> bool:
        return len(self.ties) > 1


def winners(samples: Mapping[K, Sequence[float]], *, goal: str = "min", level: float = 0.05) -> Winners | None:
    """The significance-aware winners of a metric measured per seed.

    Args:
        samples: key (a cell) → its values over seeds (empty sequences are left out).
        goal: ``min`` or ``max``.
        level: the test's significance level.

    Returns:
        The winners, or ``None`` without any value.
    """
    present = {key: list(values) for key, values in samples.items() if values}
    if not present:
        return None
    sign = 1 if goal == "min" else -1
    means = {key: statistics.fmean(values) for key, values in present.items()}
    best = min(present, key=lambda key: sign * means[key])
    confirmed = any(len(v) > 1 for v in present.values())
    if not confirmed:
        # One draw each: no spread to test against; only exactly equal means share the place.
        return Winners(best=best, ties=tuple(key for key in present if means[key] == means[best]), confirmed=False)
    ties = tuple(key for key in present if key == best or not differs(present[key], present[best], level))
    return Winners(best=best, ties=ties, confirmed=True)
