"""The slowdown plugin the gate's calibration uses makes a call last its factor times as long, and changes nothing
else."""

import time

import pytest

from tests.gate.slowdown_plugin import slowed


def test_a_slowed_call_lasts_factor_times_as_long_and_returns_the_same():
    def work():
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:  # busy, like a training step
            pass
        return 42

    start = time.perf_counter()
    assert slowed(work, 2.0)() == 42
    assert time.perf_counter() - start >= 0.1
    with pytest.raises(ValueError, match="GRADEFF_SLOWDOWN must be >= 1"):
        slowed(work, 0.5)


def test_a_spinning_slowdown_costs_factor_times_the_cpu_and_returns_the_same():
    def work():
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        return 42

    start = time.thread_time()
    assert slowed(work, 1.5, "spin")() == 42
    assert time.thread_time() - start >= 0.075
    with pytest.raises(ValueError, match="GRADEFF_SLOWDOWN_MODE must be one of sleep, spin"):
        slowed(work, 1.5, "nap")
