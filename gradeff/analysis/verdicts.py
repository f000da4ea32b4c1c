"""A group of cells ranked on each question the Answer asks: quality, speed, memory and energy.

One group is the cells a user chooses between for one model (the main study) or one backbone on one
dataset (the PEFT study). :func:`verdict` ranks its cells on one objective's metric
(:func:`gradeff.analysis.metrics.objective_metric`) over every seed, paired by seed
(:func:`gradeff.analysis.pairing.rank`). Only cells that ended ok compete; on speed and energy a cell
competes only if every ok seed reached the target (an average over the seeds that happened to reach
it would flatter it), and the others are named as left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gradeff.analysis.metrics import ANSWER_OBJECTIVES, Metric, objective_metric, target_reading
from gradeff.analysis.pairing import Ranking, rank
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.analysis.stats import Interval
from gradeff.records.results import CellRecord

__all__ = ["Verdict", "verdict", "verdicts"]

_TO_TARGET = ("speed", "energy")


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One group's cells ranked on one objective.

    Attributes:
        objective: one of :data:`~gradeff.analysis.metrics.ANSWER_OBJECTIVES`.
        metric: the metric compared (``None`` where the group has none for this objective).
        ranking: the ranking of cell ids (``None`` with no cell to rank: see ``reason``).
        runs: every cell of the group over its seeds, by id.
        reason: why there is no ranking (``""`` when there is one).
        left_out: cells that could not compete, each with why (``vit-sgd-standard: not reached on 3 of 3 seeds``).
    """

    objective: str
    metric: Metric | None
    ranking: Ranking[str] | None
    runs: Mapping[str, CellRuns]
    reason: str = ""
    left_out: tuple[str, ...] = ()

    @property
    def best(self) -> CellRuns | None:
        return None if self.ranking is None else self.runs[self.ranking.best]

    @property
    def interval(self) -> Interval | None:
        """The best cell's mean over its seeds and its 95 % t-interval."""
        return None if self.ranking is None or self.metric is None else self.best.interval(self.metric)

    def groups(self) -> tuple[tuple[CellRuns, ...], ...]:
        """The first place: the best's identical group, then each tied group (cells of a group are identical)."""
        if self.ranking is None:
            return ()
        return tuple(tuple(self.runs[cell] for cell in group)
                     for group in (self.ranking.identical, *self.ranking.ties))


def _unreached(cell_runs: CellRuns) -> str:
    ok = cell_runs.ok
    missed = sum(target_reading(r).state != "reached" for r in ok)
    if not ok or not missed:
        return ""
    states = {target_reading(r).state for r in ok if target_reading(r).state != "reached"}
    return f"{cell_runs.cell}: {' / '.join(sorted(states))} on {missed} of {len(ok)} seeds"


def verdict(runs: Mapping[str, CellRuns], objective: str) -> Verdict:
    """Rank one group's cells (``runs``, in canonical order) on ``objective``.

    Returns:
        The :class:`Verdict`; without an ok cell that measured the metric, its ``reason`` says so.
    """
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    metric = objective_metric(objective, records)
    if metric is None:
        return Verdict(objective=objective, metric=None, ranking=None, runs=runs,
                       reason="no ok cell measured it (the live-tensor peak, or RSS in isolated processes)")
    left_out = tuple(text for text in (_unreached(c) for c in runs.values()) if text) \
        if objective in _TO_TARGET else ()
    skipped = {text.split(":", 1)[0] for text in left_out}
    samples = {cell: cell_runs.values(metric) for cell, cell_runs in runs.items() if cell not in skipped}
    ranking = rank(samples, goal=metric.goal, resolution=metric.resolution,
                   fingerprints={cell: runs[cell].fingerprint() for cell in samples})
    if ranking is None:
        reason = "no ok cell measured it"
        if objective in _TO_TARGET and left_out:
            reached_somewhere = any("not reached" in text for text in left_out)
            reason = ("no cell reached the target on every seed" if reached_somewhere else
                      "no target to reach (no test split, or no epoch trained)")
        return Verdict(objective=objective, metric=metric, ranking=None, runs=runs, reason=reason, left_out=left_out)
    return Verdict(objective=objective, metric=metric, ranking=ranking, runs=runs, left_out=left_out)


def verdicts(records: Iterable[CellRecord]) -> dict[str, Verdict]:
    """Every objective's :class:`Verdict` for one group of cells (records of any seeds, in any order)."""
    runs = by_cell(records)
    return {objective: verdict(runs, objective) for objective in ANSWER_OBJECTIVES}
