"""A launch's folder remembers what was launched: ``launch.json``, written before the first job starts and again
once the jobs have their ids, so that ``gradeff launch status`` and ``gradeff launch collect`` can follow and
finish a launch from another process, later, or after the launching one was stopped.

It holds the shard of every selected test (with its cell's axes and seed: a cell a failed shard never recorded
is recorded as failed from them), what each job asked for and why, and the jobs' ids.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from gradeff.records.outputs import write_text

__all__ = ["MANIFEST_FORMAT", "MANIFEST_NAME", "LaunchManifest", "ManifestError", "load_manifest", "save_manifest"]

MANIFEST_NAME = "launch.json"
MANIFEST_FORMAT = "gradeff-launch/1"


class ManifestError(Exception):
    """A folder without a readable ``launch.json``; the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class LaunchManifest:
    """What was launched (see the module docstring).

    Attributes:
        engine: ``slurm`` or ``local``.
        shards: number of shards.
        pytest_args: the selection and options every shard runs.
        folder: the launch's folder (jobs, logs, the shards' results files).
        cwd: where the shards' pytest runs.
        output: the merged results file.
        report / baseline / compare_args: what ``collect`` renders and gates by default.
        profile: the selection's profile.
        code_version: the code that launched (recorded with a failed shard's cells).
        tests: every selected test: ``nodeid``, ``cell`` (``None``: not a grid cell), ``seed``, ``shard`` (1-based).
        cells: cell id → its axes (``grid``, ``model``, ``optimizer``, ``strategy``, ``method``, ``dataset``).
        sbatch: what each Slurm task asks for (``SbatchRequest`` fields; empty on the local engine).
        basis: how the resources were decided, line by line.
        array_id: the Slurm job array's id (``None`` on the local engine, or before submission).
        jobs: each shard's job id (``<array>_<task>`` on Slurm, a process id locally).
        created_at: when the launch started (seconds since the epoch).
    """

    format: str = MANIFEST_FORMAT
    engine: str
    shards: int
    pytest_args: tuple[str, ...]
    folder: str
    cwd: str
    output: str
    report: str | None = None
    baseline: str | None = None
    compare_args: str = ""
    profile: str
    code_version: str
    tests: tuple[dict, ...]
    cells: dict = field(default_factory=dict)
    sbatch: dict = field(default_factory=dict)
    basis: tuple[str, ...] = ()
    array_id: str | None = None
    jobs: tuple[str, ...] = ()
    created_at: float

    @property
    def jobs_folder(self) -> Path:
        """submitit's folder of the jobs (pickles, its logs, the sbatch script)."""
        return Path(self.folder) / "jobs"

    def shard_results(self, index: int) -> Path:
        """Shard ``index``'s (1-based) own results file."""
        return Path(self.folder) / f"shard-{index}.jsonl"

    def shard_log(self, index: int) -> Path:
        """Shard ``index``'s pytest output, every start of it appended."""
        return Path(self.folder) / f"shard-{index}.log"

    def shard_tests(self, index: int) -> list[dict]:
        return [test for test in self.tests if test["shard"] == index]


def save_manifest(manifest: LaunchManifest) -> Path:
    """Write ``<folder>/launch.json`` (atomically: a reader never sees half of it)."""
    return write_text(Path(manifest.folder) / MANIFEST_NAME, json.dumps(asdict(manifest), indent=1) + "\n")


def load_manifest(folder: str | Path) -> LaunchManifest:
    """The manifest of the launch in ``folder``.

    Raises:
        ManifestError: no ``launch.json`` there, or one this gradeff cannot read.
    """
    path = Path(folder) / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{folder}: no {MANIFEST_NAME}: not the folder of a gradeff launch") from None
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ManifestError(f"{path}: format {found!r}; this gradeff reads {MANIFEST_FORMAT}")
    known = {f.name for f in fields(LaunchManifest)}
    if missing := {f.name for f in fields(LaunchManifest) if f.name not in data} - {
            "report", "baseline", "compare_args", "cells", "sbatch", "basis", "array_id", "jobs", "format"}:
        raise ManifestError(f"{path}: missing {', '.join(sorted(missing))}")
    values = {key: value for key, value in data.items() if key in known}
    for key in ("pytest_args", "tests", "basis", "jobs"):
        if key in values:
            values[key] = tuple(values[key])
    return LaunchManifest(**values)
