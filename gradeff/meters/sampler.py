"""A background thread that calls a function periodically and keeps what it returns.

Every meter that watches a quantity over time (RSS, GPU utilization, an energy
counter) needs the same loop, so it lives here once. The loop waits on a
``threading.Event`` rather than ``time.sleep`` so that ``stop()`` wakes the thread at
once instead of after up to one full period: a 1 Hz sampler must not add a second to
every measured window.

One sample is taken synchronously at ``start()`` and one at ``stop()``, so a window
shorter than one period still yields two samples (its two ends), and the last sample
describes the state at the end of the window, not up to one period earlier.

A window can be cut into stretches without stopping the thread: ``sample_now()`` takes a
synchronous sample at a boundary and ``between(t0, t1)`` returns the samples of one
stretch. Starting a thread costs far more than one sample, so a meter that reports per
epoch keeps one thread for the whole cell and marks the epochs' ends this way.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PeriodicSampler"]

T = TypeVar("T")


class PeriodicSampler(Generic[T]):
    """Call ``fn()`` every ``1 / hz`` seconds on a daemon thread and collect the results.

    ``fn`` should be cheap and thread-safe with respect to the code being measured. A
    sample for which ``fn`` raises is dropped and counted in ``errors`` (the exception
    is kept in ``last_error``): a glitch in a measurement must not kill the thread, nor
    the benchmark that is being measured. ``fn`` may also return ``None`` to signal "no
    reading"; such samples are dropped too, without counting as errors.

    Usable as a context manager (``with PeriodicSampler(fn, 10) as s: ...``) or through
    ``start()`` / ``stop()``. A sampler may be started again after it has stopped; each
    start clears the previous samples.
    """

    def __init__(self, fn: Callable[[], T | None], hz: float, *, name: str = "gradeff-sampler") -> None:
        """Create a stopped sampler.

        Args:
            fn: Function taking no argument that returns one sample, or ``None`` for
                no reading.
            hz: Sampling frequency in hertz; must be positive and finite.
            name: Name of the thread, which shows up in debuggers and ``py-spy``.
        """
        if not (hz > 0 and hz != float("inf")):
            raise ValueError(f"hz must be positive and finite, got {hz!r}")
        self._fn = fn
        self.period_s = 1.0 / hz
        self._name = name
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._values: list[T] = []
        self._times: list[float] = []
        self._t_start: float | None = None
        self._t_stop: float | None = None
        self.errors = 0
        self.last_error: BaseException | None = None
        # CPU seconds the background thread spent in ``fn``: what sampling costs the
        # measured code, whose threads it competes with for cores.
        self._thread_cpu_s = 0.0

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> PeriodicSampler[T]:
        """Take the first sample now and start the sampling thread.

        Returns:
            The sampler itself, so ``s = PeriodicSampler(fn, hz).start()`` works.
        """
        if self.running:
            raise RuntimeError("sampler already running")
        with self._lock:
            self._values, self._times = [], []
        self.errors, self.last_error = 0, None
        self._thread_cpu_s = 0.0
        self._stop_event.clear()
        self._t_start, self._t_stop = time.perf_counter(), None
        self._take()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[T]:
        """Stop the thread, take the last sample and return all samples.

        Returns as soon as the thread has finished any call of ``fn`` in progress; it
        does not wait for the rest of the current period.

        Returns:
            The samples in the order they were taken (a copy).
        """
        thread = self._thread
        if thread is None:
            raise RuntimeError("sampler was not started")
        self._stop_event.set()
        thread.join()
        self._thread = None
        self._take()
        self._t_stop = time.perf_counter()
        return self.samples

    def sample_now(self) -> float:
        """Take one sample synchronously, in the calling thread, while the window is open.

        Returns:
            The ``time.perf_counter()`` timestamp the sample is (or, if it was dropped, would
            have been) filed under; use it as a bound for :meth:`between`.
        """
        if self._thread is None:
            raise RuntimeError("sampler is not running")
        return self._take()

    def between(self, t0: float, t1: float) -> list[T]:
        """The samples filed at timestamps ``t0 <= t <= t1``, oldest first."""
        with self._lock:
            lo = bisect.bisect_left(self._times, t0)
            hi = bisect.bisect_right(self._times, t1)
            return self._values[lo:hi]

    def __enter__(self) -> PeriodicSampler[T]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- results -----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the sampling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def samples(self) -> list[T]:
        """A copy of the samples collected so far, oldest first."""
        with self._lock:
            return list(self._values)

    @property
    def timestamps(self) -> list[float]:
        """``time.perf_counter()`` when each kept sample was filed, aligned with ``samples``."""
        with self._lock:
            return list(self._times)

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the background thread has spent taking samples in this window.

        Synchronous samples (start, stop, ``sample_now``) are not included: they cost the
        calling thread, which can time them itself.
        """
        return self._thread_cpu_s

    @property
    def duration_s(self) -> float | None:
        """Seconds from ``start()`` to ``stop()`` (to now while running); ``None`` before start."""
        if self._t_start is None:
            return None
        end = self._t_stop if self._t_stop is not None else time.perf_counter()
        return end - self._t_start

    # -- internals ---------------------------------------------------------------------

    def _run(self) -> None:
        # wait() returns True as soon as stop() sets the event, which ends the loop
        # without taking a sample; stop() takes the final one itself.
        while not self._stop_event.wait(self.period_s):
            cpu0 = time.thread_time()
            self._take()
            self._thread_cpu_s += time.thread_time() - cpu0

    def _take(self) -> float:
        try:
            value = self._fn()
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            self.errors += 1
            self.last_error = exc
            return time.perf_counter()
        # The timestamp is taken under the lock, once the reading is done, so that samples
        # from the thread and from ``sample_now`` are filed in time order: ``between``
        # relies on it.
        with self._lock:
            t = time.perf_counter()
            if value is not None:
                self._values.append(value)
                self._times.append(t)
        return t
