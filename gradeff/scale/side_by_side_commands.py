"""``gradeff ab REV`` and ``gradeff history run|find|report``: the selected cells of several revisions trained side by
side (:mod:`gradeff.scale.ab`, :mod:`gradeff.scale.history`), the verdicts and the change found printed, the figures
kept in the history store and the history page rendered from it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from pathlib import Path

from gradeff.gate.ab import CPU, DEFAULT_THRESHOLD, WALL, ab_lines
from gradeff.gate.history import HistoryStore
from gradeff.records.exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_OUTPUT, error
from gradeff.records.outputs import OutputError, write_text
from gradeff.report.history import build_history_view, render_history
from gradeff.scale.ab import ABSettings, RevisionError, WorkerError, repository_root, run_revisions, select_cells
from gradeff.scale.history import commit_of, commits_in_range, find_change, run_history
from gradeff.studies.grid import AXES, PLURALS

__all__ = ["run_ab", "run_history_find", "run_history_report", "run_history_run"]


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


def run_ab(args: argparse.Namespace) -> int:
    try:
        cells, config = _selection_args(args)
        settings = _measure_settings(args, threshold=DEFAULT_THRESHOLD if args.threshold is None else args.threshold)
        repo = repository_root()
    except (KeyError, ValueError) as exc:
        error(str(exc).strip('"'))
        return EXIT_BAD_INPUT
    if not cells:
        error("the selection has no cell")
        return EXIT_BAD_INPUT
    _exit_cleanly_on_sigterm()
    print(f"gradeff ab: {len(cells)} cells, {settings.rounds} rounds of {settings.slice_steps or 'whole-epoch'}"
          f"-batch slices, {settings.clock} clock, threshold {settings.threshold:.0%}", file=sys.stderr)
    try:
        run = run_revisions(repo, args.revision, args.current, cells, config, settings,
                            echo=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    except (RevisionError, WorkerError) as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    for line in ab_lines(run.results, base=run.base, current=run.current):
        print(line)
    print(f"gradeff ab: took {run.seconds:.0f} s", file=sys.stderr)
    code = EXIT_FAILED if run.regressed else EXIT_OK
    try:
        if args.json:
            write_text(Path(args.json), json.dumps(run.as_dict(), indent=1) + "\n")
    except OutputError as exc:
        error(str(exc))
        return max(code, EXIT_OUTPUT)
    return code


def _open_history(path: str, *, must_exist: bool):
    if must_exist and not Path(path).is_file():
        raise ValueError(f"no history store at {path}: `gradeff history run` or --gradeff-history PATH makes one")
    return HistoryStore(path)


def run_history_run(args: argparse.Namespace) -> int:
    try:
        cells, config = _selection_args(args)
        settings = _measure_settings(args)
        repo = repository_root()
        commits = commits_in_range(repo, args.range)
        store = _open_history(args.history, must_exist=False)
    except (KeyError, ValueError, RevisionError) as exc:
        error(str(exc).strip('"'))
        return EXIT_BAD_INPUT
    _exit_cleanly_on_sigterm()
    print(f"gradeff history run: {len(commits)} commits x {len(cells)} cells, {settings.rounds} rounds, "
          f"{settings.clock} clock", file=sys.stderr)
    try:
        with store:
            written = run_history(repo, commits, cells, config, settings, store,
                                  echo=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    except (RevisionError, ValueError) as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    print(f"gradeff history run: {written} measurements added to {args.history}", file=sys.stderr)
    return EXIT_OK


def run_history_find(args: argparse.Namespace) -> int:
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
        error(str(exc).strip('"'))
        return EXIT_BAD_INPUT
    _exit_cleanly_on_sigterm()
    print(f"gradeff history find: {args.metric} of {cell.id} over {len(commits)} commits", file=sys.stderr)
    try:
        with store if store is not None else _nothing():
            found = find_change(repo, args.metric, cell, commits, config, settings, store=store,
                                echo=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    except (RevisionError, ValueError) as exc:
        error(str(exc))
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


def run_history_report(args: argparse.Namespace) -> int:
    try:
        store = _open_history(args.history, must_exist=True)
    except ValueError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    with store:
        view = build_history_view(store, title=args.title)
    try:

        path = write_text(Path(args.output), render_history(view))
    except OutputError as exc:
        error(str(exc))
        return EXIT_OUTPUT
    print(f"gradeff: wrote {path} ({len(view.trends)} trends, {sum(len(t.changes) for t in view.trends)} change "
          f"points)", file=sys.stderr)
    return EXIT_OK
