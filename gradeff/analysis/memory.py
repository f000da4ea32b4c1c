"""Analysis of the memory study's records: which study a record belongs to, what each strategy planned,
every cell against ``standard``, the adaptive budget against the compiler's at the same target, and the
PEFT paper's claim ("adaptive: peak -x % for +y % time and +z % energy") as measured.

Pure functions over :class:`~gradeff.records.results.CellRecord` values in raw units, under
:mod:`gradeff.analysis`'s rules: only seeds that ended ``ok`` enter a ratio, ratios are taken seed by seed
(:func:`gradeff.analysis.pairing.paired_ratio`), a missing measurement is ``None`` (never 0), and a plan
is read defensively: older records have none, hand-edited ones may hold anything, and a key that is
absent or not a number reads as unknown. Budget levels whose adaptive plans checkpoint the same blocks
train the same model the same way: :func:`merge_levels` makes them one entry rather than several
"levels" that differ by noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gradeff import analysis
from gradeff.analysis import Metric, scope
from gradeff.analysis.pairing import PairedRatio, paired_ratio
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.axes.models import MODELS
from gradeff.axes.strategies import BUDGET_KINDS, STRATEGIES
from gradeff.records.formatting import as_number
from gradeff.records.results import CellRecord, record_field, record_section
from gradeff.studies.grid import GRIDS

__all__ = [
    "ADAPTIVE", "COMPILER", "DEVICE_MEMORY", "MEMORY_FOCUS", "PEAK", "STANDARD", "Change", "GroupKey", "LevelClaim",
    "Studies", "Verdict", "allocator_peak_bytes", "budget_kind", "budget_level", "checkpointed_blocks", "compared",
    "compiled_within_target", "device_memory_bytes", "epoch_range", "expected_oom", "group_cells", "host_copies_bytes",
    "is_compiled", "is_compiled_anchor", "is_offload", "level_claims", "merge_levels", "peft_budget_changes",
    "plan_key", "plan_number", "plan_of", "ratio_of", "recomputation_time", "reference_of", "sort_memory",
    "split_studies", "verdict",
]

MEMORY_FOCUS = "memory"
STANDARD = "standard"
ADAPTIVE, COMPILER = BUDGET_KINDS
# The live-tensor peak of one step: what the paper's claim is about, and exact on any device. Compiled
# cells do not have it, so the adaptive budget is held against the compiler on DEVICE_MEMORY instead.
PEAK = "peak"


class Studies(NamedTuple):
    """The records of each study, each in the order given (the PEFT study with its baselines)."""

    main: list[CellRecord]
    peft: list[CellRecord]
    memory: list[CellRecord]
    real: list[CellRecord]


def split_studies(records: Iterable[CellRecord]) -> Studies:
    """Every study's records, by the grid each study reads (:mod:`gradeff.analysis.scope`)."""
    found = scope.split(records)
    return Studies(found["main"], found["peft"] + found["baselines"], found["memory"], found["real"])


def plan_of(record: CellRecord) -> Mapping:
    """The record's ``plan``, or an empty mapping where it has none or it is not a mapping."""
    return record_section(record, "plan")


def plan_number(record: CellRecord, key: str) -> float | None:
    """One number of the record's plan, or ``None`` if absent or not a finite number."""
    return as_number(record_field(record, "plan", key))


def _spec(record: CellRecord):
    return STRATEGIES[record.strategy] if record.strategy in STRATEGIES else None


def budget_kind(record: CellRecord) -> str | None:
    """``adaptive`` or ``compiler`` for a budget cell, else ``None``: the plan's word, else the strategy's."""
    # The plan says what ran; the registry covers records whose plan was lost (an oom before planning).
    kind = record_field(record, "plan", "kind")
    if kind in BUDGET_KINDS:
        return kind
    spec = _spec(record)
    return spec.budget if spec is not None else None


def expected_oom(record: CellRecord) -> bool:
    """A budget cell that ended ``oom``: even its most frugal plan misses the budget, so it is refused before
    training by design (:mod:`gradeff.axes.strategies.budget`). Its status is the finding about that budget, not a
    fault of the run."""
    return record.status == "oom" and budget_kind(record) is not None


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


def is_compiled_anchor(record: CellRecord) -> bool:
    """Whether the cell is the compiler's at level 100 %: compiled at the full activation budget. The compiled cells'
    reference, as ``standard`` is the eager cells': it carries the compile backend's own speed and nothing else."""
    return is_compiled(record) and budget_level(record) == 1.0


def reference_of(runs: CellRuns, group: Mapping[str, CellRuns]) -> CellRuns | None:
    """What a cell of ``group`` is divided by: its compiled anchor for a compiled cell (``None`` without one), else
    ``standard``. The anchor itself is read against ``standard``: that ratio is the backend's cost."""
    record = runs.first
    if is_compiled(record) and not is_compiled_anchor(record):
        return next((r for r in group.values() if is_compiled_anchor(r.first)), None)
    return group.get(STANDARD)


def allocator_peak_bytes(record: CellRecord) -> float | None:
    """The GPU allocator's peak over the cell's epochs (``meters.gpu.alloc_peak_bytes``); ``None`` off a GPU."""
    return analysis.meter_value(record, "gpu", "alloc_peak_bytes")


def compiled_within_target(record: CellRecord) -> bool | None:
    """Whether a compiled cell met its budget's target, read on the GPU allocator's peak (which adds the allocator's
    own overhead to the tensors: a cell within the target on it is within on any count). ``None`` where it cannot
    be told: no allocator peak (a CPU, where the live peak of compiled code is not measurable either), no target,
    or not a compiled cell that ended ok."""
    target, peak = plan_number(record, "target_bytes"), allocator_peak_bytes(record)
    if not is_compiled(record) or record.status != "ok" or target is None or peak is None:
        return None
    return peak <= target


def is_offload(record: CellRecord) -> bool:
    """Whether the cell kept what is saved for backward in host memory."""
    offload = record_field(record, "plan", "offload")
    if isinstance(offload, bool):
        return offload
    spec = _spec(record)
    return bool(spec is not None and spec.offload)


def checkpointed_blocks(record: CellRecord) -> tuple[str, ...]:
    """The names of the blocks a budget plan checkpointed (empty when the plan lists none)."""
    names = record_field(record, "plan", "checkpointed")
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


def group_cells(records: Iterable[CellRecord]) -> dict[GroupKey, dict[str, CellRuns]]:
    """Cells over their seeds by :class:`GroupKey` (strategy → its cell), groups and members in the order given."""
    groups: dict[GroupKey, list[CellRecord]] = {}
    for record in records:
        groups.setdefault(GroupKey(record.model, record.optimizer, record.method, record.dataset), []).append(record)
    return {key: {r.first.strategy: r for r in _ordered(by_cell(group).values())} for key, group in groups.items()}


def _ordered(runs: Iterable[CellRuns]) -> list[CellRuns]:
    runs = list(runs)
    order = _strategy_order(r.first for r in runs)
    return sorted(runs, key=lambda r: order[r.first.strategy])


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One cell against a reference cell, seed by seed (``None`` where no seed has both sides ok and measured).

    Attributes:
        runs: the cell over its seeds.
        reference: the cell it is divided by, or ``None`` if there is none.
        memory_metric: the memory metric compared (the same on both sides), ``None`` if none.
        memory / time / energy: ``cell / reference`` over the common seeds.
        reason: why the whole comparison is n/a (``""`` when some seed of each side ended ok).
    """

    runs: CellRuns
    reference: CellRuns | None
    memory_metric: str | Metric | None
    memory: PairedRatio | None
    time: PairedRatio | None
    energy: PairedRatio | None
    reason: str

    @property
    def record(self) -> CellRecord:
        return self.runs.first


def _why_not(runs: CellRuns | None, reference: CellRuns | None, reference_name: str) -> str:
    if runs is None:
        return "not in the results"
    if not runs.ok:
        record = runs.runs[-1]
        detail = f" ({record.detail})" if record.detail else ""
        return f"{record.strategy} ended {runs.status}{detail}"
    if reference is None:
        return f"no {reference_name} cell to compare with"
    if not reference.ok:
        return f"{reference.first.strategy} ended {reference.status}"
    return ""


def ratio_of(runs: CellRuns | None, reference: CellRuns | None, metric: str | Metric | None) -> PairedRatio | None:
    """``runs / reference`` of ``metric`` seed by seed, or ``None`` where a side or the metric is missing."""
    if runs is None or reference is None or metric is None:
        return None
    return paired_ratio(runs.values(metric), reference.values(metric))


def compared(runs: CellRuns, reference: CellRuns | None, memory_metric: str | Metric | None,
             reference_name: str = STANDARD) -> Change:
    """``runs`` against ``reference`` on memory, time per epoch and energy, seed by seed.

    Args:
        runs: the cell over its seeds.
        reference: the cell to divide by (``None``: every ratio is ``None``, and the reason says so).
        memory_metric: the memory metric of both sides (``None``: no memory ratio).
        reference_name: how the reason names a missing reference.

    Returns:
        The :class:`Change`.
    """
    return Change(runs=runs, reference=reference, memory_metric=memory_metric,
                  memory=ratio_of(runs, reference, memory_metric), time=ratio_of(runs, reference, "epoch_seconds"),
                  energy=ratio_of(runs, reference, "energy"), reason=_why_not(runs, reference, reference_name))


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The adaptive budget against the compiler's knapsack at the same level.

    Attributes:
        memory: adaptive / compiler on :data:`DEVICE_MEMORY` over seeds (``None`` where a side is missing).
        time: the recomputation's cost of each, against its own cell at the full budget:
            (adaptive / standard) / (compiler / compiled anchor) time per epoch over seeds. The compile backend's
            own speed (the anchor against standard) cancels out.
        outcome: ``beats`` (lower memory at equal or less time, or equal memory in less time), ``loses``
            (the reverse), ``ties``, ``less memory, more time``, ``more memory, less time``, or ``n/a``.
        reason: why the outcome is ``n/a`` (``""`` otherwise).
    """

    memory: float | None
    time: float | None
    outcome: str
    reason: str


def _side(ratio: PairedRatio) -> int:
    # Judged as printed (0.999 reads "1.00×" and is a tie, not a win), and, over several seeds, only where
    # the interval excludes 1: a difference within the seed spread is no difference.
    shown = round(ratio.interval.mean, 2)
    if ratio.interval.n > 1 and not ratio.significant:
        return 0
    return (shown > 1) - (shown < 1)


def _per_seed(runs: CellRuns, reference: CellRuns, metric: str) -> dict[int, float]:
    mine, theirs = runs.values(metric), reference.values(metric)
    return {seed: mine[seed] / theirs[seed] for seed in mine if theirs.get(seed)}


def recomputation_time(adaptive: CellRuns, standard: CellRuns, compiler: CellRuns,
                       anchor: CellRuns) -> PairedRatio | None:
    """(adaptive / standard) / (compiler / anchor) time per epoch, seed by seed: how much more (or less) the
    adaptive plan's recomputation slows its step than the compiler's slows its own; ``None`` without a common seed."""
    return paired_ratio(_per_seed(adaptive, standard, "epoch_seconds"), _per_seed(compiler, anchor, "epoch_seconds"))


def _why_no_time(standard: CellRuns | None, anchor: CellRuns | None) -> str:
    if standard is None:
        return "no standard cell to read the adaptive cell's time against"
    if anchor is None:
        return ("no compiled anchor (torch.compile at the full activation budget): the compiler's time would carry its "
                "backend's speed, not only its recomputation")
    failed = next((runs for runs in (standard, anchor) if not runs.ok), None)
    return "" if failed is None else f"{failed.first.strategy} ended {failed.status}"


def verdict(adaptive: CellRuns | None, compiler: CellRuns | None, *, standard: CellRuns | None = None,
            anchor: CellRuns | None = None) -> Verdict:
    """Whether the adaptive budget beats the compiler's knapsack at the same target.

    Memory is read on :data:`DEVICE_MEMORY` (the compiled cell has no live peak). Time is each side's
    slowdown against its own cell at the full budget (:func:`recomputation_time`): a compiled cell's
    time against an eager one would carry the compile backend's speed (on a CPU the memory grid's anchor ran
    the tiny ViT-S 1.66x slower than eager) into a verdict about recomputation. Without ``standard`` or ``anchor`` the
    outcome is ``n/a``. Compile time is not part of either time.
    """
    if adaptive is None or compiler is None:
        missing = "adaptive" if adaptive is None else "compiler"
        return Verdict(memory=None, time=None, outcome="n/a", reason=f"no {missing} cell at this level")
    change = compared(adaptive, compiler, DEVICE_MEMORY, reference_name="compiler")
    memory_ratio = change.memory
    reason = change.reason or _why_no_time(standard, anchor)
    time_ratio = None if reason else recomputation_time(adaptive, standard, compiler, anchor)
    if not reason and (memory_ratio is None or time_ratio is None):
        reason = "memory or time not measured on one side"
    means = [None if r is None else r.interval.mean for r in (memory_ratio, time_ratio)]
    if reason:
        return Verdict(memory=means[0], time=means[1], outcome="n/a", reason=reason)
    memory, time = _side(memory_ratio), _side(time_ratio)
    if memory == time == 0:
        outcome = "ties"
    elif memory <= 0 and time <= 0:
        outcome = "beats"
    elif memory >= 0 and time >= 0:
        outcome = "loses"
    else:
        outcome = "less memory, more time" if memory < 0 else "more memory, less time"
    return Verdict(memory=means[0], time=means[1], outcome=outcome, reason="")


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
    adaptive: CellRuns | None
    compiler: CellRuns | None
    change: Change | None
    verdict: Verdict


def level_claims(runs: Mapping[str, CellRuns]) -> list[LevelClaim]:
    """The paper's claim per budget level for one group's cells, levels from the most memory to the least.

    Args:
        runs: one group's cells over their seeds (see :func:`group_cells`), strategy → cell.

    Returns:
        One :class:`LevelClaim` per level some budget cell has.
    """
    reference = runs.get(STANDARD)
    anchor = next((r for r in runs.values() if is_compiled_anchor(r.first)), None)
    cells: dict[float, dict[str, CellRuns]] = {}
    for cell_runs in runs.values():
        kind, level = budget_kind(cell_runs.first), budget_level(cell_runs.first)
        if kind is not None and level is not None and cell_runs is not anchor:
            cells.setdefault(level, {}).setdefault(kind, cell_runs)
    claims = []
    for level in sorted(cells, reverse=True):
        adaptive, compiler = cells[level].get(ADAPTIVE), cells[level].get(COMPILER)
        claims.append(LevelClaim(
            level=level, adaptive=adaptive, compiler=compiler,
            change=compared(adaptive, reference, PEAK) if adaptive is not None else None,
            verdict=verdict(adaptive, compiler, standard=reference, anchor=anchor)))
    return claims


def plan_key(runs: CellRuns) -> tuple | None:
    """What an adaptive plan decided, the same on every seed: the blocks it checkpointed and whether it fit
    (``None`` for a cell without a plan, or seeds whose plans differ)."""
    plans = {(checkpointed_blocks(r), record_field(r, "plan", "fits")) for r in runs.runs if plan_of(r)}
    return plans.pop() if len(plans) == 1 else None


def merge_levels(claims: Sequence[LevelClaim]) -> list[tuple[tuple[float, ...], LevelClaim]]:
    """Level claims whose adaptive cells made the same plan, merged: ``(levels, the highest level's claim)``.

    Levels whose adaptive plans checkpoint the same blocks train the same model the same way; their
    differences are noise, so they are one entry. Levels without an adaptive cell or plan stay alone.
    """
    merged: list[tuple[list[float], LevelClaim, tuple | None]] = []
    for claim in claims:
        key = plan_key(claim.adaptive) if claim.adaptive is not None else None
        if key is not None and merged and merged[-1][2] == key:
            merged[-1][0].append(claim.level)
            continue
        merged.append(([claim.level], claim, key))
    return [(tuple(levels), claim) for levels, claim, _ in merged]


def peft_budget_changes(records: Iterable[CellRecord]) -> dict[str, list[Change]]:
    """The PEFT study's adaptive budget cells against ``standard``, per backbone, on the live-tensor peak.

    Each budget cell is divided, seed by seed, by the standard cell of the same backbone, dataset and method.

    Args:
        records: the PEFT study's records (no other study's), any number of seeds.

    Returns:
        backbone → one :class:`Change` per adaptive budget cell, in canonical order; backbones without
        a budget cell are left out.
    """
    runs = by_cell(records)
    standard = {(r.first.model, r.first.dataset, r.first.method): r for r in runs.values()
                if r.first.strategy == STANDARD}
    result: dict[str, list[Change]] = {}
    for cell_runs in runs.values():
        record = cell_runs.first
        if budget_kind(record) == ADAPTIVE:
            reference = standard.get((record.model, record.dataset, record.method))
            result.setdefault(record.model, []).append(compared(cell_runs, reference, PEAK))
    return result
