"""What every claim check shares: the verdicts, a claim's shape, a paired effect over seeds and the rules that
turn it into a verdict against a paper's range (see :mod:`gradeff.analysis.claims` for the rules in words).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from gradeff.analysis.metrics import Metric
from gradeff.analysis.runs import seed_values
from gradeff.analysis.stats import Interval, interval
from gradeff.records.results import CellRecord

__all__ = ["CONTRADICTED", "NOT_MEASURABLE", "NOT_REPRODUCED", "REPRODUCED", "SINGLE_DRAW", "VERDICTS", "Claim",
           "Effect", "cell_axes", "effect_of", "effect_verdict", "paired_changes", "percent_change", "range_verdict"]

VERDICTS = ("reproduced", "not reproduced", "contradicted", "not measurable here")
REPRODUCED, NOT_REPRODUCED, CONTRADICTED, NOT_MEASURABLE = VERDICTS
# A claim's effect measured on one seed: a draw, not an interval.
SINGLE_DRAW = "single draw"


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A claim of a paper, the grids it reads, and how to check it."""

    study: str
    key: str
    claim: str
    grids: tuple[str, ...]
    check: Callable[[Sequence[CellRecord]], tuple[str, str, str, int]]  # → (measured, verdict, why, seeds)


@dataclass(frozen=True, slots=True)
class Effect:
    """A claim's effect over seeds: the per-seed statistic's mean and 95 % t-interval.

    ``within_spread`` holds when several seeds give an interval that contains 0: no effect is measured.
    """

    spread: Interval

    @property
    def value(self) -> float:
        return self.spread.mean

    @property
    def n(self) -> int:
        return self.spread.n

    @property
    def within_spread(self) -> bool:
        return self.n > 1 and self.spread.low <= 0 <= self.spread.high

    def text(self, unit: str = "%") -> str:
        """``+25.0 % (95 % interval +24.1 to +25.9, n=3 seeds)``; a unitless effect (a loss) to 3 significant digits."""
        spec = "+.3g" if not unit else "+.1f"
        value = f"{self.value:{spec}} {unit}".rstrip()
        if self.n == 1:
            return f"{value} ({SINGLE_DRAW})"
        return (f"{value} (95 % interval {self.spread.low:{spec}} to {self.spread.high:{spec}}, "
                f"n={self.n} seeds)")


def effect_of(per_pair: Mapping[Hashable, Mapping[int, float]]) -> Effect | None:
    """The median over pairs of each seed's values, summarised over seeds; ``None`` without a value.

    Args:
        per_pair: pair (e.g. model and optimizer) → seed → that pair's effect on that seed.
    """
    seeds = sorted({seed for values in per_pair.values() for seed in values})
    per_seed = [statistics.median(v[seed] for v in per_pair.values() if seed in v) for seed in seeds]
    return Effect(interval(per_seed)) if per_seed else None


def range_verdict(measured_low: float, measured_high: float, low: float, high: float, *, wrong_way: bool) -> str:
    """``reproduced`` where the measured interval ``[measured_low, measured_high]`` meets the paper's ``[low, high]``;
    ``contradicted`` if the effect goes the wrong way (``wrong_way``); ``not reproduced`` otherwise."""
    if wrong_way:
        return CONTRADICTED
    return REPRODUCED if measured_low <= high and low <= measured_high else NOT_REPRODUCED


def effect_verdict(effect: Effect, low: float, high: float, *, wrong_sign: int) -> str:
    """The verdict on an effect the paper puts in ``[low, high]`` (a range that excludes 0).

    Args:
        effect: the measured effect over seeds.
        low, high: the paper's range; it is widened by the effect's own 95 % interval only.
        wrong_sign: ``+1`` when a positive effect goes against the claim, ``-1`` when a negative one does, ``0``
            when neither does.

    Returns:
        ``not reproduced`` for an effect within the seed spread (nothing measured either way),
        ``contradicted`` for one on the wrong side, else :func:`range_verdict` of its interval.
    """
    if effect.within_spread:
        return NOT_REPRODUCED
    return range_verdict(effect.spread.low, effect.spread.high, low, high,
                         wrong_way=wrong_sign * effect.value > 0)


def paired_changes(tops: Sequence[CellRecord], bottoms: Sequence[CellRecord], match: Callable[[CellRecord], Hashable],
             metric: str | Metric, change: Callable[[float, float], float]) -> dict[str, dict[int, float]]:
    """Per cell of ``tops``, per seed: ``change(top, bottom)`` of ``metric`` against the cell of ``bottoms`` it
    matches (``match``: what the two share), on the seeds both ended ok with the metric measured."""
    references: dict[Hashable, list[CellRecord]] = {}
    for record in bottoms:
        references.setdefault(match(record), []).append(record)
    cells: dict[str, list[CellRecord]] = {}
    for record in tops:
        cells.setdefault(record.cell, []).append(record)
    result = {}
    for cell, group in cells.items():
        top, bottom = seed_values(group, metric), seed_values(references.get(match(group[0]), ()), metric)
        values = {s: change(top[s], bottom[s]) for s in sorted(set(top) & set(bottom)) if bottom[s] != 0}
        if values:
            result[cell] = values
    return result


def percent_change(top: float, bottom: float) -> float:
    return 100 * (top / bottom - 1)


def cell_axes(record: CellRecord) -> tuple:
    return record.model, record.optimizer, record.method, record.dataset

