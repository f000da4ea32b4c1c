"""The change points of a history series: the steps in a figure across commits, each with its first commit, its
size and its 95 % interval.

**Change points** (:func:`change_points`): PELT (``ruptures``) over a series in commit order, with a cost that weighs
each point by its own interval: the weighted squared distance to its segment's weighted mean, each point's weight
``1 / (s_i² + τ²)``, where ``s_i`` is the point's standard error (from its 95 % interval) and ``τ²`` the series' own
noise beyond the points' intervals, estimated robustly from successive differences (the larger of their median
absolute deviation and their root mean square without the largest ones: neither is inflated by a step). In those
units a segment's cost is a chi-square, so the penalty per change point is set once, :data:`PENALTY_PER_LOG_N` × ln n:
in simulated flat series of 6 to 25 points (``tests/gate/test_history.py``) a change point shows in under 1 % of
series whose intervals are right and in 3 - 11 % of those whose intervals understate the noise twofold, while a 15 %
step is found in 72 - 100 % of them. Time is taken in logs (a slowdown is a ratio); a
deterministic figure whose series never moves but at its steps gets the gate's exact tolerance (1e-6 relative) as
its noise, so any change beyond it is a change point. A change point names the first commit of the new level, the
ratio (or difference) of the two segments' weighted means and its 95 % interval.

May import: :mod:`gradeff.analysis`, :mod:`gradeff.records` and below (the gate's floor).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gradeff.gate.history import EXACT_RTOL, Commit, Point

__all__ = ["PENALTY_PER_LOG_N", "ChangePoint", "change_points"]

# z of a two-sided 95 % interval: a point's standard error is its interval's half-width over this.
_Z95 = 1.959963984540054
# Penalty per change point in chi-square units, times ln n (see the module docstring and its test).
PENALTY_PER_LOG_N = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangePoint:
    """A step in a series: the first commit of the new level, the levels before and after, and the step's size.

    Attributes:
        index: the point where the new level starts.
        before, after: the two segments' weighted means (in the metric's units).
        size, low, high: after / before with its 95 % interval (a ratio) for a log metric; after - before with its
            interval for the others.
        log: whether ``size`` is a ratio.
    """

    index: int
    commit: Commit
    before: float
    after: float
    size: float
    low: float
    high: float
    log: bool


def _standard_errors(points: Sequence[Point], log: bool) -> list[float]:
    errors = []
    for p in points:
        if p.low is None or p.high is None or p.high <= p.low:
            errors.append(0.0)
        elif log:
            errors.append((math.log(p.high) - math.log(p.low)) / (2 * _Z95))
        else:
            errors.append((p.high - p.low) / (2 * _Z95))
    return errors


def _weights(values: Sequence[float], errors: Sequence[float]) -> list[float]:
    """Each point's weight: 1 / (its own variance + the series' extra noise + the exactness floor)."""
    differences = [b - a for a, b in zip(values, values[1:])]
    extra = 0.0
    if len(differences) >= 2:
        centre = statistics.median(differences)
        # Two estimates a step (or a lone outlier: two large differences) does not inflate, the larger kept (each alone
        # understates the noise of a short series too often): the MAD of successive differences, and their root mean
        # square without the largest 1 + n/10 of them.
        mad = 1.4826 * statistics.median(abs(d - centre) for d in differences)
        rest = sorted(d * d for d in differences)[:-(1 + len(differences) // 10)]
        spread2 = max(mad * mad, statistics.fmean(rest))
        own = statistics.median(e * e for e in errors)
        extra = max(0.0, spread2 / 2 - own)
    return [1.0 / (e * e + extra + (EXACT_RTOL * max(abs(v), 1e-12)) ** 2) for v, e in zip(values, errors)]


def _cost_class():
    import numpy as np
    from ruptures.base import BaseCost

    class WeightedMeanCost(BaseCost):
        """A segment's weighted squared distance to its weighted mean: a chi-square when weights are 1/variance."""

        model = "weighted_mean"
        min_size = 1

        def fit(self, signal):
            self.signal = signal  # ruptures reads the number of samples from it
            values, weights = signal[:, 0], signal[:, 1]
            self._w = np.concatenate([[0.0], np.cumsum(weights)])
            self._wy = np.concatenate([[0.0], np.cumsum(weights * values)])
            self._wyy = np.concatenate([[0.0], np.cumsum(weights * values * values)])
            return self

        def error(self, start, end):
            w = self._w[end] - self._w[start]
            wy = self._wy[end] - self._wy[start]
            wyy = self._wyy[end] - self._wyy[start]
            return max(0.0, wyy - wy * wy / w) if w > 0 else 0.0

    return WeightedMeanCost


def change_points(points: Sequence[Point], *, log: bool, penalty: float | None = None) -> list[ChangePoint]:
    """The steps in a series (commit order), each with its commit, size and 95 % interval.

    Args:
        points: the series; a point's interval weighs it (none: only the series' own noise does).
        log: compare in logs (time: sizes are ratios).
        penalty: the cost of a change point in chi-square units (default :data:`PENALTY_PER_LOG_N` × ln n).

    Returns:
        The change points, oldest first; none for fewer than three points.
    """
    if len(points) < 3:
        return []
    if log and any(p.value <= 0 for p in points):
        raise ValueError("a log series needs positive values")
    import numpy as np
    import ruptures

    values = [math.log(p.value) if log else p.value for p in points]
    weights = _weights(values, _standard_errors(points, log))
    signal = np.column_stack([values, weights])
    pen = PENALTY_PER_LOG_N * math.log(len(points)) if penalty is None else penalty
    ends = ruptures.Pelt(custom_cost=_cost_class()(), min_size=1, jump=1).fit(signal).predict(pen=pen)
    bounds = [0, *ends]
    found = []
    for left, start, right in zip(bounds, bounds[1:], bounds[2:]):
        w1, w2 = sum(weights[left:start]), sum(weights[start:right])
        m1 = sum(w * v for w, v in zip(weights[left:start], values[left:start])) / w1
        m2 = sum(w * v for w, v in zip(weights[start:right], values[start:right])) / w2
        half = _Z95 * math.sqrt(1 / w1 + 1 / w2)
        d = m2 - m1
        if log:
            found.append(ChangePoint(index=start, commit=points[start].commit, before=math.exp(m1), after=math.exp(m2),
                                     size=math.exp(d), low=math.exp(d - half), high=math.exp(d + half), log=True))
        else:
            found.append(ChangePoint(index=start, commit=points[start].commit, before=m1, after=m2, size=d,
                                     low=d - half, high=d + half, log=False))
    return found
