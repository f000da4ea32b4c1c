"""A pytest plugin that makes every optimizer step of a run slower by a known factor.

Load it into a grid run to produce a real slowdown for the regression gate to catch::

    GRADEFF_SLOWDOWN=2 PYTHONPATH=tests/gate .venv/bin/python -m pytest benchmarks/test_grid.py \\
        -p slowdown_plugin ...

Each call of :func:`gradeff.cell.loop.optimizer_step` (the one step path of every epoch) is timed and
followed by a sleep of ``(factor - 1)`` times its duration, so each step, and hence each epoch,
takes ``factor`` times as long while computing exactly the same numbers. Unset, empty or ``1``:
the plugin changes nothing.
"""

from __future__ import annotations

import functools
import os
import time

ENV = "GRADEFF_SLOWDOWN"


def slowed(step, factor: float):
    """``step`` wrapped so that each call lasts ``factor`` times its own duration."""
    if factor < 1:
        raise ValueError(f"{ENV} must be >= 1, got {factor}")

    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = step(*args, **kwargs)
        time.sleep((factor - 1) * (time.perf_counter() - start))
        return result

    return wrapper


def install(factor: float) -> None:
    """Slow down ``gradeff.cell.loop.optimizer_step`` (which ``train_epoch`` calls) by ``factor``."""
    import gradeff.cell.loop

    gradeff.cell.loop.optimizer_step = slowed(gradeff.cell.loop.optimizer_step, factor)


def pytest_configure(config) -> None:
    factor = float(os.environ.get(ENV) or 1)
    if factor != 1:
        install(factor)
