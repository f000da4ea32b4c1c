"""What the RAM, GPU and energy meters share: a window with a record, cut into segments.

A meter's window (``with meter:``) runs for a whole cell so that its sampling thread and device
handles are set up once; each epoch is a segment of that window (``with meter.segment():``)
with a record of its own. Opening and closing a segment costs a few synchronous reads, where
opening a window starts a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from .sampler import PeriodicSampler

__all__ = ["Segment", "WindowMeter", "max_known", "weighted_mean"]

R = TypeVar("R")
N = TypeVar("N", int, float)


def max_known(values: Iterable[N | None]) -> N | None:
    """The largest value that is not ``None``; ``None`` if there is none."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def weighted_mean(values: Iterable[float | None], weights: Iterable[int]) -> float | None:
    """The mean of the known values, each weighted by its count of samples; ``None`` if no known value has one."""
    pairs = [(v, w) for v, w in zip(values, weights) if v is not None and w]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


class Segment(Generic[R]):
    """Context manager over one stretch of a meter's open window.

    Args:
        begin: called on entry; returns what ``end`` needs to describe the stretch.
        end: called on exit with ``begin``'s result; returns the stretch's record.
    """

    def __init__(self, begin: Callable[[], Any], end: Callable[[Any], R]) -> None:
        self._begin = begin
        self._end = end
        self._token: Any = None
        self._record: R | None = None

    def __enter__(self) -> Segment[R]:
        self._record = None
        self._token = self._begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self._record = self._end(self._token)

    @property
    def record(self) -> R:
        """The stretch's record; raises ``RuntimeError`` before the segment has closed."""
        if self._record is None:
            raise RuntimeError("a segment's record is available after its with-block exits")
        return self._record


class WindowMeter(Generic[R]):
    """Base of a meter: ``with meter:`` opens a window whose record covers all of it.

    A subclass implements ``_open_window()``, ``_close_window() -> R`` (the window's record),
    ``_begin_segment()`` and ``_end_segment(token) -> R``, and keeps its background sampler,
    if it runs one, in ``_sampler``.
    """

    def __init__(self) -> None:
        self._record: R | None = None
        self._open = False
        self._sampler: PeriodicSampler[Any] | None = None

    def __enter__(self) -> WindowMeter[R]:
        self._record = None
        self._open_window()
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._open = False
        self._record = self._close_window()

    def segment(self) -> Segment[R]:
        """A stretch of the open window with its own record (e.g. one epoch)."""
        return Segment(self._checked_begin, self._end_segment)

    @property
    def record(self) -> R:
        """The record of the last completed window; raises ``RuntimeError`` before one."""
        if self._record is None:
            raise RuntimeError(f"{type(self).__name__}.record is available after the with-block exits")
        return self._record

    @property
    def sampler_cpu_s(self) -> float:
        """CPU seconds the meter's sampling thread has spent in the current (or last) window."""
        return self._sampler.thread_cpu_s if self._sampler is not None else 0.0

    def _checked_begin(self) -> Any:
        if not self._open:
            raise RuntimeError(f"{type(self).__name__}.segment() needs an open window: use it inside `with meter:`")
        return self._begin_segment()

    def _open_window(self) -> None:
        raise NotImplementedError

    def _close_window(self) -> R:
        raise NotImplementedError

    def _begin_segment(self) -> Any:
        raise NotImplementedError

    def _end_segment(self, token: Any) -> R:
        raise NotImplementedError
