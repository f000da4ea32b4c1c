"""Analysis of the PEFT study's records: which study a record belongs to, the study's metrics, winners,
each method against full fine-tuning, checkpoint / standard ratios, the backbones' pretraining, and the
foundation-model baselines, inference cost and NetScore family that every classification record carries.

Pure functions over :class:`~gradeff.records.results.CellRecord` values in raw units, under
:mod:`gradeff.analysis`'s rules: only cells that ended ``ok`` compete or enter a ratio, every seed is
read and comparisons pair seeds, and a missing measurement is ``None`` (never 0). Which method wins is
:mod:`gradeff.analysis.verdicts`' job, as for every study.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gradeff import analysis
from gradeff.analysis import Metric
from gradeff.analysis.naming import weights_source
from gradeff.analysis.netscore import Score
from gradeff.analysis.pairing import PairedRatio, paired_ratio
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.analysis.stats import Interval, interval
from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.strategies import STRATEGIES
from gradeff.records.formatting import as_number
from gradeff.records.results import CellRecord, record_field, record_section

__all__ = [
    "BASELINE_GRIDS", "TRAINABLE", "Versus", "bayes_accuracy", "checkpoint_ratios", "group_by_backbone",
    "inference_number", "inference_of", "is_baseline", "measured_on_standard", "netscore_ranking",
    "pretraining_by_backbone", "ratio", "score_of", "sort_peft", "split_baselines", "total_parameters",
    "trainable_parameters", "trainable_percent", "training_seconds", "versus_full", "weights_source",
]

FULL = "full"


def _count(record: CellRecord, name: str) -> float | None:
    return as_number(record_field(record, "parameters", name))


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
    value = as_number(record_field(record, "task", "bayes_accuracy"))
    return None if value is None else 100 * value


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


def ratio(top: CellRecord | None, bottom: CellRecord | None, metric: str | Metric) -> float | None:
    """``metric(top) / metric(bottom)``; ``None`` if a side is missing, not ``ok``, unmeasured, or the bottom is 0."""
    values = [analysis.metric_value(r, metric) if r is not None and analysis.comparable(r) else None
              for r in (top, bottom)]
    return None if None in values or values[1] == 0 else values[0] / values[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Versus:
    """One cell against full fine-tuning with the same backbone, dataset and strategy, seed by seed.

    Attributes:
        runs: the cell over its seeds.
        reference: the full fine-tuning cell, or ``None`` if there is none.
        accuracy_points: the mean over common seeds of test accuracy minus the reference's, in percentage points
            (> 0: better), with its interval; ``None`` where no seed has both.
        memory / time / energy: ratios to the reference over common seeds (< 1: cheaper); ``None`` where no seed
            has both sides.
    """

    runs: CellRuns
    reference: CellRuns | None
    accuracy_points: Interval | None
    memory: PairedRatio | None
    time: PairedRatio | None
    energy: PairedRatio | None

    @property
    def record(self) -> CellRecord:
        return self.runs.first


def versus_full(runs: Mapping[str, CellRuns]) -> list[Versus]:
    """Every non-full cell of one backbone and dataset against full fine-tuning under the same strategy.

    Args:
        runs: the cells of one backbone and dataset over their seeds.

    Returns:
        One :class:`Versus` per cell whose method is not ``full``, in the order given.
    """
    full = {r.first.strategy: r for r in runs.values() if r.first.method == FULL}
    result = []
    for cell_runs in runs.values():
        if cell_runs.first.method == FULL:
            continue
        reference = full.get(cell_runs.first.strategy)
        points = None
        if reference is not None:
            mine, theirs = cell_runs.values("heldout_accuracy"), reference.values("heldout_accuracy")
            common = sorted(set(mine) & set(theirs))
            points = interval([mine[s] - theirs[s] for s in common]) if common else None

        def against(metric: str) -> PairedRatio | None:  # called in this iteration only
            return None if reference is None else paired_ratio(cell_runs.values(metric),  # noqa: B023
                                                               reference.values(metric))  # noqa: B023

        result.append(Versus(runs=cell_runs, reference=reference, accuracy_points=points, memory=against("peak"),
                             time=against("epoch_seconds"), energy=against("energy")))
    return result


def checkpoint_ratios(records: Iterable[CellRecord], metric: str | Metric, *, numerator: str = "checkpoint",
                      denominator: str = "standard") -> dict[tuple[str, str, str], PairedRatio | None]:
    """Ratio of a metric between two strategies per backbone, dataset and method, seed by seed.

    Returns:
        ``(backbone, dataset, method)`` → :class:`~gradeff.analysis.pairing.PairedRatio` for every triple that has
        either strategy; ``None`` where no seed has both sides ok and measured (or the denominator is zero).
    """
    return analysis.strategy_ratios(records, metric, numerator=numerator, denominator=denominator,
                                    key=lambda r: (r.model, r.dataset, r.method))


def pretraining_by_backbone(records: Iterable[CellRecord]) -> dict[str, list[tuple[CellRecord, Mapping]]]:
    """The pretraining each record started from, by backbone: records whose ``weights.source`` is ``pretrained``.

    Returns:
        backbone → ``(record, weights["pretraining"])`` pairs in the order given (a record without a
        pretraining mapping is left out).
    """
    result: dict[str, list[tuple[CellRecord, Mapping]]] = {}
    for record in records:
        info = record_field(record, "weights", "pretraining")
        if record_field(record, "weights", "source") == "pretrained" and isinstance(info, Mapping):
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


def training_seconds(record: CellRecord) -> float | None:
    """Seconds of the record's training epochs together (a linear probe's too), or ``None`` without epochs
    (a zero-shot cell) or where an epoch's time is missing."""
    seconds = [as_number(epoch.seconds) for epoch in record.epochs]
    return None if not seconds or None in seconds else sum(seconds)


def inference_of(record: CellRecord) -> Mapping:
    """The record's ``inference`` mapping, or an empty one where it has none or it is not a mapping."""
    return record_section(record, "inference")


def measured_on_standard(record: CellRecord) -> bool:
    """Whether the record leaves its inference cost to the ``standard`` cell: its strategy trains that cell's
    model bit for bit (:attr:`gradeff.axes.strategies.StrategySpec.trains_as_standard`), so it deploys the same model
    and is not measured again."""
    return not inference_of(record) and record.strategy in STRATEGIES and STRATEGIES[record.strategy].trains_as_standard


def inference_number(record: CellRecord, name: str) -> float | None:
    """One figure of the record's inference cost, or ``None`` if absent or not a finite number."""
    return as_number(record_field(record, "inference", name))


def score_of(record: CellRecord, key: str) -> Score | None:
    """One score of the NetScore family as recorded (``key``: a key of :data:`gradeff.analysis.netscore.LABELS`).

    Returns:
        The score; ``None`` where the record carries no such score (an older record, or a cell that
        ended before its inference was measured). A recorded value that is not a finite number reads
        as missing, never as 0.
    """
    scores = record_field(record, "inference", "scores")
    entry = scores.get(key) if isinstance(scores, Mapping) else None
    if not isinstance(entry, Mapping):
        return None
    value = as_number(entry.get("value"))
    missing = entry.get("missing")
    missing = tuple(str(m) for m in missing) if isinstance(missing, (list, tuple)) else ()
    if value is None:
        return Score(None, False, missing or ("value",))
    return Score(value, entry.get("estimated") is True, ())


def netscore_ranking(records: Iterable[CellRecord], key: str) -> list[tuple[CellRuns, Score]]:
    """The cells (over their ok seeds) that have a value of score ``key``, highest mean first.

    A cell's score is the mean of its seeds' values, estimated where any seed's is; a tie keeps the
    canonical order. Scores compare only between passes over the same images: rank one dataset's cells at a time.
    """
    ranked = []
    for cell_runs in by_cell(records).values():
        scores = [score for r in cell_runs.ok if (score := score_of(r, key)) is not None and score.value is not None]
        if scores:
            ranked.append((cell_runs, Score(sum(s.value for s in scores) / len(scores),
                                            any(s.estimated for s in scores), ())))
    return sorted(ranked, key=lambda pair: -pair[1].value)
