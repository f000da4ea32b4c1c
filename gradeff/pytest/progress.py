"""A line per finished cell while a grid runs: its status, its times and what is left (the ETA).

A pytest plugin object the gradeff plugin registers on the controlling process. It reads the reports pytest
already sends (under pytest-xdist too): the cell's status and any one-off pretraining ride on the test's
``user_properties`` (set by the ``gradeff_cell`` fixture, :data:`STATUS` and :data:`PRETRAINED`), the setup
time (data preparation, the model's build, a pretraining) is the setup phase's duration. The ETA is the
session's wall time per finished test times the tests left, so parallel workers are counted by themselves.

On a terminal each cell gets its line, written through pytest's own terminal writer (so it never fights
pytest's output; the status coloured), and pytest's dot for it is left out; under pytest-xdist one line is
rewritten in place (the workers' cells finish interleaved). Off when the output is not a terminal (a CI log keeps
pytest's usual lines).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

__all__ = ["PRETRAINED", "STATUS", "CellProgress", "duration_text", "progress_line"]

# The keys the gradeff_cell fixture stores in the test's user_properties (they travel in xdist's reports).
STATUS = "gradeff_status"
PRETRAINED = "gradeff_pretrained"
# pytest's terminal writer's markup names (it drops them itself where the output takes no colour).
_STATUS_STYLES = {"ok": "green", "skipped": "light", "diverged": "yellow", "oom": "yellow", "error": "red",
                  "interrupted": "red", "failed": "red"}


def duration_text(seconds: float) -> str:
    """``4.2 s``, ``3 min 05 s``, ``1 h 02 min``: short, and exact enough for a person waiting."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def progress_line(done: int, total: int, cell: str, status: str, *, seconds: float | None,
                  setup_seconds: float | None, eta: float | None, compact: bool = False) -> str:
    """One finished cell as the progress shows it.

    Args:
        done / total: tests finished so far (this one included) / selected.
        cell: its id (or the test's name).
        status: the record's status (``ok``, ``oom``…), else pytest's outcome.
        seconds: the test's call time (training and evaluation), ``None`` if it did not run.
        setup_seconds: its setup time (data, model, a one-off pretraining), ``None`` if unknown.
        eta: seconds left, ``None`` when nothing is left.
        compact: the one-line form rewritten in place under pytest-xdist (no setup time).

    Returns:
        The line, plain text.
    """
    width = len(str(total))
    parts = [f"[{done:>{width}}/{total}]", cell, status]
    if seconds is not None:
        parts.append(f"run {duration_text(seconds)}")
    if setup_seconds is not None and not compact and setup_seconds >= 0.05:
        parts.append(f"setup {duration_text(setup_seconds)}")
    parts.append("done" if eta is None else f"ETA {duration_text(eta)}")
    return "  ".join(parts)


class CellProgress:
    """The pytest plugin behind the progress lines (see the module's docstring)."""

    def __init__(self, reporter, *, compact: bool, clock=time.monotonic) -> None:
        self.reporter = reporter
        self.compact = compact
        self.clock = clock
        self.started = clock()
        self.total = 0
        self.done = 0
        self._setup: dict[str, float] = {}
        # The cells' lines stand for pytest's file names and dots (a file name would start every line again).
        if hasattr(reporter, "showfspath"):
            reporter.showfspath = False

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: Sequence[str]) -> None:
        self.total = max(self.total, len(ids))  # every worker collects the same tests

    def pytest_report_teststatus(self, report: pytest.TestReport):
        # The cell's own line replaces pytest's dot (an empty letter and word print nothing).
        if _property(report, STATUS) is not None and report.when == "call":
            return report.outcome, "", ""
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            self._setup[report.nodeid] = report.duration
            if report.passed:
                return  # finished when its call reports
        elif report.when != "call":
            return
        self.done += 1
        status = _property(report, STATUS)
        pretrained = _property(report, PRETRAINED)
        if pretrained:
            self._write(f"pretrained {pretrained['model']} in {duration_text(pretrained['seconds'])} (once: later "
                        "cells reuse it; not counted in any cell)", keep=True)
        if status is None and report.when == "setup" and not report.skipped:
            status = "error"
        left = max(self.total - self.done, 0)
        elapsed = self.clock() - self.started
        eta = elapsed / self.done * left if left else None
        cell = _cell_name(report.nodeid)
        line = progress_line(self.done, max(self.total, self.done), cell, status or report.outcome,
                             seconds=report.duration if report.when == "call" else None,
                             setup_seconds=self._setup.pop(report.nodeid, None), eta=eta, compact=self.compact)
        self._write(line, status=status or report.outcome)

    def pytest_sessionfinish(self) -> None:
        if self.compact and self.done:
            self.reporter.ensure_newline()

    def _write(self, line: str, *, status: str = "", keep: bool = False) -> None:
        styled = {_STATUS_STYLES[status]: True} if status in _STATUS_STYLES else {}
        if self.compact and not keep:
            self.reporter.rewrite(line, erase=True, **styled)
            return
        self.reporter.write_line(line, **styled)


def _property(report: pytest.TestReport, key: str):
    return next((value for name, value in report.user_properties if name == key), None)


def _cell_name(nodeid: str) -> str:
    # "benchmarks/test_grid.py::test_cell[vit-adam-accum]" → "vit-adam-accum": the parametrization is the cell.
    name = nodeid.rsplit("::", 1)[-1]
    return name[name.index("[") + 1:-1] if "[" in name and name.endswith("]") else name
