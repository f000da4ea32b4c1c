"""Analysis of the PEFT study's records: which study a record belongs to, the study's metrics, winners,
each method against full fine-tuning, checkpoint / standard ratios, the backbones' pretraining, and the
foundation-model baselines, inference cost and NetScore family that every classification record carries.

Pure functions over :class:`~gradeff.results.CellRecord` values in raw units, under
:mod:`gradeff.analysis`'s rules: only cells that ended ``ok`` compete or enter a ratio, a missing
measurement is ``None`` (never 0), and a tie keeps the first cell in grid order (backbone, dataset,
method, strategy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gradeff import analysis
from gradeff.analysis import Metric
from gradeff.data import TASKS
from gradeff.formatting import as_number
from gradeff.grid import GRIDS
from gradeff.methods import METHODS
from gradeff.models import MODELS
from gradeff.netscore import Score
from gradeff.results import CellRecord
from gradeff.strategies import STRATEGIES

__all__ = [
    "ACCURACY_FOCUS", "BASELINE_GRIDS", "MEMORY_METRICS", "OBJECTIVES", "TRAINABLE", "Versus", "Winner",
    "bayes_accuracy", "beats_pixel_baseline", "checkpoint_ratios", "focus_of", "group_by_backbone", "inference_number", "inference_of",
    "is_baseline", "memory_metric_for", "netscore_ranking", "pixel_baseline_accuracy", "pretraining_by_backbone",
    "ratio", "score_of",
    "sort_peft", "split_baselines", "split_studies", "total_parameters", "trainable_parameters",
    "trainable_percent", "training_seconds", "versus_full", "weights_source", "winners",
]

ACCURACY_FOCUS = "accuracy"
# Training memory, best source first: what the GPU allocator held, else the live-tensor peak of a step
# (exact on any device, transients included), else the device-independent breakdown (parameters with
# 4-bit weights packed, gradients, optimizer state, activations). The process RSS is not a fallback
# here: on CPU it is mostly the interpreter and libraries, not the method.
MEMORY_METRICS = ("gpu_alloc", "peak", "train_memory")
# objective → metric key; "memory" is resolved per backbone and dataset by ``memory_metric_for``.
OBJECTIVES: dict[str, str] = {"accuracy": "heldout_accuracy", "memory": "", "time": "epoch_seconds",
                              "energy": "energy"}
FULL = "full"


def focus_of(record: CellRecord) -> str:
    """What the record's grid is read by: ``loss`` (main study) or ``accuracy`` (PEFT study).

    A grid this gradeff does not know reads as the main study, as the records of older versions did.
    """
    return GRIDS[record.grid].focus if record.grid in GRIDS else "loss"


def split_studies(records: Iterable[CellRecord]) -> tuple[list[CellRecord], list[CellRecord]]:
    """``(main-study records, PEFT-study records)``, each in the order given."""
    main, peft = [], []
    for record in records:
        (peft if focus_of(record) == ACCURACY_FOCUS else main).append(record)
    return main, peft


def _count(record: CellRecord, name: str) -> float | None:
    parameters = record.parameters if isinstance(record.parameters, Mapping) else {}
    return as_number(parameters.get(name))


def trainable_parameters(record: CellRecord) -> float | None:
    """How many parameter values the cell trains (``None`` if not recorded)."""
    return _count(record, "trainable")


def total_parameters(record: CellRecord) -> float | None:
    """How many parameter values the model holds, adapters included (``None`` if not recorded)."""
    return _count(record, "total")


def trainable_percent(record: CellRecord) -> float | None:
    """Trainable parameters as a percentage of the total, or ``None`` if either is missing or the total is 0."""
    trainable, total = trainable_parameters(record), total_parameters(record)
    return None if trainable is None or not total else 100 * trainable / total


TRAINABLE = Metric(key="trainable_parameters", label="Trainable parameters", unit="count", goal="min", paper="",
                   extract=trainable_parameters)


def bayes_accuracy(record: CellRecord) -> float | None:
    """The Bayes classifier's accuracy on the cell's held-out split, in percent: the ceiling (``None`` if unknown)."""
    task = record.task if isinstance(record.task, Mapping) else {}
    value = as_number(task.get("bayes_accuracy"))
    return None if value is None else 100 * value


def pixel_baseline_accuracy(record: CellRecord) -> float | None:
    """The sanity baseline's accuracy on the cell's test split, in percent: a 1-nearest-neighbour classifier on
    raw pixels (:mod:`gradeff.data.sanity`), recorded as ``task.pixel_1nn_accuracy`` (``None`` if unknown)."""
    task = record.task if isinstance(record.task, Mapping) else {}
    value = as_number(task.get("pixel_1nn_accuracy"))
    return None if value is None else 100 * value


def beats_pixel_baseline(record: CellRecord) -> bool | None:
    """Whether an ``ok`` cell's test accuracy is above the raw-pixel 1-NN's on the same split.

    ``None`` where either is unknown or the cell did not end ok; ``False`` flags a cell whose accuracy
    says nothing about its fine-tuning: matching pixels against the training set did as well.
    """
    baseline = pixel_baseline_accuracy(record)
    accuracy = analysis.metric_value(record, "heldout_accuracy") if analysis.comparable(record) else None
    return None if baseline is None or accuracy is None else accuracy > baseline


def _order(keys: Iterable[str], registry: Iterable[str]) -> dict[str, int]:
    return {key: rank for rank, key in enumerate(analysis.order_keys(keys, registry))}


def sort_peft(records: Iterable[CellRecord]) -> list[CellRecord]:
    """Records in the study's order: backbone, dataset, method, strategy, each in registry order (unknown last)."""
    records = list(records)
    ranks = [_order((getattr(r, axis) for r in records), registry) for axis, registry in
             (("model", MODELS), ("dataset", TASKS), ("method", METHODS), ("strategy", STRATEGIES))]
    return sorted(records, key=lambda r: (ranks[0][r.model], ranks[1][r.dataset], ranks[2][r.method],
                                          ranks[3][r.strategy]))


def group_by_backbone(records: Iterable[CellRecord]) -> dict[tuple[str, str], list[CellRecord]]:
    """Records by ``(backbone, dataset)``, groups and their members in the order given."""
    groups: dict[tuple[str, str], list[CellRecord]] = {}
    for record in records:
        groups.setdefault((record.model, record.dataset), []).append(record)
    return groups


def memory_metric_for(records: Iterable[CellRecord]) -> str | None:
    """The first of :data:`MEMORY_METRICS` that some ``ok`` record measured, else ``None``.

    The cells compared in one table or ratio are all read on the same memory metric, never a mix.
    """
    records = [r for r in records if analysis.comparable(r)]
    for key in MEMORY_METRICS:
        if any(analysis.metric_value(r, key) is not None for r in records):
            return key
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Winner:
    """The best cell of one backbone and dataset for one objective.

    Attributes:
        objective: a key of :data:`OBJECTIVES`.
        metric: the metric key compared (``None`` if no ok cell measured memory).
        record: the winner, or ``None``.
        value: the winner's raw value.
    """

    objective: str
    metric: str | None
    record: CellRecord | None
    value: float | None


def winners(records: Sequence[CellRecord]) -> dict[str, Winner]:
    """Which method + strategy wins accuracy, memory, time and energy among one backbone and dataset's cells.

    Args:
        records: the cells of one backbone and dataset, in study order (a tie keeps the first).

    Returns:
        objective → :class:`Winner`.
    """
    result = {}
    for objective, key in OBJECTIVES.items():
        key = key or memory_metric_for(records)
        best = analysis.best_cell(records, key) if key else None
        result[objective] = Winner(objective=objective, metric=key, record=best,
                                   value=analysis.metric_value(best, key) if best is not None else None)
    return result


def ratio(top: CellRecord | None, bottom: CellRecord | None, metric: str | Metric) -> float | None:
    """``metric(top) / metric(bottom)``; ``None`` if a side is missing, not ``ok``, unmeasured, or the bottom is 0."""
    values = [analysis.metric_value(r, metric) if r is not None and analysis.comparable(r) else None
              for r in (top, bottom)]
    return None if None in values or values[1] == 0 else values[0] / values[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Versus:
    """One cell against full fine-tuning with the same backbone, dataset and strategy.

    Attributes:
        record: the cell.
        reference: the full fine-tuning cell, or ``None`` if there is none.
        accuracy_points: held-out accuracy minus the reference's, in percentage points (> 0: better).
        memory / time / energy: ratios to the reference (< 1: cheaper); ``None`` where a side is missing.
    """

    record: CellRecord
    reference: CellRecord | None
    accuracy_points: float | None
    memory: float | None
    time: float | None
    energy: float | None


def versus_full(records: Sequence[CellRecord], memory_metric: str | None) -> list[Versus]:
    """Every non-full cell of one backbone and dataset against full fine-tuning under the same strategy.

    Args:
        records: the cells of one backbone and dataset.
        memory_metric: the memory metric the group is read on (``None``: memory ratios are ``None``).

    Returns:
        One :class:`Versus` per cell whose method is not ``full``, in the order given.
    """
    full = {r.strategy: r for r in records if r.method == FULL}
    result = []
    for record in records:
        if record.method == FULL:
            continue
        reference = full.get(record.strategy)
        accuracy = [analysis.metric_value(r, "heldout_accuracy") if r is not None and analysis.comparable(r)
                    else None for r in (record, reference)]
        result.append(Versus(
            record=record, reference=reference,
            accuracy_points=None if None in accuracy else accuracy[0] - accuracy[1],
            memory=ratio(record, reference, memory_metric) if memory_metric else None,
            time=ratio(record, reference, "epoch_seconds"), energy=ratio(record, reference, "energy")))
    return result


def checkpoint_ratios(records: Iterable[CellRecord], metric: str | Metric, *, numerator: str = "checkpoint",
                      denominator: str = "standard") -> dict[tuple[str, str, str], float | None]:
    """Ratio of a metric between two strategies per backbone, dataset and method (static checkpointing's effect).

    Args:
        records: one record per cell.
        metric: a key of :data:`~gradeff.analysis.METRICS` or a :class:`~gradeff.analysis.Metric`.
        numerator: strategy on top (``checkpoint``: < 1 means checkpointing lowered the metric).
        denominator: the reference strategy.

    Returns:
        ``(backbone, dataset, method)`` → ratio, for every triple that has either strategy; ``None``
        where a side is missing, not ``ok``, unmeasured, or the denominator is zero.
    """
    cells: dict[tuple[str, str, str], dict[str, CellRecord]] = {}
    for record in records:
        if record.strategy in (numerator, denominator):
            cells.setdefault((record.model, record.dataset, record.method), {})[record.strategy] = record
    return {key: ratio(sides.get(numerator), sides.get(denominator), metric) for key, sides in cells.items()}


def pretraining_by_backbone(records: Iterable[CellRecord]) -> dict[str, list[tuple[CellRecord, Mapping]]]:
    """The pretraining each record started from, by backbone: records whose ``weights.source`` is ``pretrained``.

    Returns:
        backbone → ``(record, weights["pretraining"])`` pairs in the order given (a record without a
        pretraining mapping is left out).
    """
    result: dict[str, list[tuple[CellRecord, Mapping]]] = {}
    for record in records:
        weights = record.weights if isinstance(record.weights, Mapping) else {}
        info = weights.get("pretraining")
        if weights.get("source") == "pretrained" and isinstance(info, Mapping):
            result.setdefault(record.model, []).append((record, info))
    return result


# --- Baselines, inference cost and the NetScore family -------------------------------------------

BASELINE_GRIDS = frozenset({"baselines"})


def is_baseline(record: CellRecord) -> bool:
    """Whether the record is a foundation-model baseline (its grid is one of :data:`BASELINE_GRIDS`), not a
    fine-tuning cell."""
    return record.grid in BASELINE_GRIDS


def split_baselines(records: Iterable[CellRecord]) -> tuple[list[CellRecord], list[CellRecord]]:
    """``(fine-tuning records, baseline records)``, each in the order given."""
    tuned, baselines = [], []
    for record in records:
        (baselines if is_baseline(record) else tuned).append(record)
    return tuned, baselines


def weights_source(record: CellRecord) -> str | None:
    """Where the record's starting weights came from (``random``, ``pretrained``, ``local``), or ``None``."""
    weights = record.weights if isinstance(record.weights, Mapping) else {}
    source = weights.get("source")
    return source if isinstance(source, str) and source else None


def training_seconds(record: CellRecord) -> float | None:
    """Seconds of the record's training epochs together (a linear probe's too), or ``None`` without epochs
    (a zero-shot cell) or where an epoch's time is missing."""
    seconds = [as_number(epoch.seconds) for epoch in record.epochs]
    return None if not seconds or None in seconds else sum(seconds)


def inference_of(record: CellRecord) -> Mapping:
    """The record's ``inference`` mapping, or an empty one where it has none or it is not a mapping."""
    return record.inference if isinstance(record.inference, Mapping) else {}


def inference_number(record: CellRecord, name: str) -> float | None:
    """One figure of the record's inference cost, or ``None`` if absent or not a finite number."""
    return as_number(inference_of(record).get(name))


def score_of(record: CellRecord, key: str) -> Score | None:
    """One score of the NetScore family as recorded (``key``: a key of :data:`gradeff.netscore.LABELS`).

    Returns:
        The score; ``None`` where the record carries no such score (an older record, or a cell that
        ended before its inference was measured). A recorded value that is not a finite number reads
        as missing, never as 0.
    """
    scores = inference_of(record).get("scores")
    entry = scores.get(key) if isinstance(scores, Mapping) else None
    if not isinstance(entry, Mapping):
        return None
    value = as_number(entry.get("value"))
    missing = entry.get("missing")
    missing = tuple(str(m) for m in missing) if isinstance(missing, (list, tuple)) else ()
    if value is None:
        return Score(None, False, missing or ("value",))
    return Score(value, entry.get("estimated") is True, ())


def netscore_ranking(records: Iterable[CellRecord], key: str) -> list[tuple[CellRecord, Score]]:
    """The ``ok`` records that have a value of score ``key``, highest first (a tie keeps the order given).

    Scores compare only between passes over the same images: rank one dataset's cells at a time.
    """
    scored = [(record, score_of(record, key)) for record in records if analysis.comparable(record)]
    kept = [(record, score) for record, score in scored if score is not None and score.value is not None]
    return sorted(kept, key=lambda pair: -pair[1].value)
