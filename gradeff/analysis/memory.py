"""Analysis of the memory study's records: which study a record belongs to, what each strategy planned,
every cell against ``standard``, the adaptive budget against the compiler's at the same target, and the
PEFT paper's claim ("adaptive: peak -x % for +y % time and +z % energy") as measured.

Pure functions over :class:`~gradeff.results.CellRecord` values in raw units, under
:mod:`gradeff.analysis`'s rules: only cells that ended ``ok`` enter a ratio, a missing measurement is
``None`` (never 0), and a plan is read defensively: older records have none, hand-edited ones may
hold anything, and a key that is absent or not a number reads as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gradeff import analysis
from gradeff.analysis import Metric
from gradeff.analysis import peft as peft_analysis
from gradeff.formatting import as_number
from gradeff.grid import GRIDS
from gradeff.models import MODELS
from gradeff.results import CellRecord
from gradeff.strategies import BUDGET_KINDS, STRATEGIES

__all__ = [
    "ADAPTIVE", "COMPILER", "DEVICE_MEMORY", "MEMORY_FOCUS", "PEAK", "STANDARD", "Change", "GroupKey",
    "LevelClaim", "Studies", "Verdict", "budget_kind", "budget_level", "checkpointed_blocks", "compared",
    "device_memory_bytes", "epoch_range", "group_cells", "host_copies_bytes", "is_compiled", "is_offload",
    "level_claims", "peft_budget_changes", "plan_number", "plan_of", "sort_memory", "split_studies", "verdict",
]

MEMORY_FOCUS = "memory"
STANDARD = "standard"
ADAPTIVE, COMPILER = BUDGET_KINDS
# The live-tensor peak of one step: what the paper's claim is about, and exact on any device. Compiled
# cells do not have it, so the adaptive budget is held against the compiler on DEVICE_MEMORY instead.
PEAK = "peak"


class Studies(NamedTuple):
    """The records of each study, each in the order given."""

    main: list[CellRecord]
    peft: list[CellRecord]
    memory: list[CellRecord]


def split_studies(records: Iterable[CellRecord]) -> Studies:
    """``(main-study, PEFT-study, memory-study)`` records, by what their grid is read by.

    A grid this gradeff does not know reads as the main study, as the records of older versions did
    (see :func:`gradeff.analysis.peft.focus_of`).
    """
    studies = Studies([], [], [])
    for record in records:
        focus = peft_analysis.focus_of(record)
        target = studies.peft if focus == peft_analysis.ACCURACY_FOCUS else \
            studies.memory if focus == MEMORY_FOCUS else studies.main
        target.append(record)
    return studies


def plan_of(record: CellRecord) -> Mapping:
    """The record's ``plan``, or an empty mapping where it has none or it is not a mapping."""
    return record.plan if isinstance(record.plan, Mapping) else {}


def plan_number(record: CellRecord, key: str) -> float | None:
    """One number of the record's plan, or ``None`` if absent or not a finite number."""
    return as_number(plan_of(record).get(key))


def _spec(record: CellRecord):
    return STRATEGIES[record.strategy] if record.strategy in STRATEGIES else None


def budget_kind(record: CellRecord) -> str | None:
    """``adaptive`` or ``compiler`` for a budget cell, else ``None``: the plan's word, else the strategy's."""
    # The plan says what ran; the registry covers records whose plan was lost (an oom before planning).
    kind = plan_of(record).get("kind")
    if kind in BUDGET_KINDS:
        return kind
    spec = _spec(record)
    return spec.budget if spec is not None else None


def budget_level(record: CellRecord) -> float | None:
    """Where a budget cell's budget lies, from every block checkpointed (0) to none (1); ``None`` if absolute."""
    level = plan_number(record, "budget_fraction")
    if level is None:
        spec = _spec(record)
        level = spec.budget_fraction if spec is not None else None
    return level if level is not None and 0 <= level <= 1 else None


def is_compiled(record: CellRecord) -> bool:
    """Whether the cell trained a torch.compile'd model (the compiler's budget)."""
    return budget_kind(record) == COMPILER


def is_offload(record: CellRecord) -> bool:
    """Whether the cell kept what is saved for backward in host memory."""
    offload = plan_of(record).get("offload")
    if isinstance(offload, bool):
        return offload
    spec = _spec(record)
    return bool(spec is not None and spec.offload)


def checkpointed_blocks(record: CellRecord) -> tuple[str, ...]:
    """The names of the blocks a budget plan checkpointed (empty when the plan lists none)."""
    names = plan_of(record).get("checkpointed")
    return tuple(str(n) for n in names) if isinstance(names, (list, tuple)) else ()


def host_copies_bytes(record: CellRecord) -> float:
    """Bytes an offload cell kept in host memory that are in the device's memory anyway: host = device (CPU).

    On a GPU the copies leave the device's memory, which is the point of offloading; on a CPU-only
    machine they stay in the one memory there is, so leaving them out would credit offload with a
    saving it cannot make.
    """
    if not is_offload(record) or str(record.device).split(":", 1)[0] != "cpu":
        return 0.0
    return plan_number(record, "offloaded_bytes_per_step") or 0.0


def device_memory_bytes(record: CellRecord) -> float | None:
    """The breakdown sum (parameters + gradients + optimizer state + saved activations) in the cell's device memory.

    Measured for every cell, compiled ones included (their activations are counted through
    saved-tensor hooks), so one quantity places every strategy; offload's host copies count where
    the host is the device (:func:`host_copies_bytes`). ``None`` unless all four parts were measured.
    """
    total = analysis.training_memory_bytes(record)
    return None if total is None else total + host_copies_bytes(record)


DEVICE_MEMORY = Metric(key="device_memory", label="Training memory (breakdown sum)", unit="bytes", goal="min",
                       paper="", extract=device_memory_bytes)


def epoch_range(record: CellRecord) -> tuple[float, float] | None:
    """The shortest and the longest epoch of a cell in seconds, or ``None`` with fewer than two timed epochs.

    Time per epoch is their mean; a wide range (another process on the machine, a first epoch paying
    for lazy initialisation) makes a ratio to standard uncertain, and the report says so.
    """
    seconds = [s for s in (as_number(e.seconds) for e in record.epochs) if s is not None and s > 0]
    return (min(seconds), max(seconds)) if len(seconds) > 1 else None


class GroupKey(NamedTuple):
    """What a memory-study cell is compared within: everything but its strategy."""

    model: str
    optimizer: str
    method: str
    dataset: str


def _strategy_order(records: Iterable[CellRecord]) -> dict[str, int]:
    # The memory grid's own order (standard, checkpoint, offload, the levels high to low), then any other strategy.
    grid = next((spec.strategies for spec in GRIDS.values() if spec.focus == MEMORY_FOCUS), ())
    keys = analysis.order_keys((r.strategy for r in records), (*grid, *STRATEGIES))
    return {key: rank for rank, key in enumerate(keys)}


def sort_memory(records: Iterable[CellRecord]) -> list[CellRecord]:
    """Records in the study's order: model (registry order, unknown last), then strategy in the grid's order."""
    records = list(records)
    models = {key: rank for rank, key in enumerate(analysis.order_keys((r.model for r in records), MODELS))}
    strategies = _strategy_order(records)
    return sorted(records, key=lambda r: (models[r.model], r.optimizer, r.method, r.dataset, strategies[r.strategy]))


def group_cells(records: Iterable[CellRecord]) -> dict[GroupKey, list[CellRecord]]:
    """Records by :class:`GroupKey`, groups and members in the order given."""
    groups: dict[GroupKey, list[CellRecord]] = {}
    for record in records:
        groups.setdefault(GroupKey(record.model, record.optimizer, record.method, record.dataset), []).append(record)
    return groups


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One cell against a reference cell: ratios (``None`` where a side is missing, failed or unmeasured).

    Attributes:
        record: the cell.
        reference: the cell it is divided by, or ``None`` if there is none.
        memory_metric: the memory metric compared (the same on both sides), ``None`` if none.
        memory / time / energy: ``cell / reference``.
        reason: why the whole comparison is n/a (``""`` when both sides ended ok).
    """

    record: CellRecord
    reference: CellRecord | None
    memory_metric: str | Metric | None
    memory: float | None
    time: float | None
    energy: float | None
    reason: str


def _why_not(record: CellRecord | None, reference: CellRecord | None, reference_name: str) -> str:
    if record is None:
        return "not in the results"
    if record.status != "ok":
        detail = f" ({record.detail})" if record.detail else ""
        return f"{record.strategy} ended {record.status}{detail}"
    if reference is None:
        return f"no {reference_name} cell to compare with"
    if reference.status != "ok":
        return f"{reference.strategy} ended {reference.status}"
    return ""


def compared(record: CellRecord, reference: CellRecord | None, memory_metric: str | Metric | None,
             reference_name: str = STANDARD) -> Change:
    """``record`` against ``reference`` on memory, time per epoch and energy.

    Args:
        record: the cell.
        reference: the cell to divide by (``None``: every ratio is ``None``, and the reason says so).
        memory_metric: the memory metric of both sides (``None``: no memory ratio).
        reference_name: how the reason names a missing reference.

    Returns:
        The :class:`Change`.
    """
    ratio = peft_analysis.ratio
    return Change(record=record, reference=reference, memory_metric=memory_metric,
                  memory=ratio(record, reference, memory_metric) if memory_metric is not None else None,
                  time=ratio(record, reference, "epoch_seconds"), energy=ratio(record, reference, "energy"),
                  reason=_why_not(record, reference, reference_name))


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The adaptive budget against the compiler's knapsack at the same level.

    Attributes:
        memory: adaptive / compiler on :data:`DEVICE_MEMORY` (``None`` where a side is missing).
        time: adaptive / compiler time per epoch.
        outcome: ``beats`` (lower memory at equal or less time, or equal memory in less time), ``loses``
            (the reverse), ``ties``, ``less memory, more time``, ``more memory, less time``, or ``n/a``.
        reason: why the outcome is ``n/a`` (``""`` otherwise).
    """

    memory: float | None
    time: float | None
    outcome: str
    reason: str


def _side(value: float) -> int:
    shown = round(value, 2)  # judged as printed: 0.999 reads "1.00×" and is a tie, not a win
    return (shown > 1) - (shown < 1)


def verdict(adaptive: CellRecord | None, compiler: CellRecord | None) -> Verdict:
    """Whether the adaptive budget beats the compiler's knapsack at the same target.

    Both sides are read on :data:`DEVICE_MEMORY` (the compiled cell has no live peak) and time per epoch
    (compile time is not part of it).
    """
    if adaptive is None or compiler is None:
        missing = "adaptive" if adaptive is None else "compiler"
        return Verdict(memory=None, time=None, outcome="n/a", reason=f"no {missing} cell at this level")
    change = compared(adaptive, compiler, DEVICE_MEMORY, reference_name="compiler")
    reason = change.reason or ("" if change.memory is not None and change.time is not None else
                               "memory or time not measured on one side")
    if reason:
        return Verdict(memory=change.memory, time=change.time, outcome="n/a", reason=reason)
    memory, time = _side(change.memory), _side(change.time)
    if memory == time == 0:
        outcome = "ties"
    elif memory <= 0 and time <= 0:
        outcome = "beats"
    elif memory >= 0 and time >= 0:
        outcome = "loses"
    else:
        outcome = "less memory, more time" if memory < 0 else "more memory, less time"
    return Verdict(memory=change.memory, time=change.time, outcome=outcome, reason="")


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelClaim:
    """One budget level of one group: the adaptive cell against standard, and against the compiler's cell.

    Attributes:
        level: the budget's place from every block checkpointed (0) to none (1).
        adaptive / compiler: the cells of each kind at this level (``None`` if not in the results).
        change: the adaptive cell against standard on the live peak (``None`` without an adaptive cell).
        verdict: adaptive against compiler.
    """

    level: float
    adaptive: CellRecord | None
    compiler: CellRecord | None
    change: Change | None
    verdict: Verdict


def level_claims(records: Sequence[CellRecord]) -> list[LevelClaim]:
    """The paper's claim per budget level for one group's cells, levels from the most memory to the least.

    Args:
        records: one group's cells (see :func:`group_cells`), one per strategy.

    Returns:
        One :class:`LevelClaim` per level some budget cell has.
    """
    reference = next((r for r in records if r.strategy == STANDARD), None)
    cells: dict[float, dict[str, CellRecord]] = {}
    for record in records:
        kind, level = budget_kind(record), budget_level(record)
        if kind is not None and level is not None:
            cells.setdefault(level, {}).setdefault(kind, record)
    claims = []
    for level in sorted(cells, reverse=True):
        adaptive, compiler = cells[level].get(ADAPTIVE), cells[level].get(COMPILER)
        claims.append(LevelClaim(
            level=level, adaptive=adaptive, compiler=compiler,
            change=compared(adaptive, reference, PEAK) if adaptive is not None else None,
            verdict=verdict(adaptive, compiler)))
    return claims


def peft_budget_changes(records: Iterable[CellRecord]) -> dict[str, list[Change]]:
    """The PEFT study's adaptive budget cells against ``standard``, per backbone.

    Each budget cell is divided by the standard cell of the same backbone, dataset and method; a
    backbone's cells are read on one memory metric (:func:`gradeff.analysis.peft.memory_metric_for`:
    the GPU allocator peak, else the live peak, else the breakdown sum).

    Args:
        records: the PEFT study's records, in study order.

    Returns:
        backbone → one :class:`Change` per adaptive budget cell, in the order given; backbones without
        a budget cell are left out.
    """
    by_backbone: dict[str, list[CellRecord]] = {}
    for record in records:
        by_backbone.setdefault(record.model, []).append(record)
    result: dict[str, list[Change]] = {}
    for backbone, group in by_backbone.items():
        budgets = [r for r in group if budget_kind(r) == ADAPTIVE]
        if not budgets:
            continue
        metric = peft_analysis.memory_metric_for(group)
        standard = {(r.dataset, r.method): r for r in group if r.strategy == STANDARD}
        result[backbone] = [compared(r, standard.get((r.dataset, r.method)), metric) for r in budgets]
    return result
