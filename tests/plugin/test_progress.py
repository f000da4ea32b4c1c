"""The per-cell progress lines: status, times, ETA from the session's pace, pretraining announced once."""

from __future__ import annotations

import pytest

from gradeff.pytest.progress import PRETRAINED, STATUS, CellProgress, duration_text, progress_line


class _Reporter:
    """What CellProgress writes through: lines kept, rewritten lines replace the last one."""

    hasmarkup = False

    def __init__(self):
        self.lines: list[tuple[str, str, dict]] = []  # (how, text, markup)

    def write_line(self, line, **markup):
        self.lines.append(("line", line, markup))

    def rewrite(self, line, erase=False, **markup):
        self.lines.append(("rewrite", line, markup))

    def ensure_newline(self):
        self.lines.append(("newline", "", {}))


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _report(cell, when, outcome="passed", duration=1.0, properties=()):
    return pytest.TestReport(nodeid=f"benchmarks/test_grid.py::test_cell[{cell}]", location=("", 0, ""),
                             keywords={}, outcome=outcome, longrepr=None if outcome != "skipped" else ("", 0, "why"),
                             when=when, duration=duration, user_properties=list(properties))


def _run(progress, clock, cell, *, status, seconds, setup=0.5, properties=()):
    clock.now += setup
    progress.pytest_runtest_logreport(_report(cell, "setup", duration=setup))
    clock.now += seconds
    progress.pytest_runtest_logreport(_report(cell, "call", duration=seconds,
                                              properties=((STATUS, status), *properties)))
    progress.pytest_runtest_logreport(_report(cell, "teardown", duration=0.0))


def test_each_cell_gets_a_line_with_its_status_times_and_the_eta():
    """Four cells, each 2.5 s of wall time: after the first the ETA is 3 × 2.5 s; the last says done; an oom
    cell reads oom (the record's status, though its test passed); setup time shows where it matters."""
    reporter, clock = _Reporter(), _Clock()
    progress = CellProgress(reporter, compact=False, clock=clock)
    progress.total = 4
    _run(progress, clock, "vit-adam-standard", status="ok", seconds=2.0)
    _run(progress, clock, "llm-budget20", status="oom", seconds=0.0, setup=2.5)
    _run(progress, clock, "vit-sgd-standard", status="ok", seconds=2.0)
    _run(progress, clock, "vit-sgd-accum", status="ok", seconds=2.0)
    lines = [text for how, text, _ in reporter.lines]
    assert lines[0] == "[1/4]  vit-adam-standard  ok  run 2.0 s  setup 0.5 s  ETA 7.5 s"
    assert lines[1] == "[2/4]  llm-budget20  oom  run 0.0 s  setup 2.5 s  ETA 5.0 s"
    assert lines[3].endswith("done") and len(lines) == 4
    assert reporter.lines[1][2] == {"yellow": True} and reporter.lines[0][2] == {"green": True}


def test_a_skipped_or_broken_setup_finishes_the_cell_and_pretraining_is_announced():
    """A cell skipped at setup counts as finished (no run time); a pretraining rides on the cell that ran it."""
    reporter, clock = _Reporter(), _Clock()
    progress = CellProgress(reporter, compact=False, clock=clock)
    progress.total = 3
    clock.now = 1.0
    progress.pytest_runtest_logreport(_report("vlm-cgd-accum", "setup", outcome="skipped", duration=0.01))
    progress.pytest_runtest_logreport(_report("vlm-cgd-checkpoint", "setup", outcome="failed", duration=0.01))
    _run(progress, clock, "vit_s-lora-standard-dtd", status="ok", seconds=1.0, setup=48.0,
         properties=((PRETRAINED, {"model": "vit_s", "seconds": 47.5}),))
    lines = [text for _, text, _ in reporter.lines]
    assert lines[0].startswith("[1/3]  vlm-cgd-accum  skipped  ETA")
    assert lines[1].startswith("[2/3]  vlm-cgd-checkpoint  error  ETA")
    assert lines[2] == "pretrained vit_s in 47.5 s (once: later cells reuse it; not counted in any cell)"
    assert lines[3] == "[3/3]  vit_s-lora-standard-dtd  ok  run 1.0 s  setup 48.0 s  done"


def test_compact_mode_rewrites_one_line_and_keeps_pretraining():
    """Under xdist the cell lines rewrite one line; a pretraining stays on its own line; the end leaves a newline."""
    reporter, clock = _Reporter(), _Clock()
    progress = CellProgress(reporter, compact=True, clock=clock)
    progress.total = 2
    _run(progress, clock, "a-adam-standard", status="ok", seconds=1.0,
         properties=((PRETRAINED, {"model": "a", "seconds": 3.0}),))
    _run(progress, clock, "a-sgd-standard", status="ok", seconds=1.0)
    progress.pytest_sessionfinish()
    assert [how for how, _, _ in reporter.lines] == ["line", "rewrite", "rewrite", "newline"]
    assert "setup" not in reporter.lines[1][1]


def test_pytest_dot_is_left_out_for_cells_only():
    """A cell's call report prints no dot (its line says it); another test's keeps pytest's letter."""
    progress = CellProgress(_Reporter(), compact=False)
    assert progress.pytest_report_teststatus(_report("x", "call", properties=((STATUS, "ok"),))) == ("passed", "", "")
    assert progress.pytest_report_teststatus(_report("x", "call")) is None


@pytest.mark.parametrize(("seconds", "text"), [(4.24, "4.2 s"), (185, "3 min 05 s"), (3720, "1 h 02 min")])
def test_durations_read_short(seconds, text):
    assert duration_text(seconds) == text


def test_the_line_pads_the_count_to_the_total():
    assert progress_line(7, 120, "c", "ok", seconds=None, setup_seconds=None, eta=None) == "[  7/120]  c  ok  done"
