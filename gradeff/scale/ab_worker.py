"""The worker of an interleaved A/B run: one long-lived process per revision, training one cell at a time in slices.

Started by :mod:`gradeff.scale.ab` as ``python -P ab_worker.py`` with ``PYTHONPATH`` set to a revision's tree, so that
``import gradeff`` here imports *that revision's* code (a git worktree of it, or the working tree). This file is the
one copy of the slice protocol both sides speak, and it must run against revisions older than itself: it imports
nothing from gradeff at module level and reaches a revision only through the names every supported revision has
(:data:`LAYOUTS`): ``run_cell(cell, config, timer=...)``, ``RunConfig`` and ``Cell``.

The protocol (version :data:`PROTOCOL`), one JSON object per line, the parent asking and the worker answering:

* ``{"op": "hello"}`` → ``{"ok": true, "protocol": 1, "layout": "cell", "package": "<path of gradeff>"}``.
* ``{"op": "open", "cell": {axes}, "config": {RunConfig fields}}``: the cell is built and trained exactly as a grid
  cell is (``run_cell``: plan, build, strategy, warm-up, meters), up to its first epoch, then waits →
  ``{"ok": true, "epochs": <the profile's epochs>}``.
* ``{"op": "slice"}``: one epoch of that cell (``train_epoch`` through the cell's meters), then its held-out
  evaluation outside the clock → ``{"ok": true, "seconds": <the epoch's training seconds>, "steps": <optimizer
  steps>, "wall": <seconds around it>}``.
* ``{"op": "close"}``: the cell's epochs end; ``run_cell`` evaluates, meters its memory step and builds the record.

Whenever the cell ends (after ``close``; or at ``open`` or a ``slice`` when it ends early: skipped, a failed build,
diverged, out of memory) the answer is ``{"ok": true, "ended": true, "record": {the CellRecord as JSON}}``.
``{"op": "quit"}`` ends the process. A request the worker cannot serve gets ``{"ok": false, "error": "..."}``.

The epochs a cell trains are the parent's to decide (each side trains the same number, so their records compare
exactly); whatever the libraries print goes to stderr, as stdout carries the protocol alone.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import time
import traceback

import gradeff

PROTOCOL = 1
# Where each supported revision keeps the three names the protocol needs: the floors' layout (gradeff.cell.run), and
# the flat layout before it (gradeff.runner, gradeff.grid).
LAYOUTS = {
    "cell": {"run_cell": "gradeff.cell.run", "RunConfig": "gradeff.cell.config", "Cell": "gradeff.studies.grid"},
    "runner": {"run_cell": "gradeff.runner", "RunConfig": "gradeff.runner", "Cell": "gradeff.grid"},
}


class _Channel:
    """The protocol's two ends: requests on stdin, answers on a private copy of stdout (fd 1 then points at stderr)."""

    def __init__(self):
        self._out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
        os.dup2(2, 1)  # print() and C libraries now write to stderr, never into the protocol
        sys.stdout = sys.stderr

    def receive(self) -> dict | None:
        line = sys.stdin.readline()
        if not line:
            return None
        return json.loads(line)

    def send(self, message: dict) -> None:
        self._out.write(json.dumps(message, allow_nan=True) + "\n")
        self._out.flush()


def _only_this_tree() -> None:
    """Drop an editable install's import hook for gradeff: for a module the revision's tree lacks (a package a later
    revision added) it would hand over the installed tree's, and the worker would run two revisions mixed."""
    sys.meta_path[:] = [finder for finder in sys.meta_path
                        if not (getattr(finder, "__module__", "") or "").startswith("__editable__")
                        or "gradeff" not in finder.__module__]


def _layout() -> tuple[str, dict]:
    """The revision's layout and its three names, or SystemExit naming what is missing."""
    for name, places in LAYOUTS.items():
        try:
            found = {what: getattr(importlib.import_module(module), what) for what, module in places.items()}
        except (ImportError, AttributeError):
            continue
        return name, found
    raise SystemExit("gradeff ab worker: this revision has neither gradeff.cell.run nor gradeff.runner with "
                     "run_cell, RunConfig and Cell; it is older than the slice protocol supports")


class _Worker:
    def __init__(self, channel: _Channel):
        self.channel = channel
        _only_this_tree()
        self.layout, self.names = _layout()

    def hello(self) -> dict:
        return {"ok": True, "protocol": PROTOCOL, "layout": self.layout, "package": os.path.dirname(gradeff.__file__)}

    def config(self, given: dict):
        """A RunConfig of the fields this revision knows; one it lacks, set to anything but its default, is refused."""
        config_class = self.names["RunConfig"]
        known = {f.name: f for f in dataclasses.fields(config_class)}
        unknown = sorted(key for key in given if key not in known)
        if unknown:
            raise ValueError(f"this revision's RunConfig has no field {', '.join(unknown)}")
        return config_class(**given)

    def open(self, request: dict) -> None:
        """Run the cell as the grid does, serving slices from inside its epochs; answer once it ends."""
        cell = self.names["Cell"](**request["cell"])
        config = self.config(request.get("config", {}))
        record = self.names["run_cell"](cell, config, timer=self._serve_slices)
        self.channel.send({"ok": True, "ended": True, "record": json.loads(record.to_json())})

    def _serve_slices(self, epoch_fn, rounds: int, after_epoch) -> None:
        """The cell's epoch timer: an epoch per ``slice`` request until ``close``."""
        self.channel.send({"ok": True, "epochs": rounds})
        while True:
            request = self.channel.receive()
            if request is None:
                raise SystemExit(0)  # the parent is gone
            op = request.get("op")
            if op == "close":
                return
            if op != "slice":
                self.channel.send({"ok": False, "error": f"inside a cell: expected slice or close, got {op!r}"})
                continue
            cpu, started = time.process_time(), time.perf_counter()
            stats = epoch_fn()  # an exception (divergence) ends the cell: run_cell records it, open() answers
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            after_epoch()
            self.channel.send({"ok": True, "seconds": float(getattr(stats, "seconds", wall)), "cpu": cpu,
                               "steps": int(getattr(stats, "optimizer_steps", 1) or 1), "wall": wall})


def main() -> int:
    channel = _Channel()
    try:
        worker = _Worker(channel)
    except SystemExit as exc:
        channel.send({"ok": False, "error": str(exc)})
        return 3
    while True:
        request = channel.receive()
        if request is None or request.get("op") == "quit":
            return 0
        op = request.get("op")
        try:
            if op == "hello":
                channel.send(worker.hello())
            elif op == "open":
                worker.open(request)
            else:
                channel.send({"ok": False, "error": f"unknown request {op!r}; expected hello, open or quit"})
        except Exception as exc:  # noqa: BLE001 - a request that fails is answered, the worker serves the next one
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            channel.send({"ok": False, "error": f"{type(exc).__name__}: {exc} ({frame.filename}:{frame.lineno})"})


if __name__ == "__main__":
    sys.exit(main())
