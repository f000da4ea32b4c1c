"""Figures across commits: an SQLite history store, the change points of each series, and the bisection of a range.

**The store** is one SQLite file (Python's ``sqlite3``: no server), one row per commit × machine × cell × seed ×
metric, with the commit's date and subject beside it, and the *setting* the figure was measured in: ``grid`` for a
pytest session's cells (the profile's epochs, the wall clock: ``--gradeff-history PATH``), or the slices of a
side-by-side run (``gradeff history run``: its epochs are short slices, so its losses are not the grid's, and its
clock is the CPU's, :func:`slices_setting`). A machine is named by a fingerprint of what decides its numbers (CPU
model and id, logical CPUs, torch threads, device, torch and transformers versions, :func:`machine_of`): series of
different machines, or of different settings, never mix.

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

**Bisection** (:func:`bisect_change`): as ``asv find``, the endpoints are measured, then each step measures the
middle commit together with the current endpoints (one interleaved run, so load cancels) and keeps the half whose
ends differ more: about log2 N runs for N commits.

May import: :mod:`gradeff.analysis`, :mod:`gradeff.records` and below (the gate's floor).
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gradeff.gate.ab import CPU, Slice
from gradeff.records.results import CellRecord, meter_field, record_field

__all__ = [
    "Bisection", "ChangePoint", "Commit", "Estimate", "GRID_SETTING", "HistoryStore", "METRICS", "Measurement",
    "Metric", "PENALTY_PER_LOG_N", "Point", "SCHEMA_VERSION", "bisect_change", "change_points",
    "interleaved_estimates", "machine_of", "measurements_of_record", "slices_setting", "time_estimate",
]

SCHEMA_VERSION = 1
# The setting of a pytest session's figures: the grid's cells as they run (the profile's epochs, the wall clock).
GRID_SETTING = "grid"
# z of a two-sided 95 % interval: a point's standard error is its interval's half-width over this.
_Z95 = 1.959963984540054
# Penalty per change point in chi-square units, times ln n (see the module docstring and its test).
PENALTY_PER_LOG_N = 5.0
# The gate's exact tolerance: a deterministic figure's noise floor, relative to its size.
_EXACT_RTOL = 1e-6


@dataclass(frozen=True, slots=True)
class Metric:
    """A figure the history follows: its name, unit, and whether it is compared in logs (time: a ratio)."""

    name: str
    label: str
    unit: str
    log: bool
    deterministic: bool


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("time_per_step", "time per optimizer step", "s", log=True, deterministic=False),
    Metric("final_loss", "final training loss", "", log=False, deterministic=True),
    Metric("heldout_loss", "final test loss", "", log=False, deterministic=True),
    Metric("heldout_accuracy", "final test accuracy", "", log=False, deterministic=True),
    Metric("peak_bytes", "peak memory counted from tensors", "B", log=False, deterministic=True),
)}


@dataclass(frozen=True, slots=True)
class Commit:
    """A commit as the history shows it: its hash, committer date (ISO 8601) and subject line."""

    commit: str
    date: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One row of the store: a figure of a cell at a commit on a machine, with its 95 % interval where measured."""

    commit: str
    machine: str
    cell: str
    seed: int
    metric: str
    value: float
    low: float | None = None
    high: float | None = None
    samples: int = 1
    run: str = ""
    source: str = ""
    setting: str = GRID_SETTING


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """A series' point: its commit (with date and subject), value and interval, in commit order."""

    commit: Commit
    value: float
    low: float | None = None
    high: float | None = None
    run: str = ""


@dataclass(frozen=True, slots=True)
class Estimate:
    """A measured value with its 95 % interval (``low == high == value`` for an exact figure)."""

    value: float
    low: float
    high: float


_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS commits (commit_id TEXT PRIMARY KEY, date TEXT NOT NULL, message TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS machines (machine TEXT PRIMARY KEY, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    commit_id TEXT NOT NULL, machine TEXT NOT NULL, cell TEXT NOT NULL, seed INTEGER NOT NULL, metric TEXT NOT NULL,
    setting TEXT NOT NULL, value REAL NOT NULL, low REAL, high REAL, samples INTEGER NOT NULL, run TEXT NOT NULL,
    source TEXT NOT NULL, recorded TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
    PRIMARY KEY (commit_id, machine, cell, seed, metric, setting));
"""


class HistoryStore:
    """The history in one SQLite file, created on first use; use as a context manager (commits on exit).

    Raises:
        ValueError: the file is not a history store of a version this code reads.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise ValueError(f"{self.path} is a folder; give the history's file path")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path)
            self._db.executescript(_TABLES)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{self.path}: not a gradeff history store ({exc})") from None
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif row[0] != str(SCHEMA_VERSION):
            raise ValueError(f"{self.path}: history schema version {row[0]}; this gradeff reads {SCHEMA_VERSION}")

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close(commit=exc[0] is None)

    def close(self, commit: bool = True) -> None:
        if commit:
            self._db.commit()
        self._db.close()

    def add_commit(self, commit: Commit) -> None:
        self._db.execute("INSERT OR REPLACE INTO commits VALUES (?, ?, ?)",
                         (commit.commit, commit.date, commit.message))

    def add_machine(self, machine: str, description: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO machines VALUES (?, ?)", (machine, description))

    def add(self, measurements: Iterable[Measurement]) -> int:
        """Write measurements; a row of the same commit, machine, cell, seed, metric and setting is replaced. Returns
        how many.

        Raises:
            ValueError: a metric the history does not follow, or a non-finite value.
        """
        rows = []
        for m in measurements:
            if m.metric not in METRICS:
                raise ValueError(f"unknown metric {m.metric!r}; metrics: {', '.join(METRICS)}")
            if not math.isfinite(m.value):
                raise ValueError(f"{m.cell} {m.metric} at {m.commit[:10]}: {m.value} is not a finite figure")
            rows.append((m.commit, m.machine, m.cell, m.seed, m.metric, m.setting, m.value, m.low, m.high, m.samples,
                         m.run, m.source))
        self._db.executemany("INSERT OR REPLACE INTO measurements (commit_id, machine, cell, seed, metric, setting, "
                             "value, low, high, samples, run, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             rows)
        return len(rows)

    def commits(self) -> list[Commit]:
        """Every commit with a measurement, oldest first (by committer date)."""
        return [Commit(*row) for row in self._db.execute(
            "SELECT commit_id, date, message FROM commits WHERE commit_id IN (SELECT commit_id FROM measurements) "
            "ORDER BY date, commit_id")]

    def machines(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT machine, description FROM machines ORDER BY machine"))

    def keys(self, machine: str | None = None) -> list[tuple[str, str, int, str, str]]:
        """Every ``(machine, cell, seed, metric, setting)`` with a series, sorted."""
        query = "SELECT DISTINCT machine, cell, seed, metric, setting FROM measurements"
        args: tuple = ()
        if machine is not None:
            query, args = query + " WHERE machine = ?", (machine,)
        return sorted(self._db.execute(query, args))

    def series(self, machine: str, cell: str, metric: str, seed: int = 0,
               setting: str = GRID_SETTING) -> list[Point]:
        """One series in commit order (committer date, then hash)."""
        rows = self._db.execute(
            "SELECT c.commit_id, c.date, c.message, m.value, m.low, m.high, m.run FROM measurements m "
            "JOIN commits c ON c.commit_id = m.commit_id WHERE m.machine = ? AND m.cell = ? AND m.metric = ? "
            "AND m.seed = ? AND m.setting = ? ORDER BY c.date, c.commit_id", (machine, cell, metric, seed, setting))
        return [Point(commit=Commit(commit, date, message), value=value, low=low, high=high, run=run)
                for commit, date, message, value, low, high, run in rows]

    def measurement(self, commit: str, machine: str, cell: str, metric: str, seed: int = 0,
                    setting: str = GRID_SETTING) -> Measurement | None:
        row = self._db.execute(
            "SELECT value, low, high, samples, run, source FROM measurements WHERE commit_id = ? AND machine = ? "
            "AND cell = ? AND metric = ? AND seed = ? AND setting = ?",
            (commit, machine, cell, metric, seed, setting)).fetchone()
        if row is None:
            return None
        value, low, high, samples, run, source = row
        return Measurement(commit=commit, machine=machine, cell=cell, seed=seed, metric=metric, value=value, low=low,
                           high=high, samples=samples, run=run, source=source, setting=setting)


# What decides a machine's numbers, read from a record's environment (the gate's environment check reads the same).
_FINGERPRINT = ("cpu", "cpu_id", "cpu_count", "torch_threads", "device", "device_name", "torch", "transformers")


def machine_of(record: CellRecord) -> tuple[str, str]:
    """A record's machine: a short fingerprint and a one-line description of what it was made of."""
    env = {
        "cpu": record_field(record, "environment", "cpu"),
        "cpu_id": record_field(record, "environment", "cpu_id"),
        "cpu_count": record_field(record, "environment", "cpu_count"),
        "torch_threads": record_field(record, "environment", "torch_threads"),
        "device": record_field(record, "environment", "device"),
        "device_name": record_field(record, "environment", "device_name"),
        "torch": record_field(record, "environment", "torch"),
        "transformers": record_field(record, "environment", "transformers"),
    }
    text = "; ".join(f"{key}={env[key]}" for key in _FINGERPRINT if env[key] not in (None, ""))
    return hashlib.sha256(text.encode()).hexdigest()[:12], text


def time_estimate(per_step: Sequence[float]) -> Estimate | None:
    """Seconds per step from repeated measurements: the geometric mean with a t-interval on the logs."""
    values = [math.log(v) for v in per_step if v > 0 and math.isfinite(v)]
    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) == 1:
        return Estimate(math.exp(mean), math.exp(mean), math.exp(mean))
    from scipy import stats

    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Estimate(math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def interleaved_estimates(slices: Iterable[Slice], clock: str = CPU) -> dict[str, Estimate]:
    """Each side's time per step from one interleaved run of several sides, comparable across the sides.

    Per round (every side measured), each side's log time per step less the round's mean over the sides: what load
    a round carried falls on every side alike and cancels. A side's estimate is the run's overall level times the
    geometric mean of its round-relative times, with a Student-t 95 % interval over the rounds.
    """
    by_round: dict[int, dict[str, list[float]]] = {}
    for s in slices:
        if (per_step := s.per_step(clock)) is not None:
            by_round.setdefault(s.round, {}).setdefault(s.side, []).append(math.log(per_step))
    sides = sorted({side for sides in by_round.values() for side in sides})
    complete = [{side: statistics.fmean(v) for side, v in sides_.items()} for _, sides_ in sorted(by_round.items())
                if set(sides_) == set(sides)]
    if not complete or len(sides) < 2:
        return {}
    level = statistics.fmean(statistics.fmean(r.values()) for r in complete)
    estimates = {}
    for side in sides:
        relative = [r[side] - statistics.fmean(r.values()) for r in complete]
        mean = statistics.fmean(relative)
        half = 0.0
        if len(relative) > 1:
            from scipy import stats

            half = stats.t.ppf(0.975, len(relative) - 1) * statistics.stdev(relative) / math.sqrt(len(relative))
        estimates[side] = Estimate(math.exp(level + mean), math.exp(level + mean - half), math.exp(level + mean + half))
    return estimates


def slices_setting(*, rounds: int, warmup: int, slice_steps: int | None, clock: str) -> str:
    """The setting of a side-by-side run's figures: how many epochs of how many batches, on which clock."""
    size = f"{slice_steps}-batch" if slice_steps else "whole"
    return f"slices: {warmup + 2 * rounds} {size} epochs, {clock} clock"


def measurements_of_record(record: CellRecord, *, commit: str, machine: str, run: str, source: str,
                           time: Estimate | None = None, setting: str = GRID_SETTING) -> list[Measurement]:
    """A record's rows: its time per step (``time``, else its epochs' own), final losses, test accuracy, peak.

    A figure the record lacks (a failed cell, no test split) is left out, never written as 0.
    """
    if time is None:
        time = time_estimate([e.seconds / e.optimizer_steps for e in record.epochs if e.optimizer_steps])
    summary = record.summary
    values: dict[str, Estimate | float | None] = {
        "time_per_step": time if record.status == "ok" else None,
        "final_loss": summary.final_loss if summary is not None else None,
        "heldout_loss": summary.final_heldout_loss if summary is not None else None,
        "heldout_accuracy": summary.final_heldout_accuracy if summary is not None else None,
        "peak_bytes": meter_field(record, "memory", "peak_bytes"),
    }
    rows = []
    for metric, value in values.items():
        if isinstance(value, Estimate):
            rows.append(Measurement(commit=commit, machine=machine, cell=record.cell, seed=record.seed, metric=metric,
                                    value=value.value, low=value.low, high=value.high,
                                    samples=len(record.epochs), run=run, source=source, setting=setting))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            rows.append(Measurement(commit=commit, machine=machine, cell=record.cell, seed=record.seed, metric=metric,
                                    value=float(value), low=float(value), high=float(value), run=run, source=source,
                                    setting=setting))
    return rows


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
    return [1.0 / (e * e + extra + (_EXACT_RTOL * max(abs(v), 1e-12)) ** 2) for v, e in zip(values, errors)]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Bisection:
    """Where a figure changed: the first commit at the new level, the last at the old, and each run's estimates.
    ``changed`` is ``False`` (and the commits empty) when the range's two ends did not differ to begin with."""

    first_changed: str
    last_unchanged: str
    runs: tuple[dict[str, Estimate], ...]
    changed: bool = True


def _distance(a: Estimate, b: Estimate, log: bool) -> float:
    return abs(math.log(a.value) - math.log(b.value)) if log else abs(a.value - b.value)


def _differ(a: Estimate, b: Estimate) -> bool:
    """Two measurements differ: beyond the gate's exact tolerance for exact figures, their intervals apart for the
    others."""
    if a.low == a.high and b.low == b.high:
        return abs(a.value - b.value) > _EXACT_RTOL * max(abs(a.value), abs(b.value))
    return a.high < b.low or b.high < a.low


def bisect_change(commits: Sequence[str], measure: Callable[[list[str]], dict[str, Estimate]], *,
                  log: bool) -> Bisection:
    """Find the commit where a figure changed between the first and the last of ``commits`` (oldest first).

    Each step measures the middle commit with the current two ends in one run (``measure`` gets the commits to run
    side by side and returns their estimates) and keeps the half whose ends differ more, as ``asv find`` does:
    ``ceil(log2(N - 1))`` runs after the first. When the first run finds the two ends alike (exact figures within
    the gate's tolerance, measured ones with overlapping intervals) there is nothing to find: ``changed`` is False.

    Raises:
        ValueError: fewer than two commits.
    """
    if len(commits) < 2:
        raise ValueError("bisecting needs a range of at least two commits")
    lo, hi = 0, len(commits) - 1
    runs = [measure([commits[lo], commits[hi]])]
    if not _differ(runs[0][commits[lo]], runs[0][commits[hi]]):
        return Bisection(first_changed="", last_unchanged="", runs=tuple(runs), changed=False)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        estimates = measure([commits[lo], commits[mid], commits[hi]])
        runs.append(estimates)
        before, middle, after = estimates[commits[lo]], estimates[commits[mid]], estimates[commits[hi]]
        if _distance(before, middle, log) >= _distance(middle, after, log):
            hi = mid  # the middle is already at the new level: the change lies at or before it
        else:
            lo = mid
    return Bisection(first_changed=commits[hi], last_unchanged=commits[lo], runs=tuple(runs))
