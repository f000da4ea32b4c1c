"""Records as a set: one record per (cell, seed), in one canonical order, grouped by cell over its seeds.

A results file is append-only and a report may read several, so the same (cell, seed) can appear more
than once (a rerun) and records arrive in any order (shards, workers). Everything downstream is a
function of the *set* of records: :func:`canonical` keeps, per (cell, seed), the record that finished
last (ties broken by the record's own text, never by reading order) and sorts the result by the
registries' order, so two readings of the same records in any order give the same list, and every
grouping built by walking it gives the same groups in the same order. A cell run with several seeds
is one :class:`CellRuns`: its seeds are draws of the same experiment, never overwrite one another, and
every figure is read over all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gradeff.analysis.metrics import Metric, metric_value
from gradeff.analysis.stats import Interval, interval
from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES
from gradeff.records.formatting import as_number
from gradeff.records.results import CellRecord
from gradeff.studies.grid import GRIDS

__all__ = ["CellRuns", "by_cell", "canonical", "canonical_key", "seed_values"]


def _rank(registry: Iterable[str], key: str) -> tuple[int, int, str]:
    # Registry order first; keys this gradeff does not know after them, by name.
    order = list(registry)
    return (0, order.index(key), "") if key in order else (1, 0, key)


def canonical_key(record: CellRecord) -> tuple:
    """A total order of records: grid, model, optimizer, strategy, method, dataset (registry order, unknown keys
    after, by name), then the cell id and the seed."""
    return (_rank(GRIDS, record.grid), _rank(MODELS, record.model), _rank(OPTIMIZERS, record.optimizer),
            _rank(STRATEGIES, record.strategy), _rank(METHODS, record.method), _rank(TASKS, record.dataset),
            record.cell, record.seed)


def _newest(a: CellRecord, b: CellRecord) -> CellRecord:
    # The later run supersedes the earlier; equal times fall to the record's text, so the choice never
    # depends on which file or line came first.
    key_a, key_b = (a.finished_at, a.started_at, a.to_json()), (b.finished_at, b.started_at, b.to_json())
    return a if key_a >= key_b else b


def canonical(records: Iterable[CellRecord]) -> tuple[list[CellRecord], int]:
    """One record per (cell, seed), the newest, in canonical order (:func:`canonical_key`).

    Returns:
        The kept records, and how many were superseded by a newer record of the same cell and seed.
    """
    kept: dict[tuple[str, int], CellRecord] = {}
    count = 0
    for record in records:
        count += 1
        key = (record.cell, record.seed)
        kept[key] = record if key not in kept else _newest(kept[key], record)
    return sorted(kept.values(), key=canonical_key), count - len(kept)


def seed_values(records: Iterable[CellRecord], metric: str | Metric) -> dict[int, float]:
    """``seed → value`` of ``metric`` over the records that ended ``ok`` and measured it."""
    values = {}
    for record in records:
        value = metric_value(record, metric) if record.status == "ok" else None
        if value is not None:
            values[record.seed] = value
    return values


@dataclass(frozen=True, slots=True)
class CellRuns:
    """One cell over its seeds.

    Attributes:
        cell: the cell id.
        runs: one record per seed, by seed.
    """

    cell: str
    runs: tuple[CellRecord, ...]

    @property
    def first(self) -> CellRecord:
        """The record of the lowest seed: its axes name the cell (every seed's are the same)."""
        return self.runs[0]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(r.seed for r in self.runs)

    @property
    def ok(self) -> tuple[CellRecord, ...]:
        """The seeds that trained every epoch."""
        return tuple(r for r in self.runs if r.status == "ok")

    @property
    def status(self) -> str:
        """``ok`` when every seed ended ok, the one status they share, else ``2 ok, 1 diverged``."""
        counts: dict[str, int] = {}
        for record in self.runs:
            counts[record.status] = counts.get(record.status, 0) + 1
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{n} {status}" for status, n in counts.items())

    def values(self, metric: str | Metric) -> dict[int, float]:
        """``seed → value`` over the seeds that ended ok and measured ``metric``."""
        return seed_values(self.runs, metric)

    def interval(self, metric: str | Metric) -> Interval | None:
        """The mean of ``metric`` over those seeds with its 95 % t-interval, or ``None`` if none measured it."""
        values = list(self.values(metric).values())
        return interval(values) if values else None

    def fingerprint(self) -> tuple:
        """What makes two cells the same run: per seed, its status and every epoch's training loss, test loss and
        test accuracy.

        Two cells with equal fingerprints (checkpointing against standard) trained bit for bit alike.
        """
        return tuple((r.seed, r.status, tuple(repr(e.loss) for e in r.epochs),
                      tuple(repr(e.heldout_loss) for e in r.epochs), tuple(repr(e.heldout_accuracy) for e in r.epochs),
                      repr(r.summary.final_heldout_loss))
                     for r in self.runs)

    def mean_series(self, value: Callable[[object], float | None]) -> tuple[tuple[int, float], ...]:
        """``(epoch, mean)`` of a per-epoch figure over the seeds that ended ok (every seed where none did),
        for each epoch some seed measured."""
        sources = self.ok or self.runs
        by_epoch: dict[int, list[float]] = {}
        for record in sources:
            for epoch in record.epochs:
                number, index = as_number(value(epoch)), as_number(epoch.epoch)
                if number is not None and index is not None:
                    by_epoch.setdefault(int(index), []).append(number)
        return tuple((index, sum(values) / len(values)) for index, values in sorted(by_epoch.items()))

    def mean(self, metric: str | Metric) -> float | None:
        found = self.interval(metric)
        return None if found is None else found.mean


def by_cell(records: Iterable[CellRecord]) -> dict[str, CellRuns]:
    """Canonical records grouped by cell, cells and seeds in canonical order (records pass through
    :func:`canonical` first, so the order given does not matter)."""
    kept, _ = canonical(records)
    groups: dict[str, list[CellRecord]] = {}
    for record in kept:
        groups.setdefault(record.cell, []).append(record)
    return {cell: CellRuns(cell, tuple(sorted(runs, key=lambda r: r.seed))) for cell, runs in groups.items()}
