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
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Interval", "interval"]

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
