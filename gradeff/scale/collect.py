"""A launch's shards merged into one results file, with nothing silently missing.

Each shard's results file may hold a cell twice: a shard stopped mid-cell (preempted, requeued, at its time limit)
recorded that cell ``interrupted`` and, started again with ``--gradeff-resume``, recorded it anew; the later record
is the cell's. A cell recorded by two shards means the shards disagreed on the split: refused. Every selected grid
cell that no shard recorded gets an ``error`` record naming its shard, the job's end and its log, so a dead shard
shows in the report and fails the gate like any failed cell, and ``--gradeff-resume`` runs it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gradeff.records.loading import ResultsFileError, load_results
from gradeff.records.outputs import write_text
from gradeff.records.results import CellRecord, Summary
from gradeff.records.store import latest_by_run
from gradeff.scale.manifest import LaunchManifest
from gradeff.scale.status import ShardStatus

__all__ = ["Collected", "CollectError", "collect", "failure_record", "merge_results"]


class CollectError(Exception):
    """Shards whose records cannot be merged; the message says why."""


def merge_results(paths: Sequence[Path]) -> list[CellRecord]:
    """The records of the shards' results files, the last of each (cell, seed) within a file.

    Raises:
        CollectError: a cell and seed recorded by two files (their shards disagreed on the split), or a file that
            cannot be read.
    """
    seen: dict[tuple[str, int], Path] = {}
    merged: list[CellRecord] = []
    for path in paths:
        if not path.exists() or path.stat().st_size == 0:
            continue
        try:
            loaded = load_results([path])
        except ResultsFileError as exc:
            raise CollectError(str(exc)) from None
        for key, record in latest_by_run(loaded.records).items():
            if key in seen:
                raise CollectError(f"{key[0]} (seed {key[1]}) is in {seen[key]} and in {path}: the shards did not "
                                   "agree on the split (different selections or costs files?)")
            seen[key] = path
            merged.append(record)
    return merged


def _end_text(manifest: LaunchManifest, status: ShardStatus) -> str:
    job = f"Slurm job {status.job}" if manifest.engine == "slurm" else f"process {status.job}"
    if not status.job:
        return "was never submitted"
    if status.exit_code is not None:
        return f"({job}) ended with pytest exit code {status.exit_code}"
    return f"({job}) ended {status.state}" + (f" ({status.error})" if status.error else "")


def failure_record(manifest: LaunchManifest, test: dict, status: ShardStatus) -> CellRecord:
    """The ``error`` record of a selected cell that its shard never recorded."""
    axes = manifest.cells[test["cell"]]
    detail = (f"shard {status.index}/{manifest.shards} {_end_text(manifest, status)} before recording this cell; "
              f"its log: {manifest.shard_log(status.index)}")
    return CellRecord(cell=test["cell"], grid=axes["grid"], model=axes["model"], optimizer=axes["optimizer"],
                      strategy=axes["strategy"], method=axes["method"], dataset=axes["dataset"],
                      profile=manifest.profile, seed=test["seed"], device="unknown", status="error", detail=detail,
                      summary=Summary.of([], 0.0), session=f"launch:{Path(manifest.folder).name}",
                      code_version=manifest.code_version)


@dataclass(frozen=True, slots=True, kw_only=True)
class Collected:
    """What collecting gave.

    Attributes:
        output: the merged results file.
        records: how many records it holds (those recorded as failed included).
        unrecorded: ``(shard, cell or node id, seed)`` of every selected test no shard recorded; the grid cells
            among them are in ``output`` as ``error`` records.
    """

    output: Path
    records: int
    unrecorded: tuple[tuple[int, str, int], ...]


def collect(manifest: LaunchManifest, statuses: Sequence[ShardStatus], output: Path | None = None) -> Collected:
    """Merge the shards' results files into ``output`` (default: the manifest's), each selected cell once.

    Args:
        manifest: the launch.
        statuses: every shard's status (how a shard that left cells unrecorded ended).
        output: where to write the merged records.

    Raises:
        CollectError: see :func:`merge_results`.
        gradeff.records.outputs.OutputError: the merged file could not be written.
    """
    records = merge_results([manifest.shard_results(index) for index in range(1, manifest.shards + 1)])
    present = {(record.cell, record.seed) for record in records}
    by_index = {status.index: status for status in statuses}
    unrecorded = []
    for test in manifest.tests:
        if test["cell"] is not None and (test["cell"], test["seed"]) in present:
            continue
        if test["cell"] is None and by_index[test["shard"]].succeeded:
            continue  # a test of one's own that is no grid cell: its shard ran it (its records name cells of its own)
        unrecorded.append((test["shard"], test["cell"] or test["nodeid"], test["seed"]))
        if test["cell"] is not None:
            records.append(failure_record(manifest, test, by_index[test["shard"]]))
    path = Path(output) if output is not None else Path(manifest.output)
    write_text(path, "".join(record.to_json() + "\n" for record in records))
    return Collected(output=path, records=len(records), unrecorded=tuple(unrecorded))
