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
import sys
from collections.abc import Sequence

from gradeff import __version__
from gradeff.gate.ab import CLOCKS
from gradeff.gate.baseline_record import run_baseline_check, run_baseline_record
from gradeff.gate.compare import main as compare_main
from gradeff.gate.history import METRICS
from gradeff.records.exits import EXIT_BAD_INPUT, EXIT_OK
from gradeff.report.command import run_report
from gradeff.scale.launch_command import run_launch, run_launch_collect, run_launch_status
from gradeff.scale.side_by_side_commands import run_ab, run_history_find, run_history_report, run_history_run

__all__ = ["build_parser", "main", "parse_args"]

# `gradeff report` formats (gradeff.report.command also chooses a table format by the output's suffix).
_FORMATS = ("html", "csv", "parquet")
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
    report.set_defaults(func=run_report)

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
    ab.set_defaults(func=run_ab)


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
    launch.set_defaults(func=run_launch)


def _launch_tool_parser(tool: str) -> argparse.ArgumentParser:
    """``gradeff launch status DIR`` and ``gradeff launch collect DIR``."""
    if tool == "status":
        parser = argparse.ArgumentParser(
            prog="gradeff launch status", description="Where each shard of a launch stands: its job's state (every "
            "run of a requeued Slurm task), the cells it has recorded of those it was given, its exit code.")
        parser.add_argument("folder", metavar="DIR", help="the launch's folder (its launch.json)")
        parser.set_defaults(func=run_launch_status)
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
    parser.set_defaults(func=run_launch_collect)
    return parser


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
    record.set_defaults(func=run_baseline_record)
    check = actions.add_parser(
        "check", help="run the slice as the baseline was recorded and gate it: exit 1 on a regression",
        description="pytest with --gradeff-baseline and --gradeff-compare-args=--strict; options after --gate-args "
        "go to the gate (e.g. --ignore time_per_epoch on a shared machine).")
    check.add_argument("baseline", nargs="?", default=_BASELINE, help=f"the baseline (default {_BASELINE})")
    check.add_argument("--gate-args", default="", metavar="ARGS",
                       help="gradeff compare options for the gate, as one string")
    check.set_defaults(func=run_baseline_check)


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
    run.set_defaults(func=run_history_run)
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
    find.set_defaults(func=run_history_find)
    report = actions.add_parser(
        "report", help="render the history as a self-contained HTML page: a trend per cell and metric, change points "
        "marked", description="One trend per cell and metric (time per step, test figures, peak memory) with each "
        "point's interval, and the change points found in it (PELT over points weighted by their intervals) "
        "marked with their commits.")
    report.add_argument("--history", default=_HISTORY, metavar="PATH", help=f"the history store (default {_HISTORY})")
    report.add_argument("-o", "--output", default="history.html", help="output file (default history.html)")
    report.add_argument("--title", default="gradeff history", help="page title")
    report.set_defaults(func=run_history_report)
