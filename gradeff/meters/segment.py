"""One stretch of an open meter window, with a record of its own.

A meter's window runs for a whole cell so that its sampling thread and device handles are set
up once; each epoch is a segment of that window. Opening and closing a segment costs a few
synchronous reads, where opening a window starts a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Segment"]

R = TypeVar("R")


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
