"""Judging an interleaved A/B run: the paired time ratio with its interval, and the deterministic figures exactly.

Two revisions of the code train the same cell side by side, on the same machine, in one run: a *base* (the revision
given, e.g. the merge base) and a *current* one (the working tree). Each trains in *slices* (one epoch each), the two
sides taking turns in a balanced order (:func:`abba_order`: ``base current current base``, then ``current base base
current``, ...), so that whatever load the machine carries at a moment falls on both sides alike and a linear drift
within a round cancels. A round's *paired ratio* is the current side's mean time per optimizer step over the base
side's in that round; the cell's ratio is the geometric mean over rounds, with a Student-t 95 % interval on the
log ratios (rounds are the independent units: what one round shares, load, is removed by the pairing).

A slowdown is a ``regression`` when the whole interval lies above ``1 + threshold``: the threshold is the slowdown
worth failing a change for, and the interval says the run has measured it, not guessed it. A run too noisy to
tell says so: its *minimum detectable slowdown* (:func:`minimum_detectable`) is the ratio that would have cleared
the threshold with the interval's width this run measured.

Deterministic figures (status, every epoch's loss and counts, the held-out and validation figures, the memory
counted from tensors) must be equal to the last bit: both sides ran on the same machine, with the same numerics
environment, in the same run, so any difference is the code's (:func:`exact_differences`).

May import: :mod:`gradeff.analysis`, :mod:`gradeff.records` and below (the gate's floor); the slices themselves
are run by :mod:`gradeff.scale.ab`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gradeff.analysis.stats import interval
from gradeff.records.results import CellRecord, meter_field, record_field

__all__ = [
    "BASE", "CLOCKS", "CPU", "CURRENT", "CellAB", "DEFAULT_THRESHOLD", "RatioInterval", "SIDES", "Slice",
    "TimeVerdict", "WALL", "ab_lines", "abba_order", "balanced_order", "deterministic_figures", "exact_differences",
    "judge_time", "minimum_detectable", "ratio_interval", "round_log_ratios",
]

BASE, CURRENT = "base", "current"
SIDES = (BASE, CURRENT)
# The slowdown a change is failed for (the interval must lie wholly above 1 + this). Set from the calibration in
# docs/gate.md ("Time, side by side"): on the 2-core development machine under other engineers' load, 16 rounds,
# unchanged code flagged no cell at 3 %, and a x1.10 slowdown was caught in 90 % of cells at 3 % against 60 % at 5 %.
DEFAULT_THRESHOLD = 0.03
CONFIDENCE = 0.95
# The clocks a slice is timed on. ``cpu``: the worker's CPU seconds, which a competing load does not inflate by
# taking turns on the cores (docs/gate.md: its rounds scatter half as much as the wall clock's under load), the
# default on a CPU; ``wall``: the epoch's own seconds, which also see waiting (a sleep, I/O, a GPU).
CPU, WALL = "cpu", "wall"
CLOCKS = (CPU, WALL)
# Verdicts of the time row (the same words as gradeff.gate.rules).
REGRESSION, IMPROVEMENT, OK, NOT_COMPARED = "regression", "improvement", "ok", "not compared"


@dataclass(frozen=True, slots=True)
class Slice:
    """One slice a side trained in round ``round``: its optimizer steps, the epoch's training seconds (the wall clock
    the record keeps) and the CPU seconds the worker process spent on it."""

    side: str
    round: int
    seconds: float
    steps: int
    cpu: float | None = None

    def per_step(self, clock: str = WALL) -> float | None:
        """Seconds per optimizer step on ``clock`` (``wall`` or ``cpu``); ``None`` where not measured."""
        value = self.cpu if clock == CPU else self.seconds
        return value / self.steps if value is not None and value > 0 and self.steps > 0 else None


def balanced_order(sides: Sequence[str], rounds: int) -> tuple[tuple[int, str], ...]:
    """The order several sides take turns in: ``(round, side)``, each side twice a round, mirrored.

    Round ``r`` runs the sides rotated by ``r`` and then the same sequence backwards (``a b c c b a``, then ``b c a a c
    b``, ...): within a round each side's two slices sit symmetrically around the round's middle, so a linear drift
    in load adds the same to every side, and over rounds each side goes first and last equally often.

    Raises:
        ValueError: fewer than one round, or fewer than two distinct sides.
    """
    if rounds < 1:
        raise ValueError(f"an interleaved run needs at least one round, got {rounds}")
    if len(set(sides)) != len(sides) or len(sides) < 2:
        raise ValueError(f"an interleaved run needs two or more distinct sides, got {list(sides)}")
    order = []
    for r in range(rounds):
        k = r % len(sides)
        sequence = [*sides[k:], *sides[:k]]
        order += [(r, side) for side in (*sequence, *reversed(sequence))]
    return tuple(order)


def abba_order(rounds: int) -> tuple[tuple[int, str], ...]:
    """The A/B's order: ``base current current base``, then ``current base base current``, ... (four slices a round).

    Raises:
        ValueError: fewer than one round.
    """
    return balanced_order(SIDES, rounds)


def round_log_ratios(slices: Iterable[Slice], clock: str = CPU) -> list[float]:
    """Per round with both sides measured: ``log(current's mean time per step / base's)`` on ``clock``, in round
    order."""
    by_round: dict[int, dict[str, list[float]]] = {}
    for s in slices:
        if (per_step := s.per_step(clock)) is not None:
            by_round.setdefault(s.round, {}).setdefault(s.side, []).append(per_step)
    return [math.log(statistics.fmean(sides[CURRENT]) / statistics.fmean(sides[BASE]))
            for _, sides in sorted(by_round.items()) if BASE in sides and CURRENT in sides]


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """A paired ratio (current / base) and its two-sided interval over ``rounds`` rounds."""

    ratio: float
    low: float
    high: float
    rounds: int


def ratio_interval(log_ratios: Sequence[float], confidence: float = CONFIDENCE) -> RatioInterval | None:
    """The geometric-mean ratio with a Student-t interval on the log ratios; ``None`` with fewer than two rounds."""
    if len(log_ratios) < 2:
        return None
    mean = interval(list(log_ratios), confidence)
    return RatioInterval(math.exp(mean.mean), math.exp(mean.low), math.exp(mean.high), mean.n)


def minimum_detectable(measured: RatioInterval, threshold: float) -> float:
    """The smallest ratio this run could have called a regression: one whose interval, as wide below its estimate
    as this run's, would lie wholly above ``1 + threshold``."""
    return (1 + threshold) * measured.ratio / measured.low


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeVerdict:
    """The time row of one cell: the paired ratio, its interval, the verdict and what the run could detect."""

    verdict: str
    threshold: float
    measured: RatioInterval | None = None
    detectable: float | None = None
    clock: str = CPU
    note: str = ""


def judge_time(slices: Sequence[Slice], threshold: float = DEFAULT_THRESHOLD, clock: str = CPU,
               confidence: float = CONFIDENCE) -> TimeVerdict:
    """The verdict on a cell's slices: ``regression`` when the interval lies above ``1 + threshold``,
    ``improvement`` when it lies below ``1 / (1 + threshold)``, ``ok`` otherwise; ``not compared`` with fewer than
    two paired rounds.

    Args:
        slices: both sides' timed slices (warm-up slices left out).
        threshold: the relative slowdown worth failing for (0.03: 3 %).
        clock: ``cpu`` or ``wall`` (:data:`CLOCKS`).
        confidence: of the interval.

    Returns:
        The cell's :class:`TimeVerdict`.
    """
    if threshold < 0:
        raise ValueError(f"a threshold is a relative slowdown >= 0, got {threshold}")
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}; clocks: {', '.join(CLOCKS)}")
    measured = ratio_interval(round_log_ratios(slices, clock), confidence)
    if measured is None:
        return TimeVerdict(verdict=NOT_COMPARED, threshold=threshold, clock=clock,
                           note="fewer than two rounds with both sides measured")
    if measured.low > 1 + threshold:
        verdict = REGRESSION
    elif measured.high < 1 / (1 + threshold):
        verdict = IMPROVEMENT
    else:
        verdict = OK
    return TimeVerdict(verdict=verdict, threshold=threshold, measured=measured, clock=clock,
                       detectable=minimum_detectable(measured, threshold))


def deterministic_figures(record: CellRecord) -> dict[str, object]:
    """What a seeded cell repeats exactly on one machine: figure name → value (``None`` where not measured).

    The status; every epoch's loss, optimizer steps, closure calls, samples and held-out and validation figures;
    the parameter counts; the memory counted from tensors. Never a time or a sampled figure.
    """
    figures: dict[str, object] = {"status": record.status}
    for i, epoch in enumerate(record.epochs):
        for name in ("loss", "optimizer_steps", "closure_calls", "samples", "heldout_loss", "heldout_accuracy",
                     "validation_loss", "validation_accuracy"):
            figures[f"epochs[{i}].{name}"] = getattr(epoch, name)
    figures["epochs"] = len(record.epochs)
    figures["parameters.total"] = record_field(record, "parameters", "total")
    figures["parameters.trainable"] = record_field(record, "parameters", "trainable")
    figures["memory.parameter_bytes"] = meter_field(record, "memory", "parameter_bytes")
    figures["memory.trainable_parameter_bytes"] = meter_field(record, "memory", "trainable_parameter_bytes")
    figures["memory.gradient_bytes"] = meter_field(record, "memory", "gradient_bytes")
    figures["memory.optimizer_state_bytes"] = meter_field(record, "memory", "optimizer_state_bytes")
    figures["memory.activation_bytes"] = meter_field(record, "memory", "activation_bytes")
    figures["memory.peak_bytes"] = meter_field(record, "memory", "peak_bytes")
    return figures


def _same(a: object, b: object) -> bool:
    # NaN is a figure too (a diverged epoch's loss): NaN on both sides is the same outcome.
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def exact_differences(base: CellRecord, current: CellRecord) -> list[tuple[str, object, object]]:
    """Every deterministic figure that differs between the two sides: ``(name, base's, current's)``, in record order.

    Exact, not within a tolerance: both sides ran on the same machine in the same run, so a seeded cell repeats its
    figures to the last bit, and any difference is a change of behaviour (a learning rate 1 % off included).
    """
    a, b = deterministic_figures(base), deterministic_figures(current)
    return [(name, a.get(name), b.get(name)) for name in dict.fromkeys([*a, *b])
            if not _same(a.get(name), b.get(name))]


@dataclass(frozen=True, slots=True, kw_only=True)
class CellAB:
    """One cell's A/B outcome: its time verdict, its deterministic differences, and the slices behind them.

    Attributes:
        cell: the cell's id.
        time: the time verdict (``not compared`` when a side ended early or could not run the cell).
        differences: deterministic figures that differ, ``(name, base, current)``.
        slices: every timed slice of both sides (warm-up excluded), for a later look at the raw times.
        missing: the side that could not run the cell at all (``"base"``: a cell the older revision does not have;
            ``"current"``: a failure of the code under test, a regression), or ``""``.
        note: why, or what else the reader should know (a side that ended early).
    """

    cell: str
    time: TimeVerdict
    differences: tuple[tuple[str, object, object], ...] = ()
    slices: tuple[Slice, ...] = ()
    missing: str = ""
    note: str = ""

    @property
    def regressed(self) -> bool:
        """A time regression, a deterministic figure that changed, or a cell the current code could not run."""
        return self.time.verdict == REGRESSION or bool(self.differences) or self.missing == CURRENT

    def as_dict(self) -> dict:
        """Plain JSON-ready values: the verdict, the interval, the differences and every slice."""
        m = self.time.measured
        return {"cell": self.cell, "verdict": self.time.verdict, "threshold": self.time.threshold,
                "ratio": m.ratio if m else None, "low": m.low if m else None, "high": m.high if m else None,
                "rounds": m.rounds if m else 0, "detectable": self.time.detectable,
                "differences": [[name, _figure(a), _figure(b)] for name, a, b in self.differences],
                "missing": self.missing, "note": self.note or self.time.note,
                "clock": self.time.clock,
                "slices": [[s.side, s.round, s.seconds, s.cpu, s.steps] for s in self.slices]}


def _figure(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.17g}"
    return str(value)


def ab_lines(results: Sequence[CellAB], *, base: str, current: str) -> list[str]:
    """The A/B's table as text lines: per cell the ratio, its interval, the minimum detectable slowdown, the verdict,
    then every deterministic figure that differs; a total line last."""
    clock = next((r.time.clock for r in results), CPU)
    lines = [f"gradeff ab: {current} against {base}: time per optimizer step ({clock} clock), current / base, "
             f"{int(CONFIDENCE * 100)} % interval over paired rounds; 'detects': the smallest slowdown this run "
             f"could have failed",
             f"{'cell':34s} {'ratio':>7s} {'interval':>17s} {'detects':>8s} {'rounds':>6s}  verdict"]
    for result in results:
        t = result.time
        if t.measured is None:
            verdict = "REGRESSION" if result.missing == CURRENT else t.verdict
            lines.append(f"{result.cell:34s} {'':>7s} {'':>17s} {'':>8s} {'':>6s}  "
                         f"{verdict}: {result.note or t.note}")
        else:
            m = t.measured
            verdict = t.verdict if t.verdict != REGRESSION else f"REGRESSION (above x{1 + t.threshold:.3g})"
            lines.append(f"{result.cell:34s} {'x' + format(m.ratio, '.3f'):>7s} "
                         f"{f'x{m.low:.3f} - x{m.high:.3f}':>17s} {'x' + format(t.detectable, '.3f'):>8s} "
                         f"{m.rounds:>6d}  {verdict}")
            if result.note:
                lines.append(f"    {result.note}")
        for name, a, b in result.differences[:8]:
            lines.append(f"    changed {name}: {_figure(a)} -> {_figure(b)}")
        if len(result.differences) > 8:
            lines.append(f"    ... and {len(result.differences) - 8} more deterministic figures changed")
    slow = sum(r.time.verdict == REGRESSION for r in results)
    changed = sum(bool(r.differences) for r in results)
    failed = sum(r.missing == CURRENT for r in results)
    new = sum(r.missing == BASE for r in results)
    lines.append(f"gradeff ab: {len(results)} cells: {slow} slower beyond the threshold, {changed} with changed "
                 f"deterministic figures, {failed} the current code could not run, {new} the base could not run"
                 + (" -> REGRESSION" if any(r.regressed for r in results) else " -> no regression"))
    return lines
