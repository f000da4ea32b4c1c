"""Tests of the background periodic sampler."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from gradeff.meters.sampler import PeriodicSampler

# Their figures are times and meter readings: run while no other test does (tests/conftest.py).
pytestmark = pytest.mark.serial


def test_short_window_still_has_two_samples():
    """A window far shorter than one period keeps the start and the stop sample."""
    counter = itertools.count()
    sampler = PeriodicSampler(lambda: next(counter), hz=0.5)
    sampler.start()
    values = sampler.stop()
    assert values == [0, 1]
    assert sampler.duration_s is not None and sampler.duration_s < 1.0


def test_samples_accumulate_at_the_requested_rate():
    """At 50 Hz a 0.3 s window yields more than the two end samples, in order."""
    counter = itertools.count()
    with PeriodicSampler(lambda: next(counter), hz=50) as sampler:
        time.sleep(0.3)
    values = sampler.samples
    # ~16 expected; a loaded 2-core machine may miss some periods, never most of them.
    assert len(values) >= 6
    assert values == sorted(values)
    assert sampler.timestamps == sorted(sampler.timestamps)
    assert len(sampler.timestamps) == len(values)


def test_stop_returns_promptly_mid_period():
    """stop() wakes the thread instead of waiting out a 2 s period."""
    sampler = PeriodicSampler(lambda: 1, hz=0.5).start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    sampler.stop()
    assert time.perf_counter() - t0 < 0.5
    assert not sampler.running


def test_thread_is_a_daemon_and_ends_on_stop():
    """The sampling thread never keeps the interpreter alive and is gone after stop()."""
    sampler = PeriodicSampler(lambda: 1, hz=10).start()
    daemons = [t for t in threading.enumerate() if t.name == "gradeff-sampler"]
    assert daemons and all(t.daemon for t in daemons)
    sampler.stop()
    assert not any(t.name == "gradeff-sampler" and t.is_alive() for t in threading.enumerate())


def test_errors_and_none_are_dropped_not_raised():
    """A raising fn is counted in errors, a None reading is skipped, the rest is kept."""
    calls = itertools.count()

    def flaky():
        i = next(calls)
        if i == 1:
            raise OSError("torn read")
        return None if i == 2 else i

    sampler = PeriodicSampler(flaky, hz=0.5)
    sampler.start()  # call 0 -> kept
    sampler._take()  # call 1 -> error
    sampler._take()  # call 2 -> None
    values = sampler.stop()  # call 3 -> kept
    assert values == [0, 3]
    assert sampler.errors == 1
    assert isinstance(sampler.last_error, OSError)


def test_restart_clears_previous_samples():
    """A second start begins a fresh window."""
    counter = itertools.count()
    sampler = PeriodicSampler(lambda: next(counter), hz=0.5)
    sampler.start()
    sampler.stop()
    sampler.start()
    assert sampler.stop() == [2, 3]


@pytest.mark.parametrize("hz", [0, -1.0, float("inf"), float("nan")])
def test_invalid_frequency_is_rejected(hz):
    """Zero, negative, infinite and NaN frequencies raise ValueError."""
    with pytest.raises(ValueError):
        PeriodicSampler(lambda: 1, hz=hz)


def test_misuse_raises():
    """Stopping an unstarted sampler or starting a running one raises RuntimeError."""
    sampler = PeriodicSampler(lambda: 1, hz=1)
    with pytest.raises(RuntimeError):
        sampler.stop()
    sampler.start()
    try:
        with pytest.raises(RuntimeError):
            sampler.start()
    finally:
        sampler.stop()


def test_sample_now_files_boundaries_that_between_selects():
    """Synchronous samples mark the ends of stretches; between() returns each stretch, ends included."""
    counter = itertools.count()
    sampler = PeriodicSampler(lambda: next(counter), hz=0.5).start()  # 0
    try:
        t1 = sampler.sample_now()  # 1
        t2 = sampler.sample_now()  # 2
        t3 = sampler.sample_now()  # 3
        assert sampler.between(t3 + 1e-9, time.perf_counter()) == []
    finally:
        sampler.stop()  # 4
    assert sampler.between(t1, t2) == [1, 2]
    assert sampler.between(t2, t3) == [2, 3]
    assert sampler.samples == [0, 1, 2, 3, 4] and sampler.timestamps == sorted(sampler.timestamps)


def test_sample_now_needs_a_running_sampler():
    """Outside start()/stop() a synchronous sample is a usage error, not a silent no-op."""
    sampler = PeriodicSampler(lambda: 1, hz=1)
    with pytest.raises(RuntimeError, match="not running"):
        sampler.sample_now()


def _spin(seconds: float) -> int:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return 1


def test_thread_cpu_time_counts_background_samples_only():
    """The thread's CPU time grows with its samples; synchronous samples are the caller's cost."""
    sampler = PeriodicSampler(lambda: _spin(0.002), hz=0.5).start()
    for _ in range(5):
        sampler.sample_now()
    sampler.stop()
    assert sampler.thread_cpu_s == 0.0

    with PeriodicSampler(lambda: _spin(0.002), hz=50) as sampler:
        time.sleep(0.3)
    background = len(sampler.samples) - 2
    assert background >= 3
    assert 0.002 * background <= sampler.thread_cpu_s < 0.002 * background + 0.05
