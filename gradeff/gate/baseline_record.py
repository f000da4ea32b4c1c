"""Recording a gate baseline and checking a checkout against it: ``gradeff baseline record`` and ``check``.

Recording runs a slice of cells (by default what ``.ci/run`` gates: the main grid's adam and cgd cells) three ways:

1. serially with one torch thread, as CI runs it, so its numbers are CI's: the baseline;
2. once per perturbation (:data:`gradeff.gate.portability.PERTURBATIONS`: two threads, AVX2 kernels, scalar
   kernels) under ``pytest -n 2``: only the summation order changes, which is what another CPU changes.
   ``OMP_WAIT_POLICY=PASSIVE``, so the extra OpenMP threads wait without spinning (on a shared machine a spinning
   pair made a run ten times slower; it changes no number);
3. then checks that every cell of every run ended ok, that the runs hold the same cells recorded by the same code,
   and that the slice carries one numerics probe (:mod:`gradeff.cell.probe`: the gate judges exactly wherever a
   run's probe equals the baseline's, whatever its CPU is called), and writes both files at once (each whole, then
   renamed). A failed run leaves an earlier baseline untouched.

The gate reads the perturbation runs beside the baseline (``<stem>.perturbed.jsonl``) and judges a cell run on another
numerics environment within the band they measure (:mod:`gradeff.gate.portability`). Checking runs the same slice
as the baseline was recorded (serially, one thread) with ``--gradeff-baseline``: the session fails on a regression.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gradeff.gate.portability import PERTURBATIONS, perturbations, perturbed_path
from gradeff.records.exits import EXIT_BAD_INPUT, EXIT_OK, error
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, write_text
from gradeff.records.results import CellRecord, record_field
from gradeff.records.store import read_records

__all__ = ["DEFAULT_SLICE", "BaselineNotRecorded", "check_command", "record_baseline", "run_baseline_check",
           "run_baseline_record"]

# What .ci/run gates, from the installed grids (a checkout's benchmarks/test_grid.py is the same module).
DEFAULT_SLICE = ("--pyargs", "gradeff.benchmarks.test_grid", "--gradeff-optimizers", "adam,cgd")
# Every session of a baseline: its numbers alone (no benchmark timing, no cache of earlier sessions).
_QUIET = ("-q", "-p", "no:cacheprovider", "--benchmark-disable")


class BaselineNotRecorded(RuntimeError):
    """A baseline could not be recorded; the message says why, and an earlier baseline is left as it was."""


def _run(selection: Sequence[str], results: Path, *, threads: int, env: dict[str, str], workers: int,
         cwd: Path) -> float:
    command = [sys.executable, "-m", "pytest", *selection, *_QUIET, f"--gradeff-threads={threads}",
               f"--gradeff-results={results}"]
    if workers > 1:
        command += ["-n", str(workers)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=os.environ | {"OMP_WAIT_POLICY": "PASSIVE"} | env)
    if done.returncode != 0:
        raise BaselineNotRecorded(f"pytest exited {done.returncode} ({' '.join(command)})")
    return time.perf_counter() - started


def _check(primary: list[CellRecord], perturbed: list[CellRecord]) -> str:
    """Every run ended ok, every perturbation holds the primary's cells, recorded by the same code, and the slice
    carries one numerics probe; returns it."""
    if not primary:
        raise BaselineNotRecorded("the selection ran no cell")
    failed = [f"{r.cell} ({r.status})" for r in (*primary, *perturbed) if r.status != "ok"]
    if failed:
        raise BaselineNotRecorded(f"cells that did not end ok: {', '.join(failed)}")
    versions = {r.code_version for r in (*primary, *perturbed)}
    if len(versions) != 1:
        raise BaselineNotRecorded(f"the code changed while recording ({', '.join(sorted(versions))})")
    runs = perturbations(perturbed)
    short = [r.cell for r in primary if len(runs.get((r.cell, r.seed), [])) != len(PERTURBATIONS)]
    if short:
        raise BaselineNotRecorded(f"cells without a run of every perturbation: {', '.join(sorted(short))}")
    probes = {record_field(r, "environment", "numerics_probe") for r in primary}
    if len(probes) != 1 or None in probes:
        raise BaselineNotRecorded(f"the slice's records carry {len(probes)} numerics probes "
                                  f"({', '.join(sorted(map(str, probes)))}); one machine and thread count give one")
    return probes.pop()


def record_baseline(out: str | Path, selection: Sequence[str] = DEFAULT_SLICE, *, cwd: str | Path = ".",
                    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> str:
    """Record the baseline of ``selection`` at ``out`` and its perturbation runs beside it (see the module).

    Args:
        out: the baseline to write; its perturbation runs go to ``<stem>.perturbed.jsonl``.
        selection: pytest arguments selecting the slice.
        cwd: where pytest runs (a project's conftest and paths are read from there).
        say: where each run's time and the outcome are reported.

    Returns:
        The slice's numerics probe.

    Raises:
        BaselineNotRecorded: a run failed or the runs do not agree; nothing was written.
        gradeff.records.outputs.OutputError: the disk refused; each file is replaced whole or not at all.
    """
    out, cwd = Path(out), Path(cwd)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gradeff-baseline-") as folder:
        primary_file, perturbed_file = Path(folder) / "primary.jsonl", Path(folder) / "perturbed.jsonl"
        seconds = _run(selection, primary_file, threads=1, env={}, workers=1, cwd=cwd)
        say(f"gradeff baseline: the slice, serially on one thread: {seconds:.0f} s")
        for perturbation in PERTURBATIONS:
            seconds = _run(selection, perturbed_file, threads=perturbation.threads, env=dict(perturbation.env),
                           workers=2, cwd=cwd)
            say(f"gradeff baseline: perturbed ({perturbation.name}): {seconds:.0f} s")
        primary, perturbed = list(read_records(primary_file)), list(read_records(perturbed_file))
        probe = _check(primary, perturbed)
        write_text(perturbed_path(out), perturbed_file.read_text(encoding="utf-8"))
        write_text(out, primary_file.read_text(encoding="utf-8"))
    say(f"gradeff baseline: {len(primary)} cells (numerics probe {probe}) and {len(perturbed)} perturbation runs in "
        f"{time.perf_counter() - started:.0f} s: {out}, {perturbed_path(out)}")
    return probe


def check_command(baseline: str | Path, selection: Sequence[str] = DEFAULT_SLICE,
                  gate_args: Sequence[str] = ()) -> list[str]:
    """The pytest command that runs ``selection`` as its baseline was recorded and gates it against ``baseline``
    (``--strict``: an unreadable baseline line stops the run before the first cell)."""
    gate = " ".join(("--strict", *gate_args))
    return [sys.executable, "-m", "pytest", *selection, *_QUIET, "--gradeff-threads=1",
            f"--gradeff-baseline={baseline}", f"--gradeff-compare-args={gate}"]


def _baseline_selection(args: argparse.Namespace) -> list[str]:
    return list(getattr(args, "pytest_args", None) or DEFAULT_SLICE)


def run_baseline_record(args: argparse.Namespace) -> int:
    try:
        record_baseline(args.out, _baseline_selection(args))
    except BaselineNotRecorded as exc:
        error(f"{exc}; the baseline is left as it was")
        return EXIT_BAD_INPUT
    except OutputError as exc:
        error(str(exc))
        return EXIT_INCOMPLETE_OUTPUT
    return EXIT_OK


def run_baseline_check(args: argparse.Namespace) -> int:
    if not Path(args.baseline).is_file():
        error(f"no baseline at {args.baseline}: `gradeff baseline record --out {args.baseline}` records one")
        return EXIT_BAD_INPUT
    return subprocess.run(check_command(args.baseline, _baseline_selection(args),
                                        shlex.split(args.gate_args))).returncode
