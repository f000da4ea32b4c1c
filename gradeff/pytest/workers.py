"""pytest-xdist's workers stopped with their controller: a SIGTERM to the controller reaches the cells in flight.

Ctrl-C in a terminal reaches every process of the foreground group, workers included, and each records its running
cell ``interrupted``. A SIGTERM (a CI timeout, a scheduler, ``kill``) reaches the controller only: its workers would
be torn down by xdist's shutdown, and a cell busy in a long kernel until then was killed with no record. The
controller therefore passes the signal on to its workers (its child processes) at once; a SIGINT is passed on only
where no terminal sent it to the whole group already. Each worker then records its cell as interrupted by that
signal and ends; a later interrupt of a worker (xdist's own shutdown interrupts its main thread) is not taken for a
second signal, so a worker is never cut off while it writes its record.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

__all__ = ["forward_to_workers", "sent_by_terminal"]


def sent_by_terminal(signum: int) -> bool:
    """Whether ``signum`` is a Ctrl-C a terminal sent to this process's whole foreground group (workers included)."""
    if signum != signal.SIGINT:
        return False
    try:
        return os.isatty(sys.stdin.fileno()) and os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):  # no terminal, or stdin replaced (captured, closed)
        return False


def forward_to_workers(signum: int) -> list[int]:
    """Send ``signum`` to this controller's workers (its child processes), unless a terminal sent it to them already.

    Returns:
        The process ids signalled.
    """
    if sent_by_terminal(signum):
        return []
    import psutil

    signalled = []
    for child in psutil.Process().children(recursive=False):
        with contextlib.suppress(psutil.Error):  # a worker that has just exited
            child.send_signal(signum)
            signalled.append(child.pid)
    return signalled
