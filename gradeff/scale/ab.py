"""Running revisions side by side: git worktrees of past commits, one long-lived worker per revision, slices in turn.

``gradeff ab REV`` trains the selected cells at revision ``REV`` (a ``git worktree add --detach`` of it in a
temporary folder) and at the working tree, each in a worker process of its own (:mod:`gradeff.scale.ab_worker`,
``PYTHONPATH`` pointing at that revision's tree, the same Python environment). For each cell both workers build it as
a grid cell is built, train one warm-up epoch each, then take turns epoch by epoch in the balanced order of
:func:`gradeff.gate.ab.abba_order` for R rounds, one side at a time (never both at once: they would share the
cores); then each finishes the cell and hands its record back. :mod:`gradeff.gate.ab` judges the slices (the paired
ratio and its interval) and the records (the deterministic figures, exactly).

The same machinery runs more than two revisions at once for ``gradeff history run`` (:func:`interleave` with
:func:`gradeff.gate.ab.balanced_order`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradeff.gate.ab import (
    BASE,
    CLOCKS,
    CPU,
    CURRENT,
    DEFAULT_THRESHOLD,
    NOT_COMPARED,
    CellAB,
    Slice,
    TimeVerdict,
    abba_order,
    exact_differences,
    judge_time,
)
from gradeff.records.results import CellRecord
from gradeff.studies.grid import PLURALS, Cell, cells
from gradeff.studies.hparams import hparams_for

__all__ = [
    "ABRun", "ABSettings", "DEFAULT_ROUNDS", "DEFAULT_SLICE_STEPS", "RevisionError", "SideOutcome", "Worker",
    "WorkerError", "cell_config", "checkout", "git", "interleave", "judge_cell", "repository_root",
    "resolve_revision", "run_ab", "run_revisions", "select_cells", "started_workers",
]

# Rounds of an A/B (four slices each: two per side) and batches per slice, from the calibration in docs/gate.md.
DEFAULT_ROUNDS = 16
DEFAULT_SLICE_STEPS = 4
_WORKER = Path(__file__).with_name("ab_worker.py")
# How long a worker may take to answer one request: a cell's build, an epoch or its record (a tiny cell's epoch
# takes a second; a paper-sized one, minutes).
_ANSWER_TIMEOUT_S = 3600.0


class RevisionError(ValueError):
    """A revision that cannot be resolved or checked out (the message names it and what git said)."""


class WorkerError(RuntimeError):
    """A worker that died or broke the protocol (the message ends with its log's last lines)."""


def git(repo: Path, *args: str) -> str:
    """``git -C repo args...``'s output, stripped; :class:`RevisionError` with git's own message on failure."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RevisionError(f"git {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc.stdout.strip()


def repository_root(start: Path | None = None) -> Path:
    """The working tree holding ``start`` (default: the current directory)."""
    try:
        return Path(git(start or Path.cwd(), "rev-parse", "--show-toplevel"))
    except (RevisionError, FileNotFoundError) as exc:
        raise RevisionError(f"not inside a git working tree ({start or Path.cwd()}): an A/B run checks revisions "
                            f"out with git ({exc})") from None


def resolve_revision(repo: Path, revision: str) -> str:
    """The full commit hash ``revision`` names in ``repo``.

    Raises:
        RevisionError: no such commit (in a shallow clone, ``HEAD~1`` may be missing: fetch more history).
    """
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except RevisionError:
        shallow = git(repo, "rev-parse", "--is-shallow-repository") == "true"
        hint = " (this clone is shallow: `git fetch --unshallow` or a deeper --depth)" if shallow else ""
        raise RevisionError(f"{revision!r} names no commit in {repo}{hint}") from None


@contextlib.contextmanager
def checkout(repo: Path, revision: str) -> Iterator[Path]:
    """A detached git worktree of ``revision`` in a temporary folder, removed afterwards."""
    commit = resolve_revision(repo, revision)
    folder = Path(tempfile.mkdtemp(prefix=f"gradeff-rev-{commit[:10]}-"))
    tree = folder / "tree"
    try:
        git(repo, "worktree", "add", "--detach", "--quiet", str(tree), commit)
        yield tree
    finally:
        with contextlib.suppress(RevisionError):
            git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(RevisionError):
            git(repo, "worktree", "prune")


class Worker:
    """One revision's worker process, answering the slice protocol (:mod:`gradeff.scale.ab_worker`).

    Args:
        tree: the revision's source tree (its ``gradeff`` package is the one imported).
        label: the side's name in messages.
        log: file the worker's stderr goes to (libraries' warnings, a traceback).
        env: extra environment variables of the worker.
    """

    def __init__(self, tree: Path, label: str, log: Path, env: dict[str, str] | None = None):
        self.tree, self.label, self.log = tree, label, log
        self._env = dict(env or {})
        self._proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        # One OpenMP thread unless told otherwise, as CI's gate runs: on a shared machine an idle spinning OpenMP
        # thread turns a neighbour's burst into a much slower epoch (scripts/calibrate_gate.sh).
        env = {"OMP_NUM_THREADS": "1"} | os.environ | self._env
        # Only the revision's tree: an inherited PYTHONPATH could put another gradeff first.
        env["PYTHONPATH"] = str(self.tree)
        # Open for the process's lifetime (closed by stop()).
        self._log_handle = open(self.log, "a", encoding="utf-8")
        # -P: the worker's own folder (gradeff/scale of *this* revision) is not put on sys.path.
        self._proc = subprocess.Popen([sys.executable, "-P", str(_WORKER)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log_handle, env=env, text=True,
                                      cwd=self.tree, bufsize=1)
        hello = self.ask({"op": "hello"})
        package = Path(hello.get("package", ""))
        if package.resolve() != (self.tree / "gradeff").resolve():
            self.stop()
            raise WorkerError(f"{self.label}: the worker imported gradeff from {package}, not from {self.tree}")
        self.layout = hello.get("layout", "")

    def send(self, message: dict) -> None:
        try:
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerError(f"{self.label}: the worker is gone{self._tail()}") from None

    def receive(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.wait(timeout=30)
            raise WorkerError(f"{self.label}: the worker ended (exit {code}){self._tail()}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise WorkerError(f"{self.label}: {answer.get('error', 'no answer')}")
        return answer

    def ask(self, message: dict) -> dict:
        self.send(message)
        return self.receive()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log_handle.close()
        self._proc = None

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
            if lines:
                return "; its log ends: " + " | ".join(line.strip() for line in lines)
        return ""


@contextlib.contextmanager
def started_workers(trees: dict[str, Path], logs: Path, env: dict[str, dict[str, str]] | None = None
                    ) -> Iterator[dict[str, Worker]]:
    """One worker per side (label → tree), stopped afterwards; their logs in ``logs``."""
    workers: dict[str, Worker] = {}
    try:
        for label, tree in trees.items():
            workers[label] = Worker(tree, label, logs / f"worker-{label}.log", (env or {}).get(label))
        yield workers
    finally:
        for worker in workers.values():
            worker.stop()


@dataclass(kw_only=True)
class SideOutcome:
    """What one side did with a cell: its timed slices, its record, or why it has none."""

    slices: list[Slice] = field(default_factory=list)
    record: CellRecord | None = None
    error: str = ""
    # Epochs trained (warm-up included): a side that ended early stops counting.
    epochs: int = 0
    open: bool = False


def _cell_message(cell: Cell) -> dict:
    return {"model": cell.model, "optimizer": cell.optimizer, "strategy": cell.strategy, "method": cell.method,
            "dataset": cell.dataset, "grid": cell.grid}


def _ended(outcome: SideOutcome, answer: dict) -> bool:
    if answer.get("ended"):
        outcome.record = CellRecord.from_dict(answer["record"])
        outcome.open = False
        return True
    return False


def interleave(cell: Cell, workers: dict[str, Worker], order: Sequence[tuple[int, str]], config: dict, *,
               warmup: int = 1) -> dict[str, SideOutcome]:
    """Train ``cell`` on every side: build on all, ``warmup`` untimed epochs each, then one epoch per entry of
    ``order`` (``(round, side)``), one side at a time; then each side's record.

    A side that ends early (diverged, skipped, a failed build) trains no more; the others train on to the same number
    of epochs, so records of code that behaves alike stay equal. A worker that fails is restarted for the next cell.

    Returns:
        side → its :class:`SideOutcome`.
    """
    outcomes = {side: SideOutcome() for side in workers}
    opening = {"op": "open", "cell": _cell_message(cell), "config": config}
    for side, worker in workers.items():  # built side by side: a build is not timed
        _guard(worker, outcomes[side], lambda w=worker: w.send(opening))
    for side, worker in workers.items():
        if not outcomes[side].error:
            _guard(worker, outcomes[side], lambda w=worker, o=outcomes[side]: _opened(o, w.receive()))
    steps = [(None, side) for _ in range(warmup) for side in workers] + list(order)
    for round_, side in steps:
        outcome = outcomes[side]
        if not outcome.open:
            continue
        answer = _guard(workers[side], outcome, lambda s=side: workers[s].ask({"op": "slice"}))
        if answer is None or _ended(outcome, answer):
            continue
        outcome.epochs += 1
        if round_ is not None:
            outcome.slices.append(Slice(side, round_, float(answer["seconds"]), int(answer["steps"]),
                                        float(answer["cpu"]) if answer.get("cpu") is not None else None))
    _even_out(workers, outcomes)
    for side, worker in workers.items():
        if outcomes[side].open:
            _guard(worker, outcomes[side], lambda w=worker: w.send({"op": "close"}))
    for side, worker in workers.items():
        if outcomes[side].open:
            _guard(worker, outcomes[side], lambda w=worker, o=outcomes[side]: _ended(o, w.receive()))
    return outcomes


def _opened(outcome: SideOutcome, answer: dict) -> None:
    outcome.open = not _ended(outcome, answer)


def _even_out(workers: dict[str, Worker], outcomes: dict[str, SideOutcome]) -> None:
    """A side that ended early trained fewer epochs: the others stop at the same count where they have not passed it
    (their records then hold the same epochs), and nothing more is asked of them."""
    ended = [o.epochs for o in outcomes.values() if not o.open and o.record is not None]
    if not ended:
        return
    target = max(ended)
    for side, outcome in outcomes.items():
        while outcome.open and outcome.epochs < target:
            answer = _guard(workers[side], outcome, lambda s=side: workers[s].ask({"op": "slice"}))
            if answer is None or _ended(outcome, answer):
                break
            outcome.epochs += 1


def _guard(worker: Worker, outcome: SideOutcome, action: Callable[[], object]) -> object | None:
    """Run ``action``; a worker failure becomes the side's error (the worker restarted for the next cell)."""
    try:
        return action()
    except WorkerError as exc:
        outcome.error, outcome.open = str(exc), False
        # A dead worker, or one that answered ok: false and may still be inside the cell: the next cell gets a fresh
        # one (a failure to start it shows there, as that cell's error).
        with contextlib.suppress(WorkerError):
            worker.restart()
        return None


def judge_cell(cell: Cell, outcomes: dict[str, SideOutcome], threshold: float = DEFAULT_THRESHOLD,
               clock: str = CPU) -> CellAB:
    """The A/B verdict on one cell from both sides' outcomes (:mod:`gradeff.gate.ab`)."""
    base, current = outcomes[BASE], outcomes[CURRENT]
    slices = tuple(sorted([*base.slices, *current.slices], key=lambda s: (s.round, s.side)))
    for side, outcome in ((CURRENT, current), (BASE, base)):
        if outcome.record is None:
            return CellAB(cell=cell.id, slices=slices, missing=side,
                          note=f"the {side} side could not run it: {outcome.error or 'no record'}",
                          time=TimeVerdict(verdict=NOT_COMPARED, threshold=threshold, clock=clock))
    differences = tuple(exact_differences(base.record, current.record))
    statuses = (base.record.status, current.record.status)
    note = "" if statuses == ("ok", "ok") else f"ended {statuses[0]} (base) and {statuses[1]} (current)"
    return CellAB(cell=cell.id, time=judge_time(slices, threshold, clock), differences=differences, slices=slices,
                  note=note)


@dataclass(frozen=True, kw_only=True)
class ABSettings:
    """How an A/B run measures: rounds, slice length, clock and threshold (defaults from docs/gate.md's calibration).

    Attributes:
        rounds: balanced rounds per cell (four slices each, two per side), after ``warmup`` slices per side.
        slice_steps: batches per slice: the cell's epoch cut to this many batches, as ``train_samples`` cuts it, in
            whole accumulation blocks (``accum_steps`` batches, 4 at the tiny profile; at least one block): a
            standard cell takes an optimizer step per batch, an accumulating one per block. ``None``: whole epochs.
        clock: ``cpu`` or ``wall`` (:data:`gradeff.gate.ab.CLOCKS`).
        threshold: the relative slowdown that fails (:func:`gradeff.gate.ab.judge_time`).
    """

    rounds: int = DEFAULT_ROUNDS
    slice_steps: int | None = DEFAULT_SLICE_STEPS
    clock: str = CPU
    threshold: float = DEFAULT_THRESHOLD
    warmup: int = 1

    def __post_init__(self):
        if self.rounds < 2:
            raise ValueError(f"rounds: an interval needs at least 2 rounds, got {self.rounds}")
        if self.slice_steps is not None and self.slice_steps < 1:
            raise ValueError(f"slice steps must be >= 1, got {self.slice_steps}")
        if self.clock not in CLOCKS:
            raise ValueError(f"unknown clock {self.clock!r}; clocks: {', '.join(CLOCKS)}")
        if not 0 <= self.threshold < 10:
            raise ValueError(f"threshold: a relative slowdown in [0, 10), got {self.threshold}")


def cell_config(cell: Cell, config: dict, slice_steps: int | None) -> dict:
    """The RunConfig fields a cell's slices run with: ``config``, its epochs cut to ``slice_steps`` batches."""
    if slice_steps is None:
        return dict(config)
    hp = hparams_for(cell.model, config.get("profile", "tiny"), dataset=cell.dataset)
    return {**config, "train_samples": slice_steps * hp.batch_size}


def run_ab(selected: Sequence[Cell], *, base: Path, current: Path, config: dict, settings: ABSettings = ABSettings(),
           logs: Path, echo: Callable[[str], None] = lambda line: None,
           env: dict[str, dict[str, str]] | None = None) -> list[CellAB]:
    """The A/B of ``selected`` cells between two source trees.

    Args:
        base: the base revision's tree (a checkout); ``current``: the tree under test (usually the working tree).
        config: the cells' run settings (RunConfig fields: profile, seed, threads, device, ...), the same both sides.
        settings: rounds, slice length, clock, threshold.
        logs: folder of the workers' logs.
        echo: called with one line per finished cell.
        env: extra environment variables per side (``{"current": {...}}``).

    Returns:
        One :class:`~gradeff.gate.ab.CellAB` per cell, in order.
    """
    results = []
    with started_workers({BASE: base, CURRENT: current}, logs, env) as workers:
        order = abba_order(settings.rounds)
        for cell in selected:
            started = time.perf_counter()
            outcomes = interleave(cell, workers, order, cell_config(cell, config, settings.slice_steps),
                                  warmup=settings.warmup)
            result = judge_cell(cell, outcomes, settings.threshold, settings.clock)
            results.append(result)
            m = result.time.measured
            echo(f"{cell.id}: " + (f"x{m.ratio:.3f} (x{m.low:.3f} - x{m.high:.3f}) {result.time.verdict}" if m
                                   else result.note or result.time.verdict)
                 + (f", {len(result.differences)} deterministic figures changed" if result.differences else "")
                 + f" [{time.perf_counter() - started:.0f} s]")
    return results


def select_cells(grid: str = "main", selection: dict[str, Sequence[str]] | None = None,
                 ids: Sequence[str] | None = None) -> list[Cell]:
    """The cells of ``grid`` with other keys on some axes (as ``--gradeff-<axis>``), optionally only ``ids``.

    Raises:
        KeyError: an unknown grid or key, or an id not among the grid's cells (the message names the valid ones).
    """
    chosen = list(cells(grid, **{PLURALS[axis]: list(keys) for axis, keys in (selection or {}).items()}))
    if ids:
        by_id = {cell.id: cell for cell in chosen}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise KeyError(f"no cell {', '.join(unknown)} in this selection of grid {grid}; its cells: "
                           f"{', '.join(by_id)}")
        chosen = [by_id[i] for i in ids]
    return chosen



@dataclass(frozen=True, kw_only=True)
class ABRun:
    """A whole A/B: what was compared, how, and each cell's outcome."""

    base: str
    current: str
    settings: ABSettings
    config: dict
    results: tuple[CellAB, ...]
    seconds: float

    @property
    def regressed(self) -> bool:
        return any(result.regressed for result in self.results)

    def as_dict(self) -> dict:
        """Plain JSON-ready values (``gradeff ab --json``): the revisions, settings, verdicts and raw slices."""
        return {"base": self.base, "current": self.current, "seconds": self.seconds, "config": self.config,
                "settings": {"rounds": self.settings.rounds, "slice_steps": self.settings.slice_steps,
                             "clock": self.settings.clock, "threshold": self.settings.threshold,
                             "warmup": self.settings.warmup},
                "cells": [result.as_dict() for result in self.results]}


def run_revisions(repo: Path, base: str, current: str | None, selected: Sequence[Cell], config: dict,
                  settings: ABSettings = ABSettings(), *, echo: Callable[[str], None] = lambda line: None,
                  env: dict[str, dict[str, str]] | None = None) -> ABRun:
    """The A/B of ``selected`` cells: revision ``base`` against revision ``current`` (``None``: the working tree
    ``repo``, uncommitted changes included), each checked out in a temporary worktree.

    Raises:
        RevisionError: a revision that names no commit.
    """
    base_commit = resolve_revision(repo, base)
    current_commit = resolve_revision(repo, current) if current is not None else None
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gradeff-ab-logs-")))
        base_tree = stack.enter_context(checkout(repo, base_commit))
        current_tree = stack.enter_context(checkout(repo, current_commit)) if current_commit else repo
        results = run_ab(selected, base=base_tree, current=current_tree, config=config, settings=settings, logs=logs,
                         echo=echo, env=env)
    label = f"{current} ({current_commit[:10]})" if current_commit else "the working tree"
    return ABRun(base=f"{base} ({base_commit[:10]})", current=label, settings=settings, config=dict(config),
                 results=tuple(results), seconds=time.perf_counter() - started)
