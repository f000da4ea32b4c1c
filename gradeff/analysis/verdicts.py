"""A group of cells ranked on each question the Answer asks: quality, speed, memory and energy.

One group is the cells a user chooses between for one model (the main study) or one backbone on one
dataset (the PEFT study). :func:`verdict` ranks its cells on one objective's metric
(:func:`gradeff.analysis.metrics.objective_metric`) over every seed, paired by seed, with the question's
practical-equivalence margin (:mod:`gradeff.analysis.margins`; :func:`gradeff.analysis.pairing.rank`). Only cells
that ended ok compete; on speed and energy a cell competes only if every ok seed reached the target (an average
over the seeds that happened to reach it would flatter it), and the others are named as left out.

Two rules keep noise from deciding what it cannot:

- **time to target**: two cells that reach the target at the same optimizer step on every seed did the same work to
  get there; their seconds then differ by the per-step time alone, and where that difference is within the timer's
  own measured noise (:func:`step_time_noise`: the spread of a cell's per-step time from epoch to epoch) they are
  equivalent, whatever a test over a few seeds would say;
- **energy**: an energy *estimate* is CPU time × a fixed power, so it orders cells exactly as their time does and
  names no winner of its own ("estimate, follows time"); only a measured energy (NVML, RAPL) is ranked.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gradeff.analysis.margins import Margin, margin_for
from gradeff.analysis.metrics import ANSWER_OBJECTIVES, Metric, objective_metric, target_reading
from gradeff.analysis.pairing import Ranking, rank
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.analysis.stats import Interval
from gradeff.records.results import CellRecord, meter_field

__all__ = ["ESTIMATE_FOLLOWS_TIME", "Verdict", "energy_is_estimated", "step_time_noise", "verdict", "verdicts"]

_TO_TARGET = ("speed", "energy")
ESTIMATE_FOLLOWS_TIME = "estimate, follows time"


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
        margin: the practical-equivalence margin the ranking used (``None`` without a ranking).
    """

    objective: str
    metric: Metric | None
    ranking: Ranking[str] | None
    runs: Mapping[str, CellRuns]
    reason: str = ""
    left_out: tuple[str, ...] = ()
    margin: Margin | None = None

    @property
    def best(self) -> CellRuns | None:
        return None if self.ranking is None else self.runs[self.ranking.best]

    @property
    def interval(self) -> Interval | None:
        """The best cell's mean over its seeds and its 95 % t-interval."""
        return None if self.ranking is None or self.metric is None else self.best.interval(self.metric)

    def groups(self) -> tuple[tuple[CellRuns, ...], ...]:
        """The first place: the best's identical group, then each equivalent and each open group."""
        if self.ranking is None:
            return ()
        return tuple(tuple(self.runs[cell] for cell in group)
                     for group in (self.ranking.identical, *self.ranking.equivalent, *self.ranking.open))


def _unreached(cell_runs: CellRuns) -> str:
    ok = cell_runs.ok
    missed = sum(target_reading(r).state != "reached" for r in ok)
    if not ok or not missed:
        return ""
    states = {target_reading(r).state for r in ok if target_reading(r).state != "reached"}
    return f"{cell_runs.cell}: {' / '.join(sorted(states))} on {missed} of {len(ok)} seeds"


def energy_is_estimated(records: Iterable[CellRecord]) -> bool:
    """Whether any ok record's energy is the CPU-time estimate rather than a meter's reading."""
    return any(meter_field(r, "energy", "source") == "estimate" for r in records if r.status == "ok")


def step_time_noise(record: CellRecord) -> float | None:
    """The timer's noise on one cell: the relative spread (stdev / mean) of its per-step time over its epochs,
    ``None`` with fewer than two timed epochs."""
    per_step = [e.seconds / e.optimizer_steps for e in record.epochs if e.optimizer_steps and e.seconds > 0]
    if len(per_step) < 2:
        return None
    return statistics.stdev(per_step) / statistics.fmean(per_step)


def _same_step_equal(runs: Mapping[str, CellRuns]):
    """The speed rule: same step to target on every common seed, and seconds apart by less than the noise."""
    def steps(cell: str) -> dict[int, float]:
        return {r.seed: target_reading(r).steps for r in runs[cell].ok}

    def equal(a: str, b: str) -> bool:
        first, second = steps(a), steps(b)
        seeds = sorted(set(first) & set(second))
        if not seeds or any(first[s] != second[s] for s in seeds):
            return False
        noise = [n for cell in (a, b) for r in runs[cell].ok if r.seed in seeds
                 if (n := step_time_noise(r)) is not None]
        if not noise:
            return False
        seconds_a, seconds_b = runs[a].values("seconds_to_target"), runs[b].values("seconds_to_target")
        gaps = [abs(seconds_a[s] - seconds_b[s]) / min(seconds_a[s], seconds_b[s]) for s in seeds
                if s in seconds_a and s in seconds_b and min(seconds_a[s], seconds_b[s]) > 0]
        # Two standard deviations of the per-step time: what one timer reading of the same work spans.
        return bool(gaps) and statistics.fmean(gaps) <= 2 * max(noise)

    return equal


def verdict(runs: Mapping[str, CellRuns], objective: str, *, level: float = 0.05,
            margins: Mapping[str, Margin] | None = None) -> Verdict:
    """Rank one group's cells (``runs``, in canonical order) on ``objective``.

    Args:
        runs: the group's cells over their seeds.
        objective: one of :data:`~gradeff.analysis.metrics.ANSWER_OBJECTIVES`.
        level: the significance level of every test (a sequential plan's per-look level).
        margins: question → margin overriding :data:`~gradeff.analysis.margins.DEFAULT_MARGINS`.

    Returns:
        The :class:`Verdict`; without an ok cell that measured the metric, its ``reason`` says so.
    """
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    metric = objective_metric(objective, records)
    if metric is None:
        return Verdict(objective=objective, metric=None, ranking=None, runs=runs,
                       reason="no ok cell measured it (the live-tensor peak, or RSS in isolated processes)")
    if objective == "energy" and energy_is_estimated(records):
        return Verdict(objective=objective, metric=metric, ranking=None, runs=runs, reason=ESTIMATE_FOLLOWS_TIME)
    left_out = tuple(text for text in (_unreached(c) for c in runs.values()) if text) \
        if objective in _TO_TARGET else ()
    skipped = {text.split(":", 1)[0] for text in left_out}
    samples = {cell: cell_runs.values(metric) for cell, cell_runs in runs.items() if cell not in skipped}
    margin = margin_for(objective, metric.unit, margins)
    ranking = rank(samples, goal=metric.goal, resolution=metric.resolution, level=level,
                   fingerprints={cell: runs[cell].fingerprint() for cell in samples},
                   margin=margin.absolute, relative_margin=margin.relative,
                   equal=_same_step_equal(runs) if objective == "speed" else None)
    if ranking is None:
        reason = "no ok cell measured it"
        if objective in _TO_TARGET and left_out:
            reached_somewhere = any("not reached" in text for text in left_out)
            reason = ("no cell reached the target on every seed" if reached_somewhere else
                      "no target to reach (no test split, or no epoch trained)")
        return Verdict(objective=objective, metric=metric, ranking=None, runs=runs, reason=reason, left_out=left_out)
    return Verdict(objective=objective, metric=metric, ranking=ranking, runs=runs, left_out=left_out, margin=margin)


def verdicts(records: Iterable[CellRecord], *, level: float = 0.05,
             margins: Mapping[str, Margin] | None = None) -> dict[str, Verdict]:
    """Every objective's :class:`Verdict` for one group of cells (records of any seeds, in any order)."""
    runs = by_cell(records)
    return {objective: verdict(runs, objective, level=level, margins=margins) for objective in ANSWER_OBJECTIVES}

