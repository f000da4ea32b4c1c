"""``gradeff launch N``, ``gradeff launch status DIR`` and ``gradeff launch collect DIR``: a launch started, waited
for and merged (:mod:`gradeff.scale.launch`), what its shards gave said on stderr, then the report and the gate run on
the merged records.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from gradeff.gate.compare import main as compare_main
from gradeff.records.exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_OUTPUT, error
from gradeff.records.outputs import OutputError
from gradeff.report.command import run_report
from gradeff.scale.collect import CollectError, collect
from gradeff.scale.launch import LaunchError, LaunchOptions, launch
from gradeff.scale.manifest import ManifestError, load_manifest
from gradeff.scale.status import shard_statuses, status_lines

__all__ = ["run_launch", "run_launch_collect", "run_launch_status"]


def run_launch(args: argparse.Namespace) -> int:
    # Without arguments pytest would run its testpaths (the unit tests); launch is for the grids.
    pytest_args = args.pytest_args or ["benchmarks"]
    if args.compare_args and not args.baseline:
        error("--compare-args: given without --baseline, which it configures")
        return EXIT_BAD_INPUT
    options = LaunchOptions(
        shards=args.shards, pytest_args=tuple(pytest_args),
        folder=Path(args.folder or f"results/launch-{time.strftime('%Y%m%d-%H%M%S')}"),
        output=Path(args.output) if args.output else None, costs=Path(args.costs) if args.costs else None,
        engine=args.engine, wait=args.wait, timeout_min=args.timeout_min, mem_gb=args.mem_gb,
        time_margin=args.time_margin, cpus=args.cpus_per_task, gpus=args.gpus, gpu=args.gpu,
        partition=args.partition, account=args.account, qos=args.qos, throttle=args.throttle,
        sbatch=tuple(args.sbatch), report=Path(args.report) if args.report else None,
        baseline=Path(args.baseline) if args.baseline else None, compare_args=args.compare_args,
        poll_s=args.poll_s)
    started = time.perf_counter()
    try:
        result = launch(options, echo=lambda line: print(line, file=sys.stderr))
    except LaunchError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    except OutputError as exc:  # the merged results file: the shards' own files are still there
        error(str(exc))
        return EXIT_OUTPUT
    if result.collected is None:
        return EXIT_OK
    return _finish_launch(result.manifest, result.statuses, result.collected, started=started,
                          report=options.report, baseline=options.baseline, compare_args=options.compare_args)


def _finish_launch(manifest, statuses, collected, *, started: float, report, baseline, compare_args: str) -> int:
    """Say what the shards gave, then the report and the gate on the merged records; the exit code."""
    failed = [status for status in statuses if not status.succeeded]
    print(f"gradeff launch: {collected.records} records from {len(statuses)} shards merged into {collected.output} "
          f"in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    for status in failed:
        why = f"pytest exit code {status.exit_code}" if status.exit_code is not None else status.error
        error(f"shard {status.index} failed ({status.state}{': ' + why if why else ''}); "
               f"see {manifest.shard_log(status.index)}")
    if collected.unrecorded:
        shown = ", ".join(f"{name} (shard {shard})" for shard, name, _ in collected.unrecorded[:5])
        more = f" and {len(collected.unrecorded) - 5} more" if len(collected.unrecorded) > 5 else ""
        error(f"{len(collected.unrecorded)} selected tests no shard recorded, recorded as error: {shown}{more}")
    code = EXIT_FAILED if failed or collected.unrecorded else EXIT_OK
    if not collected.records:
        error("no shard recorded a cell: does the selection select any?")
        return EXIT_BAD_INPUT
    if report is not None:
        code = max(code, run_report(argparse.Namespace(results=[str(collected.output)], output=str(report),
                                                        format=None, title="gradeff report", templates=None,
                                                        margin=[], prefer=None)))
    if baseline is not None:
        gate = compare_main([str(baseline), str(collected.output), *shlex.split(compare_args)])
        code = max(code, gate)
    return code


def _launch_state(folder: str):
    """A launch folder's manifest and its shards' statuses, or ``None`` once the reason it cannot be read is said."""
    try:
        manifest = load_manifest(folder)
        return manifest, shard_statuses(manifest)
    except (ManifestError, RuntimeError) as exc:
        error(str(exc))
        return None


def run_launch_status(args: argparse.Namespace) -> int:
    state = _launch_state(args.folder)
    if state is None:
        return EXIT_BAD_INPUT
    print("\n".join(status_lines(*state)))
    return EXIT_OK


def run_launch_collect(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    state = _launch_state(args.folder)
    if state is None:
        return EXIT_BAD_INPUT
    manifest, statuses = state
    running = [str(status.index) for status in statuses if not status.ended]
    if running:
        error(f"shard{'s' if len(running) > 1 else ''} {', '.join(running)} of {args.folder} still "
               f"run{'' if len(running) > 1 else 's'} (gradeff launch status {args.folder}); collect once every "
               "shard has ended")
        return EXIT_BAD_INPUT
    output = Path(args.output) if args.output else Path(manifest.output)
    if output.exists() and output.stat().st_size > 0:
        error(f"{output} exists; give -o a new file")
        return EXIT_BAD_INPUT
    try:
        collected = collect(manifest, statuses, output)
    except CollectError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    except OutputError as exc:
        error(str(exc))
        return EXIT_OUTPUT
    report = args.report or manifest.report
    baseline = args.baseline or manifest.baseline
    compare_args = args.compare_args if args.compare_args is not None else manifest.compare_args
    return _finish_launch(manifest, statuses, collected, started=started, report=Path(report) if report else None,
                          baseline=Path(baseline) if baseline else None, compare_args=compare_args)
