"""Host memory of a process (and its children) over a window of time.

RSS is sampled on a background thread because a training step's peak is transient:
reading it once at the end of a window would miss activations freed by the backward
pass. Children are included because data-loader workers are separate processes whose
memory the user pays for all the same.

RSS counts shared pages (libraries, copy-on-write pages of forked workers) once per
process, so the sum over a process tree is an upper bound of its real footprint. That
is the usual trade: exact figures (USS/PSS) cost a walk of ``/proc/<pid>/smaps`` per
process, which is too slow to do ten times a second.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from .sampler import PeriodicSampler

__all__ = ["RamMeter", "RamRecord"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RamRecord:
    """Host memory over one measured window.

    Attributes:
        peak_rss_bytes: Largest sampled RSS of the process plus its children, in bytes;
            ``None`` if no sample could be read (e.g. the process had exited).
        mean_rss_bytes: Mean of the sampled RSS, in bytes; ``None`` likewise.
        peak_system_percent: Largest sampled system-wide memory use, in percent of
            total memory (``psutil.virtual_memory().percent``); ``None`` likewise.
        samples: Number of samples the figures are computed from (at least 2 when the
            process could be read: one at each end of the window).
        duration_s: Length of the window in seconds.
    """

    peak_rss_bytes: int | None
    mean_rss_bytes: float | None
    peak_system_percent: float | None
    samples: int
    duration_s: float


def _proc_children_pids(pid: int) -> list[int] | None:
    """Direct children from ``/proc/<pid>/task/*/children``; ``None`` where the kernel lacks it.

    Reading one small file per thread of this process costs microseconds, where psutil's
    ``children()`` reads the parent of every process on the machine.
    """
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        pids: list[int] = []
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                pids.extend(int(p) for p in handle.read().split())
        return pids
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    """All descendants of ``proc``, by the cheap ``/proc`` route when available."""
    pending = _proc_children_pids(proc.pid)
    if pending is None:
        return proc.children(recursive=True)
    found: list[psutil.Process] = []
    while pending:
        pid = pending.pop()
        try:
            found.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue  # exited between the listing and now: it holds no memory
        pending.extend(_proc_children_pids(pid) or [])
    return found


class RamMeter:
    """Context manager sampling process-tree RSS and system memory use.

    Example::

        with RamMeter(hz=10) as meter:
            train_step()
        print(meter.record.peak_rss_bytes)
    """

    def __init__(self, hz: float = 10.0, pid: int | None = None, *, children_refresh_s: float = 1.0) -> None:
        """Create a meter for a process; nothing is sampled until the window opens.

        Args:
            hz: Sampling frequency in hertz.
            pid: Process to watch, with its children; ``None`` for this process.
            children_refresh_s: How often the list of child processes is rebuilt. Listing
                children reads the parent of every process on the machine (about 1.3 ms
                for 70 processes, tens of ms on a busy server), so it is done at the
                start and end of the window and at most this often in between; reading
                the RSS of known children is cheap and done at every sample.
        """
        # Resolving the process now makes a wrong pid fail here, not mid-benchmark.
        self._proc = psutil.Process(os.getpid() if pid is None else pid)
        self._children_refresh_s = children_refresh_s
        self._children: list[psutil.Process] = []
        self._children_t = float("-inf")
        self._sampler: PeriodicSampler[tuple[int, float]] = PeriodicSampler(self._sample, hz, name="gradeff-ram")
        self._record: RamRecord | None = None

    def __enter__(self) -> RamMeter:
        self._record = None
        self._children_t = float("-inf")  # the first sample lists the children
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._children_t = float("-inf")  # and so does the last
        values = self._sampler.stop()
        duration = self._sampler.duration_s or 0.0
        if not values:
            self._record = RamRecord(
                peak_rss_bytes=None, mean_rss_bytes=None, peak_system_percent=None, samples=0, duration_s=duration
            )
            return
        rss = [v[0] for v in values]
        self._record = RamRecord(
            peak_rss_bytes=max(rss),
            mean_rss_bytes=sum(rss) / len(rss),
            peak_system_percent=max(v[1] for v in values),
            samples=len(values),
            duration_s=duration,
        )

    @property
    def record(self) -> RamRecord:
        """The record of the last completed window; raises ``RuntimeError`` before one."""
        if self._record is None:
            raise RuntimeError("RamMeter.record is available after the with-block exits")
        return self._record

    def _sample(self) -> tuple[int, float] | None:
        now = time.monotonic()
        try:
            rss = self._proc.memory_info().rss
            if now - self._children_t >= self._children_refresh_s:
                self._children = _descendants(self._proc)
                self._children_t = now
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None  # the sampler drops it; the record says None if nothing was read
        for child in self._children:
            # A worker can exit between the listing and the read; it then has no memory.
            try:
                rss += child.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return rss, psutil.virtual_memory().percent
