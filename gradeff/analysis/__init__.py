"""Analysis of cell records: metrics, cells over seeds, paired comparisons, strategy ratios, Pareto frontiers,
verdicts and recommendations.

Pure functions over :class:`~gradeff.records.results.CellRecord` values, in raw units; no formatting and no I/O
(that is :mod:`gradeff.report`'s job). Every figure is read through :mod:`gradeff.analysis.metrics`
(which metric answers quality, speed, memory and energy), every study's records are taken through
:mod:`gradeff.analysis.scope`, every cell is read over all its seeds (:mod:`gradeff.analysis.runs`) and
compared seed by seed (:mod:`gradeff.analysis.pairing`). Only cells that ended ``ok`` compete: a
diverged run's last loss or an out-of-memory run's short time is not a result to recommend. Missing
measurements are ``None`` and never compete either. The studies read their records further in
:mod:`gradeff.analysis.peft` (the PEFT study) and :mod:`gradeff.analysis.memory` (the memory study);
:mod:`gradeff.analysis.verdicts` ranks a group of cells and :mod:`gradeff.analysis.answer` turns the
rankings into the Answer.

May import: :mod:`gradeff.records` and everything below it; never the cell, the report or the front doors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from gradeff.analysis.metrics import (
    MEMORY_PARTS,
    METRICS,
    Metric,
    memory_metric,
    memory_parts,
    meter_section,
    meter_value,
    metric_value,
    nonfinite_value,
    training_memory_bytes,
)
from gradeff.analysis.metrics import is_isolated as isolated
from gradeff.analysis.pairing import PairedRatio, paired_ratio
from gradeff.analysis.runs import CellRuns, by_cell, canonical, canonical_key
from gradeff.analysis.verdicts import verdicts
from gradeff.records.results import CellRecord

__all__ = [
    "MEMORY_PARTS", "METRICS", "SHARED", "Metric", "best_cell", "best_value", "by_cell", "canonical", "comparable",
    "group_by_model", "isolated", "latest_records", "memory_metric_for", "memory_parts", "meter_section",
    "meter_value", "metric_value", "nonfinite_value", "order_keys", "pareto_cells", "pareto_front",
    "recommendations", "runs_by_cell", "sort_records", "strategy_ratios", "tally_wins", "training_memory_bytes",
]

K = TypeVar("K", bound=Hashable)


def comparable(record: CellRecord) -> bool:
    """Whether ``record`` may compete for best: only cells that trained every epoch (``ok``)."""
    return record.status == "ok"


def latest_records(records: Iterable[CellRecord]) -> tuple[list[CellRecord], int]:
    """One record per cell and seed, the newest, in canonical order (see :func:`gradeff.analysis.runs.canonical`).

    A cell repeated over seeds keeps one record per seed: they are draws of the same cell, not re-runs.

    Returns:
        The kept records, and how many were superseded.
    """
    return canonical(records)


def runs_by_cell(records: Iterable[CellRecord]) -> dict[str, CellRuns]:
    """Each cell over its seeds (:class:`~gradeff.analysis.runs.CellRuns`), cells in canonical order."""
    return by_cell(records)


def order_keys(keys: Iterable[str], registry: Iterable[str]) -> list[str]:
    """Distinct ``keys`` in registry order, then keys the registry does not know, sorted.

    Records may name models or optimizers this gradeff does not have (newer runs, hand edits); they
    are kept rather than dropped.
    """
    present = set(keys)
    known = [key for key in registry if key in present]
    return known + sorted(present - set(known))


def sort_records(records: Iterable[CellRecord]) -> list[CellRecord]:
    """Records in canonical order: grid, model, optimizer, strategy, method, dataset (registry order, unknown keys
    last, sorted), cell, seed. A total order: the result does not depend on the order given."""
    return sorted(records, key=canonical_key)


def best_value(records: Iterable[CellRecord], metric: str | Metric) -> float | None:
    """The best value of ``metric`` among comparable records, or ``None`` if none was measured."""
    best = best_cell(records, metric)
    return None if best is None else metric_value(best, metric)


def best_cell(records: Iterable[CellRecord], metric: str | Metric) -> CellRecord | None:
    """The comparable record with the best value of ``metric`` (one record, no seeds); the first wins a tie.

    Args:
        records: candidate records.
        metric: a key of :data:`METRICS` or a :class:`Metric`.

    Returns:
        The winning record, or ``None`` if no ``ok`` record has the metric.
    """
    metric = METRICS[metric] if isinstance(metric, str) else metric
    best, best_number = None, None
    for record in records:
        number = metric_value(record, metric) if comparable(record) else None
        if number is not None and (best_number is None or metric.better(number, best_number)):
            best, best_number = record, number
    return best


def group_by_model(records: Iterable[CellRecord]) -> dict[str, list[CellRecord]]:
    """Records by model key, each group and the model order as given."""
    groups: dict[str, list[CellRecord]] = {}
    for record in records:
        groups.setdefault(record.model, []).append(record)
    return groups


def strategy_ratios(
    records: Iterable[CellRecord],
    metric: str | Metric,
    *,
    numerator: str = "checkpoint",
    denominator: str = "standard",
    key: Callable[[CellRecord], Hashable] = lambda r: (r.model, r.optimizer),
) -> dict[Hashable, PairedRatio | None]:
    """Ratio of a metric between two strategies, seed by seed, per group of cells (paper Table 3).

    Each pair is the two strategies' cells of one group (by default model and optimizer), compared on
    the seeds both ended ok with the metric measured: a seed's ratio divides two cells that shared
    their start and data.

    Args:
        records: records of one study, any number of seeds per cell.
        metric: a key of :data:`METRICS` or a :class:`Metric`.
        numerator: strategy on top (``checkpoint``: < 1 means checkpointing lowered the metric).
        denominator: the reference strategy.
        key: what a pair shares (everything but its strategy).

    Returns:
        group → :class:`~gradeff.analysis.pairing.PairedRatio` (mean ratio over seeds, its interval,
        whether the two sides are identical), for every group that has either strategy; ``None`` where
        a side is missing, never ok, unmeasured, or its denominator is zero.
    """
    sides: dict[Hashable, dict[str, dict[int, float]]] = {}
    for record in canonical(records)[0]:
        if record.strategy in (numerator, denominator):
            values = sides.setdefault(key(record), {numerator: {}, denominator: {}})[record.strategy]
            value = metric_value(record, metric) if comparable(record) else None
            if value is not None:
                values[record.seed] = value
    return {group: paired_ratio(pair[numerator], pair[denominator]) for group, pair in sides.items()}


def pareto_front(points: Sequence[tuple[K, float, float]]) -> list[K]:
    """Keys of the points no other point dominates, minimising both coordinates.

    A point is dominated when another is no worse in both coordinates and strictly better in one;
    identical points therefore all stay on the front.

    Args:
        points: ``(key, x, y)`` triples.

    Returns:
        The keys on the front, sorted by ``x`` then ``y``.
    """
    front = [
        (x, y, key) for key, x, y in points
        if not any(ox <= x and oy <= y and (ox < x or oy < y) for _, ox, oy in points)
    ]
    return [key for _, _, key in sorted(front, key=lambda item: (item[0], item[1]))]


def pareto_cells(runs: Mapping[str, CellRuns], x: str | Metric, y: str | Metric) -> list[CellRuns]:
    """The cells on the Pareto front of two metrics' means over seeds (paper Figure 4), both read as costs.

    A metric whose goal is ``max`` (an accuracy) is negated, so the front always minimises both.

    Args:
        runs: one model's cells over their seeds.
        x: metric on the horizontal axis.
        y: metric on the vertical axis.

    Returns:
        Front cells, lowest ``x`` first. Cells missing either metric on every ok seed take no part.
    """
    metrics = [METRICS[m] if isinstance(m, str) else m for m in (x, y)]
    points = []
    for cell, cell_runs in runs.items():
        means = [cell_runs.mean(m) for m in metrics]
        if None not in means:
            points.append((cell, *(v if m.goal == "min" else -v for v, m in zip(means, metrics))))
    return [runs[cell] for cell in pareto_front(points)]


def memory_metric_for(records: Iterable[CellRecord]) -> str | None:
    """The key of the memory metric one group of cells is compared on (see
    :func:`gradeff.analysis.metrics.memory_metric`), or ``None``."""
    found = memory_metric(records)
    return None if found is None else found.key


def recommendations(records: Iterable[CellRecord]) -> dict[str, dict[str, object]]:
    """Which optimizer + strategy wins quality, speed, memory and energy, per model (paper Figure 1).

    Args:
        records: one study's records, any number of seeds per cell.

    Returns:
        model key → objective → :class:`~gradeff.analysis.verdicts.Verdict`.
    """
    return {model: verdicts(group) for model, group in group_by_model(canonical(records)[0]).items()}


SHARED = "shared"


def tally_wins(recs: Mapping[str, Mapping[str, object]]) -> tuple[Counter, Counter]:
    """How often each optimizer and each strategy is a recommendation (the paper's "best paths").

    Only a verdict with one first place counts for an axis value: a first place shared by cells that differ in
    optimizer (strategy) — equivalent, or still open — counts as :data:`SHARED` for that axis, never as a win of the
    cell with the best mean; cells merged as identical share one place.

    Returns:
        ``(optimizer wins, strategy wins)`` counters.
    """
    optimizers, strategies = Counter(), Counter()
    for per_model in recs.values():
        for verdict in per_model.values():
            if verdict.ranking is None:
                continue
            tied = [verdict.runs[cell].first for cell in verdict.ranking.members]
            for counter, axis in ((optimizers, "optimizer"), (strategies, "strategy")):
                keys = {getattr(r, axis) for r in tied}
                counter[keys.pop() if len(keys) == 1 else SHARED] += 1
    return optimizers, strategies
