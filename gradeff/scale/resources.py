"""What each shard's job asks the scheduler for: a time limit and memory sized from what its cells are expected to
take, and GPUs on a GPU profile.

A cell's expectation comes from its own earlier records where ``--costs`` names them (the mean wall time, building
included, and the largest peak RSS of the cell's records at the launch's profile), else from ``--gradeff-dry-run``
(its estimated time on the device it names; on the CPU, its predicted peak plus :data:`PROCESS_BYTES` for the
process around it; on a GPU the predicted peak is the device's, and the host's memory is left to records). A
shard's time is its cells' sum, plus the pretraining the suite runs first for a backbone without weights
(whichever shard gets there first pretrains, the others wait for it, so every shard needing it counts it). A job
array has one set of resources for every task: the longest shard sets the time limit, the largest cell the memory.

The time limit is ``longest shard × margin + START_SECONDS``, in whole minutes: the margin covers a loaded node
and the estimate's own error (the dry run assumes an MFU), the start covers pytest's start and submitit's USR2,
90 s before the limit. Without an estimate for every cell (the dry run builds image classifiers only; a CPU
has no peak FLOP/s in its table) the limit is :data:`FALLBACK_TIMEOUT_MIN` unless ``--timeout-min`` gives one,
and the memory is the partition's default unless ``--mem-gb`` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gradeff.records.formatting import format_seconds
from gradeff.records.loading import load_results
from gradeff.records.results import meter_field
from gradeff.scale.shard import cell_costs

__all__ = ["FALLBACK_TIMEOUT_MIN", "MEMORY_MARGIN", "PROCESS_BYTES", "START_SECONDS", "CellEstimate", "ShardEstimate",
           "Sizing", "cell_estimates", "recorded_estimates", "shard_estimates", "size_array"]

START_SECONDS = 300
# The Python process around a cell: the interpreter, torch and transformers imported, the data (~0.5-1 GiB RSS on
# the tiny profile's cells).
PROCESS_BYTES = 2 * 2**30
MEMORY_MARGIN = 1.5
FALLBACK_TIMEOUT_MIN = 24 * 60
_GIB = 2**30


@dataclass(frozen=True, slots=True)
class CellEstimate:
    """What one cell is expected to take: seconds and bytes of host memory (``None``: no estimate), and whence."""

    seconds: float | None
    memory_bytes: int | None
    source: str


def recorded_estimates(paths: Sequence[str | Path], *, profile: str) -> dict[str, CellEstimate]:
    """Each cell's estimate from earlier records: mean wall time (:func:`gradeff.scale.shard.cell_costs`, the same
    figures the shards balance by) and largest peak RSS.

    Raises:
        gradeff.records.loading.ResultsFileError: a file is missing or holds no record.
    """
    seconds = cell_costs(paths, profile=profile)
    records = [r for r in load_results(paths).records if r.status != "interrupted"]
    if any(r.profile == profile for r in records):
        records = [r for r in records if r.profile == profile]
    peaks: dict[str, int] = {}
    for record in records:
        peak = meter_field(record, "ram", "peak_rss_bytes")
        if isinstance(peak, int | float):
            peaks[record.cell] = max(peaks.get(record.cell, 0), int(peak))
    return {cell: CellEstimate(seconds=value, memory_bytes=peaks.get(cell), source="recorded")
            for cell, value in seconds.items()}


def cell_estimates(plan: Mapping, recorded: Mapping[str, CellEstimate] | None = None) -> dict[str, CellEstimate]:
    """Each planned cell's estimate: its records' where there are some, else the dry run's.

    Args:
        plan: the dry run's document (``--gradeff-dry-run-json``).
        recorded: estimates from earlier records (:func:`recorded_estimates`).
    """
    estimates = {}
    for cell, planned in plan["cells"].items():
        if recorded and cell in recorded:
            estimates[cell] = recorded[cell]
            continue
        status = planned["status"]
        if status.startswith(("skipped", "oom")):
            # A skipped cell writes its record and ends at once; one over its memory budget or the device's is
            # recorded oom before its first step, or at it.
            estimates[cell] = CellEstimate(seconds=0.0, memory_bytes=PROCESS_BYTES, source="dry run")
            continue
        peak = planned["predicted_peak_bytes"]
        # On a GPU the predicted peak is the device's memory, which says little about the host's: left to records.
        on_host = plan["target"]["name"] == "cpu" and peak is not None
        estimates[cell] = CellEstimate(seconds=planned["seconds"],
                                       memory_bytes=peak + PROCESS_BYTES if on_host else None, source="dry run")
    return estimates


@dataclass(frozen=True, slots=True)
class ShardEstimate:
    """One shard: how many tests, expected seconds and peak memory (``None`` where some test has no estimate),
    and the tests without an estimate."""

    index: int
    tests: int
    seconds: float | None
    memory_bytes: int | None
    unknown: tuple[str, ...]


def shard_estimates(assignment: Sequence[Sequence[str]], cell_of: Mapping[str, str | None],
                    estimates: Mapping[str, CellEstimate], plan: Mapping) -> list[ShardEstimate]:
    """Each shard's estimate (1-based ``index``).

    Args:
        assignment: the node ids of each shard (:func:`gradeff.scale.shard.assign_nodes`).
        cell_of: node id → its cell id (``None``: a test that is no grid cell).
        estimates: cell id → its estimate.
        plan: the dry run's document: which cells pretrain their backbone first, and what that takes.
    """
    shards = []
    for index, nodes in enumerate(assignment, start=1):
        seconds: float | None = 0.0
        memory: int | None = 0
        unknown = []
        pretrained: set[str] = set()
        for node in nodes:
            cell = cell_of.get(node)
            estimate = estimates.get(cell) if cell is not None else None
            if estimate is None or estimate.seconds is None:
                unknown.append(cell or node)
                seconds = None
            elif seconds is not None:
                seconds += estimate.seconds
            if estimate is None or estimate.memory_bytes is None:
                memory = None
            elif memory is not None:
                memory = max(memory, estimate.memory_bytes)
            planned = plan["cells"].get(cell) if cell is not None else None
            if planned and planned["pretrains"] and estimate is not None and estimate.source == "dry run":
                pretrained.add(planned["model"])
        for model in sorted(pretrained):
            extra = plan["pretraining"].get(model)
            if extra is None:
                unknown.append(f"{model} pretraining")
                seconds = None
            elif seconds is not None:
                seconds += extra
        shards.append(ShardEstimate(index=index, tests=len(nodes), seconds=seconds,
                                    memory_bytes=memory if nodes else None, unknown=tuple(unknown)))
    return shards


@dataclass(frozen=True, slots=True)
class Sizing:
    """The array's resources and, line by line, how each was decided."""

    time_min: int
    mem_gb: float | None
    gpus: int
    basis: tuple[str, ...]


def _listed(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def size_array(shards: Sequence[ShardEstimate], *, time_margin: float, gpus: int, timeout_min: int | None = None,
               mem_gb: float | None = None) -> Sizing:
    """One time limit and memory for every task of the array (see the module docstring).

    Args:
        shards: the shards' estimates.
        time_margin: the factor on the longest shard's expected time.
        gpus: GPUs per shard.
        timeout_min / mem_gb: given by the user: used as they are.
    """
    basis = []
    busy = [shard for shard in shards if shard.tests]
    unknown = [name for shard in busy for name in shard.unknown]
    if timeout_min is not None:
        time_min = timeout_min
        basis.append(f"time limit {time_min} min: --timeout-min")
    elif not unknown and busy:
        longest = max(busy, key=lambda shard: shard.seconds or 0.0)
        time_min = max(1, math.ceil(((longest.seconds or 0.0) * time_margin + START_SECONDS) / 60))
        basis.append(f"time limit {time_min} min: longest shard (shard {longest.index}, {longest.tests} tests) "
                     f"expected {format_seconds(longest.seconds)} × {time_margin:g} + {START_SECONDS} s to start")
    else:
        time_min = FALLBACK_TIMEOUT_MIN
        basis.append(f"time limit {time_min} min: no estimate for {_listed(unknown) or 'any test'} "
                     "(give --costs with earlier records, or --gpu NAME for the dry run's; or --timeout-min)")
    known = [shard.memory_bytes for shard in busy]
    if mem_gb is not None:
        basis.append(f"memory {mem_gb:g} GB: --mem-gb")
    elif known and all(value is not None for value in known):
        largest = max(value for value in known if value is not None)
        mem_gb = float(max(1, math.ceil(largest * MEMORY_MARGIN / _GIB)))
        basis.append(f"memory {mem_gb:g} GB: largest cell expected {largest / _GIB:.2f} GiB × {MEMORY_MARGIN:g}")
    else:
        basis.append("memory: the partition's default (not every cell has an estimate; or --mem-gb)")
    if gpus:
        basis.append(f"GPUs: --gres=gpu:{gpus} per shard")
    return Sizing(time_min=time_min, mem_gb=mem_gb, gpus=gpus, basis=tuple(basis))
