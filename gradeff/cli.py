"""The ``gradeff`` command: ``gradeff report RESULTS… -o report.html``, ``gradeff compare``, ``gradeff list``,
``gradeff launch N [pytest args]``, ``gradeff launch status|collect DIR``, ``gradeff ab REV``,
``gradeff history run|find|report``, ``gradeff --version``.

Exit codes: 0 success; 2 a results file is missing, unreadable or has no readable record, or the
command line is wrong (argparse's convention); 74 (``EX_IOERR``) an output could not be written (disk full, I/O
error: one line names the file, which is left as it was); ``launch``: 1 a shard failed or the gate found a
regression, or a selected cell that no shard recorded; ``ab``: 1 a regression (time beyond the threshold, a
deterministic figure changed, a cell the current code could not run). Messages go to stderr and name the file (and
line) at fault.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gradeff import __version__
from gradeff.analysis.answer import AnswerOptions
from gradeff.analysis.choice import CHOICE_QUESTIONS, parse_prefer
from gradeff.analysis.margins import parse_margins
from gradeff.gate.ab import CLOCKS, CPU, DEFAULT_THRESHOLD, WALL, ab_lines
from gradeff.gate.baseline_record import DEFAULT_SLICE, BaselineNotRecorded, check_command, record_baseline
from gradeff.gate.compare import main as compare_main
from gradeff.gate.history import METRICS, HistoryStore
from gradeff.records.loading import ResultsFileError, load_results
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, colliding_outputs, write_text, write_with
from gradeff.report import build_view, render_html, write_report
from gradeff.report.csv_export import write_csv
from gradeff.report.dataframe import write_parquet
from gradeff.report.history import build_history_view, render_history
from gradeff.report.render import resolve_template_folder
from gradeff.scale.ab import ABSettings, RevisionError, WorkerError, repository_root, run_revisions, select_cells
from gradeff.scale.collect import CollectError, collect
from gradeff.scale.history import commit_of, commits_in_range, find_change, run_history
from gradeff.scale.launch import LaunchError, LaunchOptions, launch
from gradeff.scale.manifest import ManifestError, load_manifest
from gradeff.scale.status import shard_statuses, status_lines
from gradeff.studies.grid import AXES, PLURALS

if TYPE_CHECKING:
    from gradeff.records.loading import LoadedResults

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "EXIT_OUTPUT", "build_parser", "main", "parse_args"]

EXIT_OK = 0
EXIT_FAILED = 1  # launch: a shard failed
EXIT_BAD_INPUT = 2  # the same code argparse uses for a bad command line: "fix what you gave me"
EXIT_OUTPUT = EXIT_INCOMPLETE_OUTPUT  # 74 (EX_IOERR): an output could not be written

# `gradeff report` formats; a table format is also chosen by the output's suffix.
_FORMATS = ("html", "csv", "parquet")
_TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet"}
# The registries `gradeff list` prints (gradeff.pytest.listing.AXES; kept literal: --help imports nothing heavy).
_AXES = ("models", "optimizers", "strategies", "methods", "datasets")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand; each sets ``func`` to the function that runs it."""
    parser = argparse.ArgumentParser(
        prog="gradeff", description="Which optimizer and memory strategy for your model: reports on benchmark results.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    report = commands.add_parser(
        "report", help="render results files as a self-contained HTML report (or a CSV or parquet table)",
        description="Merge one or more JSON-lines results files (a later record of a cell replaces an earlier "
                    "one) and write an HTML report with inline figures, or a flat table: CSV, or parquet (the "
                    "same columns, typed; what gradeff.load returns as a pandas DataFrame).")
    report.add_argument("results", nargs="+", metavar="RESULTS", help="results file(s) written by the grid")
    report.add_argument("-o", "--output",
                        help="output file, '-' for stdout (default: report.html / report.csv / report.parquet)")
    report.add_argument("--format", choices=_FORMATS,
                        help="output format (default: by the output's suffix, .csv or .parquet, else html)")
    report.add_argument("--title", default="gradeff report", help="page title of the HTML report")
    report.add_argument("--templates", metavar="DIR",
                        help="folder of Jinja templates searched before the packaged ones: a template there "
                             "replaces the packaged one of the same name (default: $GRADEFF_TEMPLATES)")
    report.add_argument("--margin", action="append", default=[], metavar="QUESTION=VALUE",
                        help="the Answer's practical-equivalence margin of a question (quality, speed, memory, "
                             "energy), as --gradeff-margin: 1%%, 0.02, 1pt, 1MiB, 0.5s")
    report.add_argument("--prefer", metavar="Q1,Q2,...",
                        help="the order the Answer's 'use this' line weighs quality, time and memory in")
    report.set_defaults(func=_run_report)

    listing = commands.add_parser(
        "list", help="list every registry (models, optimizers, strategies, methods, datasets) and where each entry "
        "came from", description="Every registry's entries with their names and where each came from: built-in, "
        "an installed package's entry point, or the conftest or plugin whose pytest_gradeff_register hook added it. "
        "The registrations are those a pytest session in the current directory makes (its conftest files and "
        "plugins); pytest arguments after -- add to them (e.g. -- -p myplugin, -- --gradeff-model-path DIR).")
    listing.add_argument("axis", nargs="?", choices=_AXES,
                         help="print only this axis's keys, one per line (default: every axis, with names)")
    listing.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                         help="arguments for pytest's configuration")
    listing.set_defaults(func=_run_list)

    compare = commands.add_parser(
        "compare", add_help=False, help="regression gate: compare a results file with a baseline (exit 1 on a "
        "regression)", description="See `gradeff compare --help`.")
    compare.add_argument("arguments", nargs=argparse.REMAINDER, help="BASELINE CURRENT [options]")
    compare.set_defaults(func=_run_compare)

    _add_launch_parser(commands)
    _add_ab_parser(commands)
    _add_history_parser(commands)
    _add_baseline_parser(commands)
    return parser


def _add_selection(parser: argparse.ArgumentParser) -> None:
    """The cells a command runs: a grid, other keys on its axes, optionally only some cell ids."""
    parser.add_argument("--grid", default="main", help="the grid whose cells run (default main)")
    for plural in _AXES:
        parser.add_argument(f"--{plural}", metavar="KEYS",
                            help=f"comma-separated {plural} instead of the grid's own (as --gradeff-{plural})")
    parser.add_argument("--cells", metavar="IDS", help="comma-separated cell ids: only these of the selection")
    parser.add_argument("--profile", default="tiny", help="size of models, data and training (default tiny)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, data and order (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per cell (default 1)")
    parser.add_argument("--device", default="cpu", help="device the cells train on (default cpu)")


def _add_measure_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="balanced rounds per cell, four slices each (default: docs/gate.md's calibration)")
    parser.add_argument("--slice-steps", type=int, default=None, metavar="N",
                        help="batches per slice, in whole accumulation blocks (4 batches at the tiny profile), 0 for "
                             "whole epochs (default: docs/gate.md's calibration)")
    parser.add_argument("--clock", choices=CLOCKS, default=None,
                        help="cpu: the worker's CPU seconds (a competing load does not inflate them; default on a "
                             "CPU); wall: the epoch's own seconds (also sees sleeps, I/O, a GPU; default elsewhere)")


def _add_ab_parser(commands) -> None:
    ab = commands.add_parser(
        "ab", help="time and deterministic figures of the selected cells at revision REV against the working tree, "
        "side by side in one run (exit 1 on a regression)",
        description="Check REV out in a temporary git worktree and train each selected cell there and in the working "
        "tree, in two long-lived worker processes that take turns slice by slice in a balanced order (ABBA) after a "
        "warm-up slice. Per cell: the paired ratio of time per optimizer step (current / base) with its 95 %% "
        "interval, the minimum slowdown the run could detect, and every deterministic figure (status, losses, "
        "held-out figures, counted memory) compared exactly. A regression: the interval above 1 + threshold, a "
        "changed deterministic figure, or a cell the current code could not run. See docs/gate.md.")
    ab.add_argument("revision", metavar="REV", help="the base revision (a commit, branch, tag, HEAD~1, ...)")
    ab.add_argument("--current", metavar="REV",
                    help="compare this revision instead of the working tree (both checked out)")
    _add_selection(ab)
    _add_measure_options(ab)
    ab.add_argument("--threshold", type=float, default=None, metavar="FRACTION",
                    help="the slowdown that fails, as a fraction (default: docs/gate.md's calibration)")
    ab.add_argument("--json", metavar="PATH", help="also write every verdict and raw slice time as JSON")
    ab.set_defaults(func=_run_ab)


def _add_launch_parser(commands) -> None:
    launch = commands.add_parser(
        "launch", help="run a pytest selection as N shards (a Slurm job array when a cluster answers, else local "
        "processes) and merge their results", description="Plan the selection with --gradeff-dry-run, submit N "
        "shards of the same pytest command (each with --gradeff-shard I/N, its own results file and "
        "--gradeff-resume) with submitit, as one Slurm job array sized from the plan or as local processes, wait "
        "for them (a preempted or requeued shard resumes where it stopped), merge the results files into one "
        "(every cell once; a cell no shard recorded is recorded as error) and optionally render the report and run "
        "the regression gate on it. `gradeff launch status DIR` shows where a launch's shards stand, `gradeff "
        "launch collect DIR` merges them (after --no-wait). Example: gradeff launch 4 --engine local -- benchmarks "
        "-m main --gradeff-epochs 1")
    launch.add_argument("shards", type=int, metavar="N", help="number of shards (jobs)")
    launch.add_argument("--engine", "--executor", dest="engine", choices=("auto", "local", "slurm"), default="auto",
                        help="auto: Slurm when a cluster answers (sinfo), else local processes; slurm refuses to "
                             "start without one (default auto; --executor is its earlier name)")
    launch.add_argument("--folder", metavar="DIR",
                        help="plan, manifest, jobs, logs and the shards' results files (default results/launch-<time>)")
    launch.add_argument("-o", "--output", metavar="PATH", help="merged results file (default <folder>/results.jsonl)")
    launch.add_argument("--costs", metavar="PATH",
                        help="earlier results file: balance the shards by its wall times and size their jobs by them")
    launch.add_argument("--report", metavar="PATH", help="write the report of the merged records (.html or .csv)")
    launch.add_argument("--baseline", metavar="PATH", help="run the regression gate of the merged records against it")
    launch.add_argument("--compare-args", default="", metavar="ARGS",
                        help="extra gate options, e.g. \"--time-ratio 3\"")
    launch.add_argument("--no-wait", dest="wait", action="store_false",
                        help="submit, write the manifest and return (Slurm): gradeff launch status / collect DIR later")
    launch.add_argument("--poll-s", type=float, metavar="SECONDS",
                        help="how often the waiting launch asks after its shards (default 10 on Slurm, 1 locally)")
    sizing = launch.add_argument_group("each job's resources (default: from the dry run's estimates, or --costs)")
    sizing.add_argument("--timeout-min", type=int, help="time limit of each job in minutes")
    sizing.add_argument("--time-margin", type=float, default=2.0,
                        help="factor on the longest shard's expected time (default 2)")
    sizing.add_argument("--mem-gb", type=float, help="memory per Slurm job, GB")
    sizing.add_argument("--cpus-per-task", type=int, help="CPUs per Slurm job (default Slurm's: 1)")
    sizing.add_argument("--gpus", "--gpus-per-node", dest="gpus", type=int,
                        help="GPUs per shard, asked as --gres=gpu:N (default 1 on the paper profile or with --gpu)")
    sizing.add_argument("--gpu", metavar="NAME",
                        help="the GPU the shards run on (H200, H100, A100, L4): the dry run estimates for it")
    slurm = launch.add_argument_group("Slurm")
    slurm.add_argument("--partition", help="Slurm partition")
    slurm.add_argument("--account", help="Slurm account")
    slurm.add_argument("--qos", help="Slurm quality of service")
    slurm.add_argument("--throttle", type=int, metavar="K", help="at most K shards run at once (--array=...%%K)")
    slurm.add_argument("--sbatch", action="append", default=[], metavar="NAME=VALUE",
                       help="a further sbatch flag, without its dashes (repeatable): --sbatch constraint=a100 "
                            "--sbatch exclusive")
    launch.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                        help="the selection and options every shard runs, after -- (e.g. -- benchmarks -m main; "
                             "default: benchmarks, every grid)")
    launch.set_defaults(func=_run_launch)


def _launch_tool_parser(tool: str) -> argparse.ArgumentParser:
    """``gradeff launch status DIR`` and ``gradeff launch collect DIR``."""
    if tool == "status":
        parser = argparse.ArgumentParser(
            prog="gradeff launch status", description="Where each shard of a launch stands: its job's state (every "
            "run of a requeued Slurm task), the cells it has recorded of those it was given, its exit code.")
        parser.add_argument("folder", metavar="DIR", help="the launch's folder (its launch.json)")
        parser.set_defaults(func=_run_launch_status)
        return parser
    parser = argparse.ArgumentParser(
        prog="gradeff launch collect", description="Merge a launch's shards into one results file once every shard "
        "has ended (every selected cell once; a cell no shard recorded as error, naming its shard), then render the "
        "report and run the gate the launch was given, or those named here.")
    parser.add_argument("folder", metavar="DIR", help="the launch's folder (its launch.json)")
    parser.add_argument("-o", "--output", metavar="PATH", help="merged results file (default the launch's)")
    parser.add_argument("--report", metavar="PATH", help="write the report of the merged records (.html or .csv)")
    parser.add_argument("--baseline", metavar="PATH", help="run the regression gate of the merged records against it")
    parser.add_argument("--compare-args", default=None, metavar="ARGS", help="extra gate options")
    parser.set_defaults(func=_run_launch_collect)
    return parser


def _run_launch(args: argparse.Namespace) -> int:
    # Without arguments pytest would run its testpaths (the unit tests); launch is for the grids.
    pytest_args = args.pytest_args or ["benchmarks"]
    if args.compare_args and not args.baseline:
        _error("--compare-args: given without --baseline, which it configures")
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
        _error(str(exc))
        return EXIT_BAD_INPUT
    except OutputError as exc:  # the merged results file: the shards' own files are still there
        _error(str(exc))
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
        _error(f"shard {status.index} failed ({status.state}{': ' + why if why else ''}); "
               f"see {manifest.shard_log(status.index)}")
    if collected.unrecorded:
        shown = ", ".join(f"{name} (shard {shard})" for shard, name, _ in collected.unrecorded[:5])
        more = f" and {len(collected.unrecorded) - 5} more" if len(collected.unrecorded) > 5 else ""
        _error(f"{len(collected.unrecorded)} selected tests no shard recorded, recorded as error: {shown}{more}")
    code = EXIT_FAILED if failed or collected.unrecorded else EXIT_OK
    if not collected.records:
        _error("no shard recorded a cell: does the selection select any?")
        return EXIT_BAD_INPUT
    if report is not None:
        code = max(code, _run_report(argparse.Namespace(results=[str(collected.output)], output=str(report),
                                                        format=None, title="gradeff report", templates=None,
                                                        margin=[], prefer=None)))
    if baseline is not None:
        gate = _run_compare(argparse.Namespace(
            arguments=[str(baseline), str(collected.output), *shlex.split(compare_args)]))
        code = max(code, gate)
    return code


def _launch_state(folder: str):
    """A launch folder's manifest and its shards' statuses, or ``None`` once the reason it cannot be read is said."""
    try:
        manifest = load_manifest(folder)
        return manifest, shard_statuses(manifest)
    except (ManifestError, RuntimeError) as exc:
        _error(str(exc))
        return None


def _run_launch_status(args: argparse.Namespace) -> int:
    state = _launch_state(args.folder)
    if state is None:
        return EXIT_BAD_INPUT
    print("\n".join(status_lines(*state)))
    return EXIT_OK


def _run_launch_collect(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    state = _launch_state(args.folder)
    if state is None:
        return EXIT_BAD_INPUT
    manifest, statuses = state
    running = [str(status.index) for status in statuses if not status.ended]
    if running:
        _error(f"shard{'s' if len(running) > 1 else ''} {', '.join(running)} of {args.folder} still "
               f"run{'' if len(running) > 1 else 's'} (gradeff launch status {args.folder}); collect once every "
               "shard has ended")
        return EXIT_BAD_INPUT
    output = Path(args.output) if args.output else Path(manifest.output)
    if output.exists() and output.stat().st_size > 0:
        _error(f"{output} exists; give -o a new file")
        return EXIT_BAD_INPUT
    try:
        collected = collect(manifest, statuses, output)
    except CollectError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    except OutputError as exc:
        _error(str(exc))
        return EXIT_OUTPUT
    report = args.report or manifest.report
    baseline = args.baseline or manifest.baseline
    compare_args = args.compare_args if args.compare_args is not None else manifest.compare_args
    return _finish_launch(manifest, statuses, collected, started=started, report=Path(report) if report else None,
                          baseline=Path(baseline) if baseline else None, compare_args=compare_args)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line's namespace: ``launch``'s and ``list``'s pytest arguments after ``--``, ``launch status``
    and ``launch collect`` by their own parsers.

    Raises:
        SystemExit: a bad command line (argparse's exit code 2), or ``--help``.
    """
    argv = list(argv)
    if argv[:1] == ["launch"] and len(argv) > 1 and argv[1] in ("status", "collect"):
        return _launch_tool_parser(argv[1]).parse_args(argv[2:])
    if argv[:1] in (["launch"], ["list"], ["baseline"]) and "--" in argv:
        # Their own options may come first; everything after the first -- belongs to pytest.
        cut = argv.index("--")
        args = build_parser().parse_args(argv[:cut])
        args.pytest_args = argv[cut + 1:]
        return args
    return build_parser().parse_args(argv)


def _exit_cleanly_on_sigterm() -> None:
    """SIGTERM (a CI timeout, a scheduler) ends the command through its ``finally`` blocks, as Ctrl-C does: the
    workers stop and the temporary worktrees are removed instead of being left behind."""
    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _selection_args(args: argparse.Namespace) -> tuple[list, dict]:
    """The cells and RunConfig fields a selection's options name (KeyError naming the valid keys)."""
    selection = {axis: [key.strip() for key in getattr(args, PLURALS[axis]).split(",") if key.strip()]
                 for axis in AXES if getattr(args, PLURALS[axis], None)}
    ids = [i.strip() for i in args.cells.split(",") if i.strip()] if args.cells else None
    cells = select_cells(args.grid, selection, ids)
    config = {"profile": args.profile, "seed": args.seed, "threads": args.threads, "device": args.device}
    return cells, config


def _measure_settings(args: argparse.Namespace, **extra):
    defaults = ABSettings()
    slice_steps = defaults.slice_steps if args.slice_steps is None else (args.slice_steps or None)
    clock = args.clock or (CPU if args.device == "cpu" else WALL)
    return ABSettings(rounds=args.rounds or defaults.rounds, slice_steps=slice_steps, clock=clock, **extra)


def _run_ab(args: argparse.Namespace) -> int:
    try:
        cells, config = _selection_args(args)
        settings = _measure_settings(args, threshold=DEFAULT_THRESHOLD if args.threshold is None else args.threshold)
        repo = repository_root()
    except (KeyError, ValueError) as exc:
        _error(str(exc).strip('"'))
        return EXIT_BAD_INPUT
    if not cells:
        _error("the selection has no cell")
        return EXIT_BAD_INPUT
    _exit_cleanly_on_sigterm()
    print(f"gradeff ab: {len(cells)} cells, {settings.rounds} rounds of {settings.slice_steps or 'whole-epoch'}"
          f"-batch slices, {settings.clock} clock, threshold {settings.threshold:.0%}", file=sys.stderr)
    try:
        run = run_revisions(repo, args.revision, args.current, cells, config, settings,
                            echo=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    except (RevisionError, WorkerError) as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    for line in ab_lines(run.results, base=run.base, current=run.current):
        print(line)
    print(f"gradeff ab: took {run.seconds:.0f} s", file=sys.stderr)
    code = EXIT_FAILED if run.regressed else EXIT_OK
    try:
        if args.json:
            write_text(Path(args.json), json.dumps(run.as_dict(), indent=1) + "\n")
    except OutputError as exc:
        _error(str(exc))
        return max(code, EXIT_OUTPUT)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit code (the console script passes it to ``sys.exit``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:
        # The gate parses its own options, --help included; argparse's REMAINDER would not pass
        # an option-looking first argument through.
        return _run_compare(argparse.Namespace(arguments=argv[1:]))
    args = parse_args(argv)
    return args.func(args)


def _run_compare(args: argparse.Namespace) -> int:
    # The gate owns its options (gradeff.gate.compare).
    return compare_main(args.arguments)


def _error(message: str) -> None:
    print(f"gradeff: error: {message}", file=sys.stderr)


def _run_report(args: argparse.Namespace) -> int:
    by_suffix = _TABLE_SUFFIXES.get(Path(args.output).suffix.lower()) if args.output else None
    if args.format == "html" and by_suffix:
        _error(f"{args.output} ends in .{by_suffix} but --format is html; pass --format {by_suffix} or another name")
        return EXIT_BAD_INPUT
    fmt = args.format or by_suffix or "html"
    output = args.output or f"report.{fmt}"
    if fmt == "parquet" and output == "-":
        _error("parquet is a binary file: give -o FILE.parquet, or --format csv for stdout")
        return EXIT_BAD_INPUT
    try:
        margins = parse_margins(args.margin)
    except ValueError as exc:
        _error(f"--margin: {exc}")
        return EXIT_BAD_INPUT
    try:
        options = AnswerOptions(margins=margins, prefer=parse_prefer(args.prefer) if args.prefer else CHOICE_QUESTIONS)
    except ValueError as exc:
        _error(f"--prefer {args.prefer}: {exc}")
        return EXIT_BAD_INPUT
    templates = None
    if fmt == "html":
        try:
            templates = resolve_template_folder(args.templates)
        except NotADirectoryError as exc:
            _error(str(exc))
            return EXIT_BAD_INPUT
    try:
        loaded = load_results(args.results)
    except ResultsFileError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    for line in loaded.skipped_lines:
        print(f"gradeff: warning: skipped unreadable line {line}", file=sys.stderr)

    if output != "-":
        # The report written over a results file it reads would destroy the records it shows.
        clashes = colliding_outputs({"-o": output} | {f"results file {i + 1}": p for i, p in enumerate(args.results)})
        if clashes:
            _error(f"{clashes[0]}: the report would overwrite the records; give another -o")
            return EXIT_BAD_INPUT
    try:
        if output == "-":
            _write_stdout(fmt, args.title, loaded, templates, options)
        else:
            _write_file(fmt, args.title, loaded, output, templates, options)
    except OSError as exc:
        _error(str(exc) if isinstance(exc, OutputError) else f"cannot write {output}: {exc.strerror or exc}")
        return EXIT_OUTPUT
    if output != "-":
        print(f"gradeff: wrote {output} ({len(loaded.records)} records from {len(loaded.sources)} file(s))",
              file=sys.stderr)
    return EXIT_OK


def _write_file(fmt: str, title: str, loaded: LoadedResults, output: str, templates: Path | None,
                options: AnswerOptions) -> None:
    path = Path(output)
    if fmt == "parquet":
        write_parquet(loaded.records, path)
        return
    if fmt == "csv" and path.suffix.lower() != ".csv":
        # write_report picks CSV by suffix; an explicit --format csv wins over the file name.
        write_with(path, lambda handle: write_csv(loaded.records, handle))
        return
    write_report(loaded.records, path, skipped_lines=loaded.skipped_lines, sources=loaded.sources, title=title,
                 templates=templates, answer_options=options)


def _write_stdout(fmt: str, title: str, loaded: LoadedResults, templates: Path | None,
                  options: AnswerOptions) -> None:
    if fmt == "csv":
        write_csv(loaded.records, sys.stdout)
        return
    view = build_view(loaded.records, skipped_lines=loaded.skipped_lines, sources=loaded.sources, title=title,
                      answer_options=options)
    sys.stdout.write(render_html(view, templates=templates))


def _version() -> str:
    return __version__


def _run_list(args: argparse.Namespace) -> int:
    import pytest  # noqa: PLC0415 - pytest, 0.4 s: only `gradeff list` runs a session

    # The registrations a pytest session here makes (conftest hooks, plugins, entry points), listed by
    # gradeff.pytest.listing's --gradeff-list. Named with -p so that a session without plugin autoloading lists too
    # (the entry point bears the module's name: never a second copy). No cache directory left behind.
    code = pytest.main(["-p", "gradeff.pytest_plugin", "-p", "no:cacheprovider", "--capture=no",
                        f"--gradeff-list={args.axis or 'all'}", *args.pytest_args])
    return EXIT_OK if code == 0 else EXIT_BAD_INPUT


_HISTORY = "results/history.sqlite"
_BASELINE = "baselines/tiny-cpu.jsonl"


def _add_baseline_parser(commands) -> None:
    baseline = commands.add_parser(
        "baseline", help="record the regression gate's baseline of a slice of cells, or check this checkout against "
        "it", description="The slice is pytest's selection after -- (default: the main grid's adam and cgd cells, "
        "what .ci/run gates). See docs/gate.md.")
    actions = baseline.add_subparsers(dest="action", required=True, metavar="ACTION")
    record = actions.add_parser(
        "record", help="run the slice serially on one thread, then once per numerics perturbation, and write the "
        "baseline and its perturbation runs together", description="Every cell must end ok in every run; a failed "
        "run leaves an earlier baseline as it was. A few minutes for the default slice on 2 cores.")
    record.add_argument("--out", default=_BASELINE, help=f"the baseline to write (default {_BASELINE}); its "
                        "perturbation runs go beside it, <stem>.perturbed.jsonl")
    record.set_defaults(func=_run_baseline_record)
    check = actions.add_parser(
        "check", help="run the slice as the baseline was recorded and gate it: exit 1 on a regression",
        description="pytest with --gradeff-baseline and --gradeff-compare-args=--strict; options after --gate-args "
        "go to the gate (e.g. --ignore time_per_epoch on a shared machine).")
    check.add_argument("baseline", nargs="?", default=_BASELINE, help=f"the baseline (default {_BASELINE})")
    check.add_argument("--gate-args", default="", metavar="ARGS",
                       help="gradeff compare options for the gate, as one string")
    check.set_defaults(func=_run_baseline_check)


def _baseline_selection(args: argparse.Namespace) -> list[str]:
    return list(getattr(args, "pytest_args", None) or DEFAULT_SLICE)


def _run_baseline_record(args: argparse.Namespace) -> int:
    try:
        record_baseline(args.out, _baseline_selection(args))
    except BaselineNotRecorded as exc:
        _error(f"{exc}; the baseline is left as it was")
        return EXIT_BAD_INPUT
    except OutputError as exc:
        _error(str(exc))
        return EXIT_INCOMPLETE_OUTPUT
    return EXIT_OK


def _run_baseline_check(args: argparse.Namespace) -> int:
    if not Path(args.baseline).is_file():
        _error(f"no baseline at {args.baseline}: `gradeff baseline record --out {args.baseline}` records one")
        return EXIT_BAD_INPUT
    return subprocess.run(check_command(args.baseline, _baseline_selection(args),
                                        shlex.split(args.gate_args))).returncode


def _add_history_parser(commands) -> None:
    history = commands.add_parser(
        "history", help="figures across commits: measure past commits side by side, bisect a change, render the "
        "trends", description="A history store (an SQLite file, default results/history.sqlite; pytest sessions add "
        "to it with --gradeff-history PATH) holds one row per commit, machine, cell, seed and metric. See "
        "docs/gate.md.")
    actions = history.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run", help="measure every commit of REV1..REV2 side by side and add their figures to the history",
        description="Check out REV1 and every commit after it up to REV2 (first parents) in git worktrees, start a "
        "worker per commit, and train each selected cell on all of them slice by slice in a balanced order, so "
        "their times per step share the machine's load and compare; losses, test figures and counted memory are "
        "exact. Every figure goes to the history store.")
    run.add_argument("range", metavar="REV1..REV2", help="the commits, oldest first (REV1 included)")
    _add_selection(run)
    _add_measure_options(run)
    run.add_argument("--history", default=_HISTORY, metavar="PATH", help=f"the history store (default {_HISTORY})")
    run.set_defaults(func=_run_history_run)
    find = actions.add_parser(
        "find", help="bisect REV1..REV2 to the commit where a cell's figure changed (about log2 N runs)",
        description="As asv find: measure the two ends side by side, then repeatedly the middle commit with the "
        "current ends, keeping the half whose ends differ more.")
    find.add_argument("metric", choices=tuple(METRICS), metavar="METRIC", help=f"one of {', '.join(METRICS)}")
    find.add_argument("cell", metavar="CELL", help="a cell id of the grid (e.g. llm-adam-standard)")
    find.add_argument("range", metavar="REV1..REV2", help="the commits, oldest first")
    _add_selection(find)
    _add_measure_options(find)
    find.add_argument("--history", metavar="PATH", help="also add every figure measured to this history store")
    find.set_defaults(func=_run_history_find)
    report = actions.add_parser(
        "report", help="render the history as a self-contained HTML page: a trend per cell and metric, change points "
        "marked", description="One trend per cell and metric (time per step, test figures, peak memory) with each "
        "point's interval, and the change points found in it (PELT over points weighted by their intervals) "
        "marked with their commits.")
    report.add_argument("--history", default=_HISTORY, metavar="PATH", help=f"the history store (default {_HISTORY})")
    report.add_argument("-o", "--output", default="history.html", help="output file (default history.html)")
    report.add_argument("--title", default="gradeff history", help="page title")
    report.set_defaults(func=_run_history_report)


def _open_history(path: str, *, must_exist: bool):
    if must_exist and not Path(path).is_file():
        raise ValueError(f"no history store at {path}: `gradeff history run` or --gradeff-history PATH makes one")
    return HistoryStore(path)


def _run_history_run(args: argparse.Namespace) -> int:
    try:
        cells, config = _selection_args(args)
        settings = _measure_settings(args)
        repo = repository_root()
        commits = commits_in_range(repo, args.range)
        store = _open_history(args.history, must_exist=False)
    except (KeyError, ValueError, RevisionError) as exc:
        _error(str(exc).strip('"'))
        return EXIT_BAD_INPUT
    _exit_cleanly_on_sigterm()
    print(f"gradeff history run: {len(commits)} commits x {len(cells)} cells, {settings.rounds} rounds, "
          f"{settings.clock} clock", file=sys.stderr)
    try:
        with store:
            written = run_history(repo, commits, cells, config, settings, store,
                                  echo=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    except (RevisionError, ValueError) as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    print(f"gradeff history run: {written} measurements added to {args.history}", file=sys.stderr)
    return EXIT_OK


def _run_history_find(args: argparse.Namespace) -> int:
    try:
        args.cells = args.cell
        (cell,), config = _selection_args(args)
        settings = _measure_settings(args)
        repo = repository_root()
        commits = commits_in_range(repo, args.range)
        if len(commits) < 2:
            raise ValueError(f"{args.range} holds one commit: give REV1..REV2")
        store = _open_history(args.history, must_exist=False) if args.history else None
    except (KeyError, ValueError, RevisionError) as exc:
        _error(str(exc).strip('"'))
        return EXIT_BAD_INPUT
    _exit_cleanly_on_sigterm()
    print(f"gradeff history find: {args.metric} of {cell.id} over {len(commits)} commits", file=sys.stderr)
    try:
        with store if store is not None else _nothing():
            found = find_change(repo, args.metric, cell, commits, config, settings, store=store,
                                echo=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    except (RevisionError, ValueError) as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    if not found.changed:
        (ends,) = found.runs
        a, b = (ends[c] for c in (commits[0], commits[-1]))
        print(f"{args.metric} of {cell.id}: {a.value:.6g} at {commits[0][:10]} and {b.value:.6g} at "
              f"{commits[-1][:10]}, alike within their intervals: nothing to find in {args.range}")
        return EXIT_OK
    first, last = commit_of(repo, found.first_changed), commit_of(repo, found.last_unchanged)
    before, after = found.runs[-1][last.commit], found.runs[-1][first.commit]
    print(f"{args.metric} of {cell.id} changed at {first.commit[:10]} ({first.date}) {first.message}")
    print(f"  {before.value:.6g} at {last.commit[:10]} -> {after.value:.6g} ({after.low:.6g} - {after.high:.6g}), "
          f"{len(found.runs)} runs")
    return EXIT_OK


def _nothing():
    return contextlib.nullcontext()


def _run_history_report(args: argparse.Namespace) -> int:
    try:
        store = _open_history(args.history, must_exist=True)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    with store:
        view = build_history_view(store, title=args.title)
    try:

        path = write_text(Path(args.output), render_history(view))
    except OutputError as exc:
        _error(str(exc))
        return EXIT_OUTPUT
    print(f"gradeff: wrote {path} ({len(view.trends)} trends, {sum(len(t.changes) for t in view.trends)} change "
          f"points)", file=sys.stderr)
    return EXIT_OK
