"""A stop the user asked for (Ctrl-C, SIGTERM) that no finalizer can swallow.

The signal handler raises ``KeyboardInterrupt`` where the main thread happens to be. When that is inside an
object's ``__del__`` (or a weakref callback), Python prints the exception as "ignored" and carries on, so a
SIGTERM from a CI timeout could be lost and the run go on to the end with status 0. The handler therefore
also records the request here, and the places that start work — each optimizer step, each test's setup —
raise it again; the session's exit status says it was interrupted even if every raise was swallowed.
"""

from __future__ import annotations

__all__ = ["clear", "interruption", "raise_if_requested", "reason", "request"]

# Why the run was asked to stop ("signal SIGTERM"), or None. A plain module global: the training loop reads it
# once per optimizer step, which must cost next to nothing.
reason: str | None = None


def request(why: str) -> None:
    """Remember that the run was asked to stop."""
    global reason
    reason = why


def clear() -> None:
    """Forget an earlier request (a new session in the same process starts afresh)."""
    global reason
    reason = None


def interruption() -> str:
    """A record's ``detail`` for a cell stopped mid-way: what stopped it (Ctrl-C, or the signal a CI timeout or a
    scheduler sent)."""
    if reason is None or reason == "signal SIGINT":
        return "interrupted by the user (Ctrl-C)"
    signal = reason.removeprefix("signal ")
    return f"interrupted by {signal} (a CI timeout, a scheduler or kill stopping the run)"


def raise_if_requested() -> None:
    """Raise ``KeyboardInterrupt`` if a stop was requested."""
    if reason is not None:
        raise KeyboardInterrupt(reason)
