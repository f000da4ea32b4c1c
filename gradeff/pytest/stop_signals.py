"""SIGINT and SIGTERM in a pytest session: the first stops the run as Ctrl-C does, a second ends it at once."""

from __future__ import annotations

import os
import signal
import sys
import threading

from gradeff.cell import stop
from gradeff.pytest.workers import forward_to_workers

__all__ = ["stop_like_ctrl_c"]


def stop_like_ctrl_c(*, controller: bool = False, worker: bool = False) -> None:
    """SIGTERM (what CI timeouts and schedulers send) stops the run as Ctrl-C does; a second signal ends it at once.

    The first SIGINT or SIGTERM raises KeyboardInterrupt in the main thread: the running cell is recorded
    ``interrupted`` (by that signal), the summary is printed and the results file stays whole. A second one, while
    that is happening, exits without a traceback (status 128 + signal number, the shell's convention). A pytest-xdist
    ``controller`` passes the first on to its workers (:mod:`gradeff.pytest.workers`); a ``worker`` takes no later
    interrupt for a second signal (xdist's shutdown interrupts it too), so it is never cut off writing its record.
    """
    received: list[int] = []
    stop.clear()

    def handler(signum, frame):
        received.append(signum)
        if len(received) == 1:
            why = f"signal {signal.Signals(signum).name}"
            stop.request(why)
            if controller:
                forward_to_workers(signum)
            if _safe_to_raise_in(frame):
                raise KeyboardInterrupt(why)
            # Raised inside a __del__, Python would print it as ignored and go on; raised at an instruction without a
            # line number, pytest's report of it fails and the session ends in an internal error (status 1). The next
            # optimizer step, test setup or the session's end raises it instead (gradeff.cell.stop).
            return
        if worker:
            return  # the controller ends its workers (and kills one that does not end)
        sys.stderr.write(f"\ngradeff: second {signal.Signals(signum).name}, stopping now\n")
        sys.stderr.flush()
        os._exit(128 + signum)

    # Only the main thread may install handlers (an embedding program may configure pytest elsewhere).
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, handler)


def _safe_to_raise_in(frame) -> bool:
    """Whether a KeyboardInterrupt raised in the interrupted code reaches pytest whole.

    Not inside an object's ``__del__``, where Python drops an exception; not where a frame of the interrupted stack
    sits at an instruction without a line number (Python 3.11 has them in a ``with`` statement's set-up), where the
    traceback entry's line is None and pytest's rendering of the interruption raises TypeError.
    """
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_lineno is None:
            return False
        frame = frame.f_back
    return True
