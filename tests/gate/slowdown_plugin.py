"""A pytest plugin that makes every optimizer step of a run slower by a known factor.

Load it into a grid run to produce a real slowdown for the regression gate to catch::

    GRADEFF_SLOWDOWN=2 PYTHONPATH=tests/gate .venv/bin/python -m pytest benchmarks/test_grid.py \\
        -p slowdown_plugin ...

Each call of :func:`gradeff.cell.loop.optimizer_step` (the one step path of every epoch) is timed and
followed by a sleep of ``(factor - 1)`` times its duration, so each step, and hence each epoch,
takes ``factor`` times as long while computing exactly the same numbers. Unset, empty or ``1``:
the plugin changes nothing.

``GRADEFF_SLOWDOWN_MODE=spin`` makes the extra time work instead of waiting: the step's thread spins until it has
spent ``(factor - 1)`` times the step's own CPU time more, so the step costs ``factor`` times the CPU, as code doing
more work would, and a CPU clock (``gradeff ab --clock cpu``) sees it as well as the wall clock does.
"""

from __future__ import annotations

import functools
import os
import time

ENV = "GRADEFF_SLOWDOWN"
MODE_ENV = "GRADEFF_SLOWDOWN_MODE"
MODES = ("sleep", "spin")


def slowed(step, factor: float, mode: str = "sleep"):
    """``step`` wrapped so that each call lasts ``factor`` times its own duration (``sleep``), or costs ``factor``
    times its own CPU time (``spin``)."""
    if factor < 1:
        raise ValueError(f"{ENV} must be >= 1, got {factor}")
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, got {mode!r}")

    @functools.wraps(step)
    def sleeping(*args, **kwargs):
        start = time.perf_counter()
        result = step(*args, **kwargs)
        time.sleep((factor - 1) * (time.perf_counter() - start))
        return result

    @functools.wraps(step)
    def spinning(*args, **kwargs):
        start = time.thread_time()
        result = step(*args, **kwargs)
        spent = time.thread_time() - start
        end = time.thread_time() + (factor - 1) * spent
        while time.thread_time() < end:
            pass
        return result

    return spinning if mode == "spin" else sleeping


def install(factor: float, mode: str = "sleep") -> None:
    """Slow down ``gradeff.cell.loop.optimizer_step`` (which ``train_epoch`` calls) by ``factor``."""
    import gradeff.cell.loop

    gradeff.cell.loop.optimizer_step = slowed(gradeff.cell.loop.optimizer_step, factor, mode)


def pytest_configure(config) -> None:
    factor = float(os.environ.get(ENV) or 1)
    if factor != 1:
        install(factor, os.environ.get(MODE_ENV) or "sleep")
