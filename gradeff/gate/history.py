"""Figures across commits: an SQLite history store and the bisection of a range.

**The store** is one SQLite file (Python's ``sqlite3``: no server), one row per commit × machine × cell × seed ×
metric, with the commit's date and subject beside it, and the *setting* the figure was measured in: ``grid`` for a
pytest session's cells (the profile's epochs, the wall clock: ``--gradeff-history PATH``), or the slices of a
side-by-side run (``gradeff history run``: its epochs are short slices, so its losses are not the grid's, and its
clock is the CPU's, :func:`slices_setting`). A machine is named by a fingerprint of what decides its numbers (CPU
model and id, logical CPUs, torch threads, device, torch and transformers versions, :func:`machine_of`): series of
different machines, or of different settings, never mix.

The change points of each series are found by :mod:`gradeff.gate.change_points`.

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
    "EXACT_RTOL", "GRID_SETTING", "METRICS", "SCHEMA_VERSION", "Bisection", "Commit", "Estimate", "HistoryStore",
    "Measurement", "Metric", "Point", "bisect_change", "interleaved_estimates", "machine_of", "measurements_of_record",
    "slices_setting", "time_estimate",
]

SCHEMA_VERSION = 1
# The setting of a pytest session's figures: the grid's cells as they run (the profile's epochs, the wall clock).
GRID_SETTING = "grid"
# The gate's exact tolerance: a deterministic figure's noise floor, relative to its size.
EXACT_RTOL = 1e-6


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
        return abs(a.value - b.value) > EXACT_RTOL * max(abs(a.value), abs(b.value))
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
