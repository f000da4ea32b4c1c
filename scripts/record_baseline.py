"""Record the CI gate's baseline and its perturbation runs: one command, a few minutes on 2 cores.

    .venv/bin/python scripts/record_baseline.py                      # baselines/tiny-cpu.jsonl + .perturbed.jsonl
    .venv/bin/python scripts/record_baseline.py --out B.jsonl -- benchmarks/test_grid.py -m "cell(model='llm')"

1. The slice (by default what ``.ci/run`` gates: ``benchmarks/test_grid.py --gradeff-optimizers adam,cgd``) is run
   serially with one torch thread, as CI runs it, so its epoch times are comparable with CI's.
2. The same slice again once per perturbation (``gradeff.gate.portability.PERTURBATIONS``: two threads, AVX2 kernels,
   scalar kernels), under ``pytest -n 2``: only the summation order changes, which is what another CPU changes.
   ``OMP_WAIT_POLICY=PASSIVE``, so the extra OpenMP threads wait without spinning (on a shared machine a spinning
   pair made a run ten times slower; it changes no number).
3. Every cell of every run must have ended ok, and the runs must hold the same cells; every record of the slice
   must carry the same numerics probe (``gradeff.cell.probe``: the gate judges exactly wherever a run's probe equals
   the baseline's, whatever its CPU is called); then both files replace the old ones at once (written whole, then
   renamed). A failed run leaves the old baseline untouched.

The gate reads the perturbation runs beside the baseline (``<stem>.perturbed.jsonl``) and judges a cell run on
another numerics environment within the band they measure (``gradeff.gate.portability``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SLICE = ("benchmarks/test_grid.py", "--gradeff-optimizers", "adam,cgd")


def _pytest(selection: list[str], results: Path, *, threads: int, env: dict[str, str], workers: int) -> None:
    command = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider", "--benchmark-disable",
               f"--gradeff-threads={threads}", f"--gradeff-results={results}"]
    if workers > 1:
        command += ["-n", str(workers)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=os.environ | {"OMP_WAIT_POLICY": "PASSIVE"} | env)
    if done.returncode != 0:
        raise SystemExit(f"record_baseline: pytest exited {done.returncode} ({' '.join(command)}); the baseline is "
                         "left as it was")
    print(f"record_baseline: {results.name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)


def _check(primary: list, perturbed: list) -> str:
    """Every run ended ok, every perturbation holds the primary's cells, recorded by the same code, and the slice
    carries one numerics probe; returns it."""
    failed = [f"{r.cell} ({r.status})" for r in (*primary, *perturbed) if r.status != "ok"]
    if failed:
        raise SystemExit(f"record_baseline: cells that did not end ok: {', '.join(failed)}; not recorded")
    cells = sorted(r.cell for r in primary)
    versions = {r.code_version for r in (*primary, *perturbed)}
    if len(versions) != 1:
        raise SystemExit(f"record_baseline: the code changed while recording ({', '.join(sorted(versions))})")
    from gradeff.gate.portability import PERTURBATIONS, perturbations
    from gradeff.records.results import record_field

    runs = perturbations(perturbed)
    short = [cell for cell in cells if len(runs.get((cell, primary[0].seed), [])) != len(PERTURBATIONS)]
    if short:
        raise SystemExit(f"record_baseline: cells without a run of every perturbation: {', '.join(short)}")
    probes = {record_field(r, "environment", "numerics_probe") for r in primary}
    if len(probes) != 1 or None in probes:
        raise SystemExit(f"record_baseline: the slice's records carry {len(probes)} numerics probes "
                         f"({', '.join(sorted(map(str, probes)))}); one machine and thread count give one")
    return probes.pop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "baselines" / "tiny-cpu.jsonl",
                        help="the baseline to write (its perturbation runs go beside it, <stem>.perturbed.jsonl)")
    parser.add_argument("selection", nargs="*", help="pytest arguments selecting the slice (after --)")
    args = parser.parse_args(argv)
    selection = args.selection or list(DEFAULT_SLICE)
    from gradeff.gate.portability import PERTURBATIONS, perturbed_path
    from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, write_text
    from gradeff.records.results import read_records

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gradeff-baseline-") as folder:
        primary_file, perturbed_file = Path(folder) / "primary.jsonl", Path(folder) / "perturbed.jsonl"
        _pytest(selection, primary_file, threads=1, env={}, workers=1)
        for perturbation in PERTURBATIONS:
            _pytest(selection, perturbed_file, threads=perturbation.threads, env=dict(perturbation.env), workers=2)
        primary, perturbed = list(read_records(primary_file)), list(read_records(perturbed_file))
        probe = _check(primary, perturbed)
        try:
            write_text(perturbed_path(args.out), perturbed_file.read_text(encoding="utf-8"))
            write_text(args.out, primary_file.read_text(encoding="utf-8"))
        except OutputError as exc:  # the old files stay as they were (each is replaced whole or not at all)
            print(f"record_baseline: error: {exc}", file=sys.stderr)
            return EXIT_INCOMPLETE_OUTPUT
    print(f"record_baseline: {len(primary)} cells (numerics probe {probe}) and {len(perturbed)} perturbation runs in "
          f"{time.perf_counter() - started:.0f} s: {args.out}, {perturbed_path(args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
