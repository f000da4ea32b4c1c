"""What ``--gradeff-baseline`` hands the regression gate: the session's records and the cells it selected.

A session selects cells with ``-k``, ``-m``, ``--gradeff-<axis>`` options or a shard; the gate judges
exactly those (``gradeff compare --cells``), so a slice is never failed for the baseline cells it did
not select, and a selected cell that left no record (a crash, a kill, an interrupted run) is missing,
which is a regression unless ``--gradeff-compare-args=--allow-missing``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from gradeff.results import CellRecord, read_records

__all__ = ["cell_of_nodeid", "cells_of_items", "current_records"]

# pytest appends the seed's id to the cell's when a cell is repeated over seeds (llm-adam-accum-seed1).
_SEED_SUFFIX = re.compile(r"-seed\d+$")


def cells_of_items(items: Iterable) -> list[str]:
    """Cell ids of the collected grid tests (those parametrized with a ``cell``) and benchmarks written with the
    public fixtures (:func:`gradeff.fixtures.bench_cell_id`), in order, once each."""
    from gradeff.fixtures import bench_cell_id

    found = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get("cell") if callspec is not None else None
        if cell is not None and hasattr(cell, "id"):
            found.append(cell.id)
        elif (bench := bench_cell_id(item)) is not None:
            found.append(bench)
    return list(dict.fromkeys(found))


def cell_of_nodeid(nodeid: str, known: set[str]) -> str | None:
    """The cell id in a grid test's node id (``benchmarks/test_grid.py::test_cell[llm-adam-accum]``), if it is one
    of ``known``: how the pytest-xdist controller, which collects nothing itself, learns the selection."""
    match = re.search(r"\[(.*)\]$", nodeid)
    if match is None:
        return None
    param = _SEED_SUFFIX.sub("", match.group(1))
    return param if param in known else None


def current_records(session_records: list[CellRecord], results: Path, settled: dict) -> list[CellRecord]:
    """The session's records, plus, under ``--gradeff-resume``, the file's records of the cells it skipped as
    already settled: those cells were run, by an earlier session, for this very code."""
    if not settled:
        return session_records
    earlier = [r for r in read_records(results, errors=[]) if (r.cell, r.seed) in settled]
    ran = {(r.cell, r.seed) for r in session_records}
    return [r for r in earlier if (r.cell, r.seed) not in ran] + session_records
