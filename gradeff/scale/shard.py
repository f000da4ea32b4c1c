"""Shards of a selection: which cells shard ``I`` of ``N`` runs, the same answer on every machine.

Any scheduler can spread a grid (a Slurm job array, a CI matrix, ``gradeff launch``): each job runs the
same pytest command with ``--gradeff-shard I/N`` and computes the whole assignment itself, so the
jobs need not talk to each other. The assignment depends only on the selected test ids, ``N`` and the
costs, never on collection order or on the machine.

Balance: with earlier records (``--gradeff-shard-costs PATH``) each cell weighs its recorded wall time
and the cells are placed greedily, longest first, on the least loaded shard (longest processing time
first, within 4/3 of the best possible makespan); ties are broken by test id. Without records every
cell weighs the same, which balances the cell count. The costs file is named explicitly rather than
read from the results file: shards that start at different times would otherwise read different
costs from a file the earlier shards are appending to, and compute different assignments.
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gradeff.records.loading import ResultsFileError, load_results
from gradeff.studies.grid import Cell

__all__ = ["Shard", "ShardPlan", "add_options", "assign", "assign_nodes", "cell_costs", "parse_shard", "read_shard",
           "shard_items"]


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` → :class:`Shard`, with ``1 <= I <= N``.

    Raises:
        ValueError: not of the form ``I/N``, or ``I`` out of range.
    """
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"expected I/N (shard I of N, e.g. 1/4), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise ValueError(f"the number of shards must be >= 1, got {text!r}")
    if not 1 <= index <= count:
        raise ValueError(f"shard index must be in 1..{count}, got {text!r}")
    return Shard(index, count)


def assign(keys: Iterable[str], count: int, costs: Mapping[str, float] | None = None) -> list[list[str]]:
    """Split ``keys`` into ``count`` shards, balancing the sum of ``costs`` (longest first, least loaded shard).

    Args:
        keys: unique ids of the selected tests (their order does not matter).
        count: number of shards, >= 1.
        costs: expected cost per key; keys without one weigh the median of the known costs, and
            without any cost every key weighs 1 (equal shard sizes, within one).

    Returns:
        ``count`` lists of keys, sorted; shard ``i`` (1-based) is element ``i - 1``.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    ordered = sorted(set(keys))
    known = [float(costs[key]) for key in ordered if costs and key in costs]
    default = statistics.median(known) if known else 1.0
    weight = {key: float(costs[key]) if costs and key in costs else default for key in ordered}
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    # Largest first; a tie in cost goes by key, a tie in load to the lower shard: every job agrees.
    for key in sorted(ordered, key=lambda k: (-weight[k], k)):
        target = min(range(count), key=lambda i: (loads[i], i))
        shards[target].append(key)
        loads[target] += weight[key]
    return [sorted(shard) for shard in shards]


def cell_costs(paths: Sequence[str | Path], *, profile: str | None = None) -> dict[str, float]:
    """Each cell's expected wall time: the mean ``total_seconds`` (building and warm-up included) of its records.

    Records of ``profile`` are used when the files hold any (a tiny run's times say little about a paper
    run's); otherwise every record. Interrupted cells did not run to their end and are left out.

    Raises:
        gradeff.records.loading.ResultsFileError: a file is missing or holds no record.
    """
    records = [r for r in load_results(paths).records if r.status != "interrupted"]
    if profile is not None and any(r.profile == profile for r in records):
        records = [r for r in records if r.profile == profile]
    seconds: dict[str, list[float]] = {}
    for record in records:
        seconds.setdefault(record.cell, []).append(record.summary.total_seconds)
    return {cell: statistics.fmean(values) for cell, values in seconds.items()}


def _cell_id(item) -> str:
    """The cell id a test runs (its costs are recorded under it), else its node id."""
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get("cell") if callspec is not None else None
    return cell.id if isinstance(cell, Cell) else item.nodeid


def assign_nodes(cells_by_node: Mapping[str, str], count: int,
                 costs: Mapping[str, float] | None = None) -> list[list[str]]:
    """Split pytest node ids into ``count`` shards, each node costed by its cell's cost.

    What every shard computes for itself (:func:`shard_items`) and what ``gradeff launch`` computes before it
    submits them (to size each shard's job): one function, so the two cannot disagree.

    Args:
        cells_by_node: node id → the cell id it runs (its costs are recorded under it), or the node id itself.
        count: number of shards.
        costs: cell id → expected cost (see :func:`assign`).

    Returns:
        ``count`` sorted lists of node ids; shard ``i`` (1-based) is element ``i - 1``.
    """
    node_costs = {node: costs[cell] for node, cell in cells_by_node.items() if costs and cell in costs}
    return assign(cells_by_node, count, node_costs)


def shard_items(items: Sequence, shard: Shard, costs: Mapping[str, float] | None = None) -> tuple[list, list]:
    """``(kept, deselected)`` pytest items of ``shard``; items are told apart by node id, costed by cell id."""
    by_node = {item.nodeid: _cell_id(item) for item in items}
    mine = set(assign_nodes(by_node, shard.count, costs)[shard.index - 1])
    kept = [item for item in items if item.nodeid in mine]
    return kept, [item for item in items if item.nodeid not in mine]


def _shard_option(text: str) -> Shard:
    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_options(parser) -> None:
    """``--gradeff-shard I/N`` and ``--gradeff-shard-costs PATH``."""
    group = parser.getgroup("gradeff")
    group.addoption("--gradeff-shard", type=_shard_option, default=None, metavar="I/N",
                    help="run only shard I of N of the selected cells (1 <= I <= N), the same split on every "
                         "machine: for Slurm job arrays, CI matrices and `gradeff launch`")
    group.addoption("--gradeff-shard-costs", default=None, metavar="PATH",
                    help="results file of an earlier run: --gradeff-shard balances the cells' recorded wall times "
                         "instead of their count")


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """A session's shard and the costs it balances (empty: by cell count)."""

    shard: Shard
    costs: dict[str, float]
    costs_path: str | None


def read_shard(config, profile: str) -> ShardPlan | None:
    """The validated shard options (``pytest.UsageError`` before any cell when they are unusable)."""
    import pytest  # noqa: PLC0415 - pytest, 0.4 s: `gradeff launch` imports this module

    shard = config.getoption("gradeff_shard")
    costs_path = config.getoption("gradeff_shard_costs")
    if shard is None:
        if costs_path is not None:
            raise pytest.UsageError("--gradeff-shard-costs: given without --gradeff-shard, which it balances")
        return None
    costs: dict[str, float] = {}
    if costs_path is not None:
        try:
            costs = cell_costs([costs_path], profile=profile)
        except ResultsFileError as exc:
            raise pytest.UsageError(f"--gradeff-shard-costs: {exc}") from None
        if not costs:
            raise pytest.UsageError(f"--gradeff-shard-costs {costs_path}: no record with a wall time")
    return ShardPlan(shard=shard, costs=costs, costs_path=costs_path)
