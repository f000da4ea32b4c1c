"""Fault injection: kill, interrupt, out of memory, bad results lines — nothing finished is lost."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from gradeff.cell.config import RunConfig
from gradeff.cell.run import run_cell
from gradeff.pytest.stop_signals import _safe_to_raise_in
from gradeff.records.store import read_records
from gradeff.studies.grid import Cell


def _start_grid(directory: Path, results: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "gradeff.pytest_plugin", "-p", "no:cacheprovider", "-q",
         f"--gradeff-results={results}", *args, str(directory / "test_grid.py")],
        cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # A session of its own, so the signal reaches pytest alone and not this test run.
        start_new_session=True,
    )


def _wait_for_records(path: Path, count: int, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {count} records:\n{proc.stdout.read()}")
        time.sleep(0.05)
    raise AssertionError(f"no {count} records after {timeout} s")


@pytest.mark.slow
def test_sigkill_then_resume_records_every_cell_exactly_once(grid_pytester):
    """SIGKILL mid-grid, then --gradeff-resume: each of the 3 cells has exactly one final record."""
    results = grid_pytester.path / "r.jsonl"
    args = ("-k", "vit and sgd", "--gradeff-epochs", "3")
    proc = _start_grid(grid_pytester.path, results, *args)
    _wait_for_records(results, 1, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = Counter(r.cell for r in read_records(results))
    assert 1 <= sum(before.values()) < 3
    resumed = _start_grid(grid_pytester.path, results, *args, "--gradeff-resume", "-rs")
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output
    assert "already recorded as ok" in output
    after = Counter(r.cell for r in read_records(results))
    assert after == Counter({"vit-sgd-standard": 1, "vit-sgd-checkpoint": 1, "vit-sgd-accum": 1})


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_records_the_running_cell_as_interrupted(grid_pytester, signum):
    """Ctrl-C or SIGTERM mid-cell: that cell is recorded as interrupted, the summary prints, the file stays valid."""
    results = grid_pytester.path / "r.jsonl"
    proc = _start_grid(grid_pytester.path, results, "-k", "vit and adam and not adamw and main",
                       "--gradeff-epochs", "10")
    _wait_for_records(results, 1, proc)
    time.sleep(1.0)  # well inside the second cell's 10 epochs (24 steps of 32 each at tiny)
    os.killpg(proc.pid, signum)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    records = list(read_records(results))  # raises on any broken line
    assert [r.status for r in records] == ["ok", "interrupted"]
    assert records[1].failed_step is not None and records[1].detail.startswith("interrupted")
    assert "gradeff: 2 cells" in output


def test_a_second_signal_stops_at_once_without_a_traceback(grid_pytester):
    """Two signals in a row: the run exits with 128 + the signal's number, no traceback on the way out."""
    results = grid_pytester.path / "r.jsonl"
    proc = _start_grid(grid_pytester.path, results, "-k", "vit and adam and not adamw and main",
                       "--gradeff-epochs", "10")
    _wait_for_records(results, 1, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode in (128 + signal.SIGTERM, pytest.ExitCode.INTERRUPTED), output
    assert "Traceback" not in output
    list(read_records(results))  # whatever was written is whole


def test_a_signal_that_lands_inside_a_finalizer_still_stops_the_run(pytester):
    """Python drops an exception raised in ``__del__``: the stop is raised again at the next test's setup, and the
    session exits as interrupted instead of running on to status 0."""
    pytester.makepyfile("""
        import os, signal, time

        class Finalised:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler runs here, inside __del__

        def test_a():
            Finalised()

        def test_b():
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.assert_outcomes(passed=1)  # test_b never started
    assert "Exception ignored" not in result.stdout.str()


def test_a_requested_stop_interrupts_the_cell_at_its_next_step(monkeypatch):
    """A stop whose KeyboardInterrupt was swallowed: the running cell ends interrupted at its next optimizer step."""
    from gradeff.cell import stop

    monkeypatch.setattr(stop, "reason", "signal SIGTERM")
    record = run_cell(Cell("llm", "sgd", "standard"), RunConfig(epochs=1, device="cpu"))
    assert record.status == "interrupted" and record.failed_step == 1


def test_memory_budget_turns_a_cell_into_oom():
    """Under a budget below its predicted peak a cell ends oom at step 1, with the numbers; above it, ok."""
    tight = run_cell(Cell("llm", "adam", "standard"), RunConfig(epochs=1, device="cpu", memory_budget=10**6))
    assert tight.status == "oom" and tight.failed_step == 1 and "exceeds the memory budget of 1000000 B" in tight.detail
    assert tight.plan == {}  # refused before any plan was made
    roomy = run_cell(Cell("llm", "adam", "standard"), RunConfig(epochs=1, device="cpu", memory_budget=10**9))
    assert roomy.status == "ok"


def test_memory_budget_separates_checkpointing_from_standard():
    """A budget between their measured peaks fits the checkpointed cell and not the standard one."""
    standard = run_cell(Cell("llm", "sgd", "standard"), RunConfig(epochs=1, device="cpu"))
    checkpoint = run_cell(Cell("llm", "sgd", "checkpoint"), RunConfig(epochs=1, device="cpu"))
    budget = (standard.meters["memory"]["peak_bytes"] + checkpoint.meters["memory"]["peak_bytes"]) // 2
    config = RunConfig(epochs=1, device="cpu", memory_budget=budget)
    assert run_cell(Cell("llm", "sgd", "standard"), config).status == "oom"
    assert run_cell(Cell("llm", "sgd", "checkpoint"), config).status == "ok"


def test_runs_are_offline_by_default(grid_pytester):
    """The plugin switches the Hugging Face hub off unless --gradeff-allow-hub is given."""
    grid_pytester.makepyfile(test_env="import os\n\ndef test_offline():\n"
                                      "    assert os.environ['HF_HUB_OFFLINE'] == '1'\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "gradeff.pytest_plugin", "-q", "test_env.py"],
                          cwd=grid_pytester.path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def _frames(*entries: tuple[str, int | None]):
    """A fake stack, innermost first: (function name, current line) per frame."""
    frame = None
    for name, line in reversed(entries):
        frame = SimpleNamespace(f_code=SimpleNamespace(co_name=name), f_lineno=line, f_back=frame)
    return frame


@pytest.mark.parametrize(("stack", "safe"), [
    ([("step", 12), ("run", 40), ("main", 3)], True),
    ([("close", 5), ("__del__", 9), ("run", 40)], False),      # an exception raised in a finalizer is dropped
    ([("__enter__", None), ("setup", 870), ("main", 3)], False),  # pytest cannot render a line of None
    ([("step", 12), ("run", None)], False),
    ([], True),
])
def test_the_first_signal_raises_only_where_the_interruption_reaches_pytest_whole(stack, safe):
    assert _safe_to_raise_in(_frames(*stack)) is safe
