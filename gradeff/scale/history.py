"""Past commits measured side by side into the history store (``gradeff history run``), and the bisection of a range
(``gradeff history find``).

Every commit of a range is checked out in a git worktree of its own and served by a worker of its own
(:mod:`gradeff.scale.ab`); each cell then trains on all of them in turn, slice by slice in a balanced order
(:func:`gradeff.gate.ab.balanced_order`), so their times share the machine's load and compare (as ``asv run`` over a
range, but interleaved). A commit older than the slice protocol supports (no ``gradeff.cell.run`` nor
``gradeff.runner``) is refused with that reason.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gradeff.gate.ab import balanced_order
from gradeff.gate.history import (
    METRICS,
    Bisection,
    Commit,
    Estimate,
    HistoryStore,
    Measurement,
    bisect_change,
    interleaved_estimates,
    machine_of,
    measurements_of_record,
    slices_setting,
)
from gradeff.scale.ab import (
    ABSettings,
    RevisionError,
    SideOutcome,
    cell_config,
    checkout,
    git,
    interleave,
    started_workers,
)
from gradeff.studies.grid import Cell

__all__ = ["MAX_REVISIONS", "commit_of", "commits_in_range", "find_change", "measure_side_by_side", "run_history"]

# Commits measured at once: each holds a worker process (a few hundred MB) and a worktree.
MAX_REVISIONS = 16


def commits_in_range(repo: Path, text: str) -> list[str]:
    """``A..B``: A and every commit after it up to B along B's first parents, oldest first (A included: the level
    the range starts from). A single revision is a range of one.

    Raises:
        gradeff.scale.ab.RevisionError: a revision that names no commit, or A not an ancestor of B.
    """
    start, dots, end = text.partition("..")
    if not dots:
        return [git(repo, "rev-parse", "--verify", f"{text}^{{commit}}")]
    first = git(repo, "rev-parse", "--verify", f"{start}^{{commit}}")
    last = git(repo, "rev-parse", "--verify", f"{end or 'HEAD'}^{{commit}}")
    after = git(repo, "rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{first}..{last}").split()
    if first != last and not after:
        raise RevisionError(f"{start} is not an ancestor of {end or 'HEAD'}: {text} holds no commit")
    return [first, *after]


def commit_of(repo: Path, commit: str) -> Commit:
    """A commit's hash, committer date (ISO 8601) and subject line."""
    full, date, subject = git(repo, "show", "-s", "--format=%H%x00%cI%x00%s", commit).split("\x00", 2)
    return Commit(full, date, subject)


@dataclass(frozen=True, kw_only=True)
class CellRun:
    """One cell on every commit of a side-by-side run: each commit's outcome and its comparable time estimate."""

    cell: Cell
    outcomes: dict[str, SideOutcome]
    times: dict[str, Estimate]


def measure_side_by_side(repo: Path, commits: Sequence[str], selected: Sequence[Cell], config: dict,
                         settings: ABSettings, *, echo: Callable[[str], None] = lambda line: None
                         ) -> list[CellRun]:
    """Train each cell on every commit, interleaved (:func:`gradeff.scale.ab.interleave`), and estimate each
    commit's time per step against the others (:func:`gradeff.gate.history.interleaved_estimates`).

    Raises:
        ValueError: more than :data:`MAX_REVISIONS` commits, or a commit named twice.
    """
    if len(commits) > MAX_REVISIONS:
        raise ValueError(f"{len(commits)} commits: at most {MAX_REVISIONS} run side by side (each holds a worker "
                         f"process); give a shorter range")
    if len(set(commits)) != len(commits):
        raise ValueError("a commit is named twice")
    runs = []
    with contextlib.ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gradeff-history-logs-")))
        trees = {commit: stack.enter_context(checkout(repo, commit)) for commit in commits}
        workers = stack.enter_context(started_workers(trees, logs))
        order = balanced_order(list(commits), settings.rounds) if len(commits) > 1 else ()
        for cell in selected:
            started = time.perf_counter()
            outcomes = interleave(cell, workers, order, cell_config(cell, config, settings.slice_steps),
                                  warmup=settings.warmup)
            slices = [s for outcome in outcomes.values() for s in outcome.slices]
            runs.append(CellRun(cell=cell, outcomes=outcomes, times=interleaved_estimates(slices, settings.clock)))
            failed = [f"{c[:10]}: {o.error}" for c, o in outcomes.items() if o.record is None]
            echo(f"{cell.id}: {len(commits) - len(failed)} of {len(commits)} commits measured"
                 + (f" ({'; '.join(failed)})" if failed else "") + f" [{time.perf_counter() - started:.0f} s]")
    return runs


def run_history(repo: Path, commits: Sequence[str], selected: Sequence[Cell], config: dict, settings: ABSettings,
                store: HistoryStore, *, echo: Callable[[str], None] = lambda line: None) -> int:
    """Measure ``commits`` side by side on ``selected`` cells and add every figure to ``store``.

    Returns:
        How many measurements were written.
    """
    run = f"history-{uuid.uuid4().hex[:8]}"
    written = 0
    for commit in commits:
        store.add_commit(commit_of(repo, commit))
    for cell_run in measure_side_by_side(repo, commits, selected, config, settings, echo=echo):
        for commit, outcome in cell_run.outcomes.items():
            if outcome.record is None:
                continue
            machine, description = machine_of(outcome.record)
            store.add_machine(machine, description)
            written += store.add(measurements_of_record(outcome.record, commit=commit, machine=machine, run=run,
                                                        source="history run", time=cell_run.times.get(commit),
                                                        setting=_setting(settings)))
    return written


def _setting(settings: ABSettings) -> str:
    return slices_setting(rounds=settings.rounds, warmup=settings.warmup, slice_steps=settings.slice_steps,
                          clock=settings.clock)


def _estimate(metric: str, commit: str, cell_run: CellRun) -> Estimate | None:
    if metric == "time_per_step":
        return cell_run.times.get(commit)
    record = cell_run.outcomes[commit].record
    if record is None:
        return None
    rows = measurements_of_record(record, commit=commit, machine="", run="", source="")
    value = next((m.value for m in rows if m.metric == metric), None)
    return Estimate(value, value, value) if value is not None else None


def find_change(repo: Path, metric: str, cell: Cell, commits: Sequence[str], config: dict, settings: ABSettings, *,
                store: HistoryStore | None = None, echo: Callable[[str], None] = lambda line: None) -> Bisection:
    """Bisect ``commits`` (oldest first) to the first one where ``metric`` of ``cell`` changed.

    Each step is one side-by-side run of the two current ends and their middle; every figure it measured is added to
    ``store`` when given.

    Raises:
        ValueError: an unknown metric, or a commit where the figure could not be measured.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; metrics: {', '.join(METRICS)}")
    run = f"find-{uuid.uuid4().hex[:8]}"

    def measure(revisions: list[str]) -> dict[str, Estimate]:
        (cell_run,) = measure_side_by_side(repo, revisions, [cell], config, settings)
        estimates = {}
        for commit in revisions:
            estimate = _estimate(metric, commit, cell_run)
            if estimate is None:
                raise ValueError(f"{cell.id} {metric} could not be measured at {commit[:10]}: "
                                 f"{cell_run.outcomes[commit].error or 'the cell did not end ok'}")
            estimates[commit] = estimate
            if store is not None and cell_run.outcomes[commit].record is not None:
                _store(store, repo, commit, cell_run, run, _setting(settings))
        echo("  ".join(f"{commit[:10]} {estimates[commit].value:.6g}" for commit in revisions))
        return estimates

    return bisect_change(list(commits), measure, log=METRICS[metric].log)


def _store(store: HistoryStore, repo: Path, commit: str, cell_run: CellRun, run: str, setting: str) -> None:
    record = cell_run.outcomes[commit].record
    machine, description = machine_of(record)
    store.add_commit(commit_of(repo, commit))
    store.add_machine(machine, description)
    rows: list[Measurement] = measurements_of_record(record, commit=commit, machine=machine, run=run,
                                                     source="history find", time=cell_run.times.get(commit),
                                                     setting=setting)
    store.add(rows)
