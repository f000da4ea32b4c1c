"""Analysis of cell records: metrics, best configurations, strategy ratios, Pareto frontiers, recommendations.

Pure functions over :class:`~gradeff.results.CellRecord` values, in raw units; no formatting and no I/O
(that is :mod:`gradeff.report`'s job). Only cells that ended ``ok`` compete for "best": a diverged
run's last loss or an out-of-memory run's short time is not a result to recommend. Missing
measurements are ``None`` and never compete either. The two studies read their records further in
:mod:`gradeff.analysis.peft` (the PEFT study) and :mod:`gradeff.analysis.memory` (the memory study).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gradeff.formatting import as_number
from gradeff.models import MODELS
from gradeff.optim import OPTIMIZERS
from gradeff.results import CellRecord, latest_by_run
from gradeff.strategies import STRATEGIES

__all__ = [
    "MEMORY_METRICS", "MEMORY_PARTS", "METRICS", "OBJECTIVES", "Metric", "Recommendation", "best_cell",
    "best_value", "comparable", "isolated", "group_by_model", "latest_records", "memory_metric_for", "memory_parts",
    "meter_section", "meter_value", "metric_value", "nonfinite_value",
    "TIE", "order_keys", "pareto_cells", "pareto_front", "recommendations", "runs_by_cell", "sort_records",
    "strategy_ratios", "tally_wins", "training_memory_bytes",
]

K = TypeVar("K", bound=Hashable)


# The memory breakdown's parts, in the order the report stacks them.
MEMORY_PARTS = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes", "activation_bytes")


def meter_section(record: CellRecord, meter: str) -> Mapping:
    """``record.meters[meter]``, or an empty mapping where the record lacks it or it is not a mapping.

    Older and hand-edited records have empty, partial or malformed ``meters``, so nothing that
    reads them may assume a key exists.
    """
    section = record.meters.get(meter) if isinstance(record.meters, Mapping) else None
    return section if isinstance(section, Mapping) else {}


def meter_value(record: CellRecord, meter: str, name: str) -> float | None:
    """One number from ``record.meters[meter][name]``, or ``None`` if absent, ``None`` or not a finite number."""
    return as_number(meter_section(record, meter).get(name))


def memory_parts(record: CellRecord) -> list[float] | None:
    """The :data:`MEMORY_PARTS` of a record's breakdown, or ``None`` unless all of them were measured."""
    parts = [meter_value(record, "memory", name) for name in MEMORY_PARTS]
    return None if any(part is None for part in parts) else parts


def training_memory_bytes(record: CellRecord) -> float | None:
    """Parameters + gradients + optimizer state + activations saved for backward (bytes), or ``None``.

    This is the memory the optimizer and strategy choices change, measured the same way on any
    device; it is ``None`` unless all four parts were measured, since a partial sum would flatter
    the cell that is missing a part.
    """
    parts = memory_parts(record)
    return None if parts is None else sum(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Metric:
    """A number read from a record, and which way is better.

    Attributes:
        key: identifier (``final_loss``).
        label: column / axis title.
        unit: formatting unit (see :func:`gradeff.formatting.format_value`).
        goal: ``"min"`` or ``"max"``: which end of the scale wins.
        paper: which tables of the main paper show this metric (``""`` if none).
        extract: record → raw value or ``None``.
    """

    key: str
    label: str
    unit: str
    goal: str
    paper: str
    extract: Callable[[CellRecord], float | None]

    def better(self, a: float, b: float) -> bool:
        """Whether value ``a`` beats value ``b`` strictly."""
        return a < b if self.goal == "min" else a > b


def _summary(name: str) -> Callable[[CellRecord], float | None]:
    def extract(record: CellRecord) -> float | None:
        return as_number(getattr(record.summary, name, None))
    # The value as stored, for nonfinite_value: a NaN must read "NaN", not "not measured".
    extract.raw = lambda record: getattr(record.summary, name, None)
    return extract


def _meter(meter: str, name: str) -> Callable[[CellRecord], float | None]:
    def extract(record: CellRecord) -> float | None:
        return meter_value(record, meter, name)
    extract.raw = lambda record: meter_section(record, meter).get(name)
    return extract


def _percent(fraction: Callable[[CellRecord], float | None]) -> Callable[[CellRecord], float | None]:
    # Records hold accuracies as fractions; the "percent" unit prints numbers already in percent.
    def extract(record: CellRecord) -> float | None:
        value = fraction(record)
        return None if value is None else 100 * value
    if hasattr(fraction, "raw"):
        extract.raw = fraction.raw
    return extract


METRICS: dict[str, Metric] = {m.key: m for m in (
    Metric(key="mean_loss", label="Mean loss over the run", unit="loss", goal="min", paper="Tables 4–7",
           extract=_summary("mean_loss")),
    Metric(key="final_loss", label="Final loss", unit="loss", goal="min", paper="Table 2, Figure 4",
           extract=_summary("final_loss")),
    Metric(key="epoch_seconds", label="Time per epoch", unit="seconds", goal="min", paper="Tables 16–19",
           extract=_summary("mean_epoch_seconds")),
    Metric(key="gpu_util", label="GPU utilization (mean)", unit="percent", goal="max", paper="Tables 8–11",
           extract=_meter("gpu", "util_mean_percent")),
    Metric(key="ram_peak", label="Peak RAM (process RSS)", unit="bytes", goal="min", paper="Tables 12–15",
           extract=_meter("ram", "peak_rss_bytes")),
    Metric(key="ram_percent", label="Peak system RAM use", unit="percent", goal="min", paper="Tables 12–14",
           extract=_meter("ram", "peak_system_percent")),
    Metric(key="gpu_mem", label="Peak GPU memory (NVML)", unit="bytes", goal="min", paper="Figure 3",
           extract=_meter("gpu", "mem_used_peak_bytes")),
    Metric(key="gpu_alloc", label="Peak GPU memory (torch allocator)", unit="bytes", goal="min", paper="",
           extract=_meter("gpu", "alloc_peak_bytes")),
    Metric(key="activation", label="Activation memory (saved for backward)", unit="bytes", goal="min",
           paper="", extract=_meter("memory", "activation_bytes")),
    Metric(key="peak", label="Peak tensor memory (live, one step)", unit="bytes", goal="min", paper="",
           extract=_meter("memory", "peak_bytes")),
    Metric(key="train_memory", label="Training memory (params + grads + state + activations)", unit="bytes",
           goal="min", paper="", extract=training_memory_bytes),
    Metric(key="energy", label="Energy", unit="joules", goal="min", paper="", extract=_meter("energy", "joules")),
    Metric(key="heldout_accuracy", label="Final held-out accuracy (top-1)", unit="percent", goal="max", paper="",
           extract=_percent(_summary("final_heldout_accuracy"))),
    Metric(key="mfu", label="MFU (model FLOP/s over the device's peak)", unit="percent", goal="max", paper="",
           extract=_percent(_meter("compute", "mfu"))),
)}

# The memory a recommendation minimises, best source first: what the GPU allocator actually held,
# else the live-tensor peak of a step (exact on any device), else the device-independent breakdown
# (no transients), else the process RSS (noisy, but something).
MEMORY_METRICS = ("gpu_alloc", "peak", "train_memory", "ram_peak")

# objective → metric key; "memory" is resolved per model by ``memory_metric_for``.
OBJECTIVES: dict[str, str] = {"loss": "final_loss", "time": "epoch_seconds", "memory": "", "energy": "energy"}


def metric_value(record: CellRecord, metric: str | Metric) -> float | None:
    """The raw value of ``metric`` for ``record`` (``None`` when not measured).

    Args:
        record: a cell record.
        metric: a key of :data:`METRICS` or a :class:`Metric`.

    Returns:
        A finite float, or ``None``.
    """
    metric = METRICS[metric] if isinstance(metric, str) else metric
    return metric.extract(record)


def nonfinite_value(record: CellRecord, metric: str | Metric) -> float | None:
    """The NaN or infinity ``record`` stores for ``metric`` (measured, but not a number to rank), else ``None``.

    :func:`metric_value` reads such a value as ``None`` so that it never wins or enters a mean; a report
    must still tell it from a value that was not measured at all.
    """
    metric = METRICS[metric] if isinstance(metric, str) else metric
    raw = getattr(metric.extract, "raw", None)
    value = raw(record) if raw is not None else None
    return value if isinstance(value, float) and not math.isfinite(value) else None


def comparable(record: CellRecord) -> bool:
    """Whether ``record`` may compete for best: only cells that trained every epoch (``ok``)."""
    return record.status == "ok"


def latest_records(records: Iterable[CellRecord]) -> tuple[list[CellRecord], int]:
    """One record per cell and seed: the last one read wins (a re-run replaces the earlier result).

    A cell repeated over seeds keeps one record per seed: they are draws of the same cell, not re-runs.

    Args:
        records: records in reading order (files in the order given, lines in file order).

    Returns:
        The kept records, in order of each (cell, seed)'s first appearance, and how many were superseded.
    """
    records = list(records)
    latest = latest_by_run(records)
    return list(latest.values()), len(records) - len(latest)


def runs_by_cell(records: Iterable[CellRecord]) -> dict[str, list[CellRecord]]:
    """Each cell's records over seeds (one per seed, as :func:`latest_records` keeps them), cells in first order."""
    runs: dict[str, list[CellRecord]] = {}
    for record in records:
        runs.setdefault(record.cell, []).append(record)
    return runs


def order_keys(keys: Iterable[str], registry: Iterable[str]) -> list[str]:
    """Distinct ``keys`` in registry order, then keys the registry does not know, sorted.

    Records may name models or optimizers this gradeff does not have (newer runs, hand edits); they
    are kept rather than dropped.
    """
    present = set(keys)
    known = [key for key in registry if key in present]
    return known + sorted(present - set(known))


def sort_records(records: Iterable[CellRecord]) -> list[CellRecord]:
    """Records in grid order: model, optimizer, strategy, each in registry order (unknown keys last, sorted)."""
    records = list(records)
    ranks = [
        {key: rank for rank, key in enumerate(order_keys((getattr(r, axis) for r in records), registry))}
        for axis, registry in (("model", MODELS), ("optimizer", OPTIMIZERS), ("strategy", STRATEGIES))
    ]
    return sorted(records, key=lambda r: (ranks[0][r.model], ranks[1][r.optimizer], ranks[2][r.strategy]))


def best_value(records: Iterable[CellRecord], metric: str | Metric) -> float | None:
    """The best value of ``metric`` among comparable records, or ``None`` if none was measured."""
    best = best_cell(records, metric)
    return None if best is None else metric_value(best, metric)


def best_cell(records: Iterable[CellRecord], metric: str | Metric) -> CellRecord | None:
    """The comparable record with the best value of ``metric``; the first one wins a tie.

    Args:
        records: candidate records (usually one model's).
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
) -> dict[tuple[str, str], float | None]:
    """Ratio of a metric between two strategies, per model and optimizer (paper Table 3).

    Args:
        records: one record per cell.
        metric: a key of :data:`METRICS` or a :class:`Metric`.
        numerator: strategy on top (``checkpoint``: < 1 means checkpointing lowered the metric).
        denominator: the reference strategy.

    Returns:
        ``(model, optimizer)`` → ratio, for every pair that has either strategy; ``None`` where a
        side is missing, not ``ok``, unmeasured, or the denominator is zero.
    """
    cells: dict[tuple[str, str], dict[str, CellRecord]] = {}
    for record in records:
        if record.strategy in (numerator, denominator):
            cells.setdefault((record.model, record.optimizer), {})[record.strategy] = record
    ratios: dict[tuple[str, str], float | None] = {}
    for pair, sides in cells.items():
        top, bottom = sides.get(numerator), sides.get(denominator)
        values = [metric_value(r, metric) if r is not None and comparable(r) else None for r in (top, bottom)]
        ratios[pair] = None if None in values or values[1] == 0 else values[0] / values[1]
    return ratios


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


def pareto_cells(
    records: Iterable[CellRecord], x: str = "epoch_seconds", y: str = "final_loss"
) -> list[CellRecord]:
    """The comparable records on the Pareto front of two metrics, both minimised (paper Figure 4).

    Args:
        records: one model's records.
        x: metric on the horizontal axis (default time per epoch).
        y: metric on the vertical axis (default final loss).

    Returns:
        Front records, fastest first. Records missing either metric take no part.
    """
    by_cell = {r.cell: r for r in records if comparable(r)}
    points = [(cell, metric_value(r, x), metric_value(r, y)) for cell, r in by_cell.items()]
    points = [p for p in points if p[1] is not None and p[2] is not None]
    return [by_cell[cell] for cell in pareto_front(points)]


def isolated(record: CellRecord) -> bool:
    """Whether the cell ran in a process of its own (``--gradeff-isolate``): only then is its RSS its own."""
    return isinstance(record.environment, Mapping) and record.environment.get("process") == "isolated"


def memory_metric_for(records: Iterable[CellRecord]) -> str | None:
    """The first of :data:`MEMORY_METRICS` that some comparable record measured, else ``None``.

    One model's cells are all compared on the same memory metric, never a mix. The process RSS
    competes only when every cell ran isolated: in one long pytest process the first cell of a
    model pays for the imports and every later one inherits its high-water mark, so the RSS
    "winner" would be whichever cell ran first.
    """
    records = [r for r in records if comparable(r)]
    for key in MEMORY_METRICS:
        if key == "ram_peak" and not all(isolated(r) for r in records):
            continue
        if any(metric_value(r, key) is not None for r in records):
            return key
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    """The winning cell of one model for one objective.

    Attributes:
        model: model key.
        objective: a key of :data:`OBJECTIVES`.
        metric: the metric key compared (``None`` if the model has no measurement for it).
        record: the winner (its last seed's record where it ran several), or ``None``.
        value: the winner's raw value (its mean over seeds).
        ties: a record of each cell Welch's t-test cannot tell from the winner, the winner's first (one
            seed each: only exactly equal values tie).
        confirmed: whether some cell had two seeds or more (else the winner is a single draw).
        interval: the winner's mean and 95 % t-interval over its seeds.
    """

    model: str
    objective: str
    metric: str | None
    record: CellRecord | None
    value: float | None
    ties: tuple[CellRecord, ...] = ()
    confirmed: bool = False
    interval: object = None


def recommendations(records: Iterable[CellRecord]) -> dict[str, dict[str, Recommendation]]:
    """Which optimizer + strategy wins loss, time, memory and energy, per model (paper Figure 1).

    A cell run with several seeds competes with its values over seeds: the winner has the best mean and
    every cell Welch's t-test cannot tell from it ties with it (:func:`gradeff.analysis.stats.winners`).

    Args:
        records: one record per cell and seed.

    Returns:
        model key → objective → :class:`Recommendation`.
    """
    from gradeff.analysis.stats import interval, winners

    result: dict[str, dict[str, Recommendation]] = {}
    for model, group in group_by_model(records).items():
        result[model] = {}
        runs = runs_by_cell(group)
        for objective, metric in OBJECTIVES.items():
            metric = metric or memory_metric_for(group)
            samples = {cell: [v for v in (metric_value(r, metric) for r in cell_runs if comparable(r))
                              if v is not None] for cell, cell_runs in runs.items()} if metric else {}
            found = winners(samples, goal=METRICS[metric].goal) if metric else None
            if found is None:
                result[model][objective] = Recommendation(model=model, objective=objective, metric=metric,
                                                          record=None, value=None)
                continue
            measured = {cell: [r for r in runs[cell] if comparable(r) and metric_value(r, metric) is not None][-1]
                        for cell in found.ties}
            spread = interval(samples[found.best])
            result[model][objective] = Recommendation(
                model=model, objective=objective, metric=metric, record=measured[found.best], value=spread.mean,
                ties=tuple(measured[cell] for cell in (found.best, *(c for c in found.ties if c != found.best))),
                confirmed=found.confirmed, interval=spread)
    return result


TIE = "tie"


def tally_wins(recs: Mapping[str, Mapping[str, Recommendation]]) -> tuple[Counter, Counter]:
    """How often each optimizer and each strategy is a recommendation (the paper's "best paths").

    A recommendation whose tied cells differ in optimizer (strategy) counts as a :data:`TIE` for that
    axis, not as a win of the cell that happened to have the best mean.

    Returns:
        ``(optimizer wins, strategy wins)`` counters.
    """
    optimizers, strategies = Counter(), Counter()
    for per_model in recs.values():
        for rec in per_model.values():
            if rec.record is None:
                continue
            tied = rec.ties or (rec.record,)
            for counter, axis in ((optimizers, "optimizer"), (strategies, "strategy")):
                keys = {getattr(r, axis) for r in tied}
                counter[keys.pop() if len(keys) == 1 else TIE] += 1
    return optimizers, strategies
