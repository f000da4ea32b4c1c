"""What ``--gradeff-baseline`` hands the regression gate: the session's records and the cells it selected.

A session selects cells with ``-k``, ``-m``, ``--gradeff-<axis>`` options or a shard; the gate judges
exactly those (``gradeff compare --cells``), so a slice is never failed for the baseline cells it did
not select, and a selected cell that left no record (a crash, a kill, an interrupted run) is missing,
which is a regression unless ``--gradeff-compare-args=--allow-missing``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from gradeff.gate.compare import build_parser, load_results
from gradeff.gate.comparison import UnusableInput
from gradeff.gate.portability import perturbed_path
from gradeff.pytest.fixture_setup import bench_cell_id
from gradeff.records.outputs import colliding_outputs
from gradeff.records.results import CellRecord
from gradeff.records.store import read_records

__all__ = ["LAST_SESSION_CELLS", "LAST_SESSION_RECORDS", "cell_of_nodeid", "cells_of_items", "current_records",
           "path_conflicts", "session_files"]

# What a session that selected or ran cells leaves beside its results file: its own records (the gate's "current",
# what `gradeff compare BASELINE results/last-session.jsonl` reads) and the cells it selected.
LAST_SESSION_RECORDS, LAST_SESSION_CELLS = "last-session.jsonl", "last-session.cells"


def session_files(results: Path) -> tuple[Path, Path]:
    """Where a session writes its own records and its selection (beside its results file)."""
    return results.with_name(LAST_SESSION_RECORDS), results.with_name(LAST_SESSION_CELLS)


def _compare_options(compare_args: str):
    """``--gradeff-compare-args`` parsed as `gradeff compare` options (already checked to parse)."""
    return build_parser().parse_args(["baseline", "current", *shlex.split(compare_args)])


def _unreadable_baseline(baseline: Path, compare_args: str) -> list[str]:
    """The baseline and its perturbation runs read as the gate will read them (``--strict``: every line must
    be a record), before the first cell rather than after the last."""
    options = _compare_options(compare_args)
    perturbed = options.perturbed or (perturbed_path(baseline) if perturbed_path(baseline).is_file() else None)
    problems = []
    for path in (baseline, perturbed):
        try:
            if path is not None:
                load_results(path, strict=options.strict)
        except UnusableInput as exc:
            problems.append(f"--gradeff-baseline: {exc}")
    return problems


def path_conflicts(*, results: Path, report: Path | None, baseline: Path | None, compare_args: str = "",
                   others: Mapping[str, Path] | None = None) -> list[str]:
    """Why a session's files cannot be written as asked: a baseline that is its own results (the gate would
    compare the session with itself and always pass), or two of its files on one path (one would overwrite the
    other: a report written over the records, the session's records over the whole results file, pytest's JUnit
    XML or pytest-benchmark's JSON over the results).

    Args:
        others: the files other plugins will write, by the option naming each
            (:func:`gradeff.pytest.plugin_outputs.plugin_outputs`).

    Returns:
        One sentence per problem (empty when none), each naming the options.
    """
    if baseline is not None and colliding_outputs({"b": baseline, "r": results}):
        return [f"--gradeff-baseline {baseline} is this session's own --gradeff-results file: the session's records "
                "would be compared with themselves and always pass; give a baseline recorded before"]
    records, cells = session_files(results)
    paths = {"--gradeff-results": results, "--gradeff-report": report,
             f"the session's records ({LAST_SESSION_RECORDS}, beside --gradeff-results)": records,
             f"the session's selection ({LAST_SESSION_CELLS}, beside --gradeff-results)": cells, **(others or {})}
    if baseline is None:
        return colliding_outputs(paths)
    options = _compare_options(compare_args)
    paths |= {"--output of --gradeff-compare-args": options.output, "--gradeff-baseline": baseline,
              "its perturbation runs": options.perturbed or perturbed_path(baseline)}
    return colliding_outputs(paths) or _unreadable_baseline(baseline, compare_args)

# pytest appends the seed's id to the cell's when a cell is repeated over seeds (llm-adam-accum-seed1).
_SEED_SUFFIX = re.compile(r"-seed\d+$")


def cells_of_items(items: Iterable) -> list[str]:
    """Cell ids of the collected grid tests (those parametrized with a ``cell``) and benchmarks written with the
    public fixtures (:func:`gradeff.pytest.fixture_setup.bench_cell_id`), in order, once each."""
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


def current_records(session_records: list[CellRecord], results: Path, kept: Collection) -> list[CellRecord]:
    """The session's records, plus, under ``--gradeff-resume``, the file's records of the ``(cell, seed)`` runs it
    kept instead of running them: those were run, by an earlier session, as this very experiment."""
    if not kept:
        return session_records
    earlier = [r for r in read_records(results, errors=[]) if (r.cell, r.seed) in kept]
    ran = {(r.cell, r.seed) for r in session_records}
    return [r for r in earlier if (r.cell, r.seed) not in ran] + session_records
