"""Host memory of a process (and its children) over a window of time.

RSS is sampled on a background thread because a training step's peak is transient:
reading it once at the end of a window would miss activations freed by the backward
pass. Children are included because data-loader workers are separate processes whose
memory the user pays for all the same.

RSS counts shared pages (libraries, copy-on-write pages of forked workers) once per
process, so the sum over a process tree is an upper bound of its real footprint. That
is the usual trade: exact figures (USS/PSS) cost a walk of ``/proc/<pid>/smaps`` per
process, which is too slow to do ten times a second.

The peak of this process itself does not depend on sampling: Linux keeps its high-water
mark (``VmHWM`` in ``/proc/<pid>/status``) and resets it on request (writing ``5`` to
``/proc/<pid>/clear_refs``, Linux 4.0+). The meter resets it when a window or segment
opens and reads it when one closes, so a peak that lasted a microsecond between two
samples is still caught. A side effect: ``getrusage``'s ``ru_maxrss`` of the process
follows the reset. Child processes have their own marks, which peak at other moments, so
with children the tree's peak falls back to the samples (``peak_source="sampled"``). multiprocessing's
resource tracker and fork server, idle helpers that outlive the workers they served, are not counted as children.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import psutil

from .procfs import ProcFile, meminfo_used_percent, statm_rss_bytes
from .sampler import PeriodicSampler
from .window import WindowMeter, max_known, weighted_mean

__all__ = ["RamMeter", "RamRecord", "combine_ram"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RamRecord:
    """Host memory over one measured window.

    Attributes:
        peak_rss_bytes: Peak RSS of the process plus its children, in bytes: the kernel's
            high-water mark of the process or the largest sample, whichever is larger;
            ``None`` if nothing could be read (e.g. the process had exited).
        peak_source: ``"kernel"`` when the peak is the kernel's exact high-water mark (the
            process had no children in the window), else ``"sampled"``: a lower bound,
            which can miss a peak shorter than the sampling period.
        mean_rss_bytes: Mean of the sampled RSS, in bytes; ``None`` likewise.
        peak_system_percent: Largest sampled system-wide memory use, in percent of
            total memory (``psutil.virtual_memory().percent``); ``None`` likewise.
        samples: Number of samples the figures are computed from (at least 2 when the
            process could be read: one at each end of the window).
        duration_s: Length of the window in seconds.
    """

    peak_rss_bytes: int | None
    peak_source: Literal["kernel", "sampled"]
    mean_rss_bytes: float | None
    peak_system_percent: float | None
    samples: int
    duration_s: float


def combine_ram(segments: Sequence[Mapping]) -> dict:
    """Segments' records (as dicts, an epoch's or a cell's epochs) as one record of their whole stretch: peaks are
    maxima, the mean is weighted by samples, and the peak is the kernel's exact one only if every segment's is."""
    samples = [r["samples"] for r in segments]
    return {
        "peak_rss_bytes": max_known(r["peak_rss_bytes"] for r in segments),
        "peak_source": "kernel" if all(r["peak_source"] == "kernel" for r in segments) else "sampled",
        "mean_rss_bytes": weighted_mean([r["mean_rss_bytes"] for r in segments], samples),
        "peak_system_percent": max_known(r["peak_system_percent"] for r in segments),
        "samples": sum(samples),
        "duration_s": sum(r["duration_s"] for r in segments),
    }


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


# Python's own helper processes: multiprocessing starts its resource tracker (and, on request, its fork server)
# the first time a process spawns workers, and they live, idle, until it exits. They are not a cell's work: counted
# as children they would turn every later cell's exact kernel peak into a sampled one for the rest of the session.
_PYTHON_HELPERS = ("from multiprocessing.resource_tracker import main", "from multiprocessing.forkserver import main")


def _is_python_helper(proc: psutil.Process) -> bool:
    try:
        command = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(arg.startswith(_PYTHON_HELPERS) for arg in command)


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    """All descendants of ``proc`` but Python's idle helpers, by the cheap ``/proc`` route when available."""
    pending = _proc_children_pids(proc.pid)
    if pending is None:
        return [child for child in proc.children(recursive=True) if not _is_python_helper(child)]
    found: list[psutil.Process] = []
    while pending:
        pid = pending.pop()
        try:
            child = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue  # exited between the listing and now: it holds no memory
        if not _is_python_helper(child):
            found.append(child)
        pending.extend(_proc_children_pids(pid) or [])
    return found


_VM_HWM = re.compile(rb"^VmHWM:\s+(\d+) kB$", re.MULTILINE)


class _KernelPeak:
    """The kernel's RSS high-water mark of one process, resettable; unreadable → ``None``."""

    def __init__(self, pid: int) -> None:
        self._status = ProcFile(f"/proc/{pid}/status")
        self._clear_refs = ProcFile(f"/proc/{pid}/clear_refs", write=True)
        # Only this process's own mark is reset: another process's is its owner's figure.
        self.available = pid == os.getpid()
        if self.available:
            # Probing resets the mark, which is harmless: every window resets it anyway.
            self.open()
            self.available = self.reset() and self.read() is not None
            self.close()

    def open(self) -> None:
        """Open the files; an unavailable mark stays closed, so its reads give ``None``."""
        if self.available:
            self._status.open()
            self._clear_refs.open()

    def close(self) -> None:
        self._status.close()
        self._clear_refs.close()

    def read(self) -> int | None:
        """Peak RSS in bytes since the last reset."""
        match = _VM_HWM.search(self._status.read() or b"")
        return int(match.group(1)) * 1024 if match else None

    def reset(self) -> bool:
        """Set the mark to the current RSS; ``False`` where the kernel or permissions refuse."""
        return self._clear_refs.write(b"5")


class RamMeter(WindowMeter[RamRecord]):
    """Context manager sampling process-tree RSS and system memory use.

    Example::

        with RamMeter(hz=10) as meter:
            for epoch in range(3):
                with meter.segment() as seg:
                    train_epoch()
                print(seg.record.peak_rss_bytes)
        print(meter.record.peak_rss_bytes)  # the whole window
    """

    def __init__(self, hz: float = 10.0, pid: int | None = None, *, children_refresh_s: float = 1.0) -> None:
        """Create a meter for a process; nothing is sampled until the window opens.

        Args:
            hz: Sampling frequency in hertz.
            pid: Process to watch, with its children; ``None`` for this process.
            children_refresh_s: How often the list of child processes is rebuilt. Listing
                them reads one file per thread of each process in the tree, so it is done
                at the two ends of the window and at most this often in between;
                reading the RSS of known children is cheap and done at every sample.
        """
        super().__init__()
        # Resolving the process now makes a wrong pid fail here, not mid-benchmark.
        self._proc = psutil.Process(os.getpid() if pid is None else pid)
        self._kernel = _KernelPeak(self._proc.pid)
        self._statm = ProcFile(f"/proc/{self._proc.pid}/statm", size=256)
        self._meminfo = ProcFile("/proc/meminfo")
        self._children_refresh_s = children_refresh_s
        self._children: list[psutil.Process] = []
        self._children_t = float("-inf")
        self._sampler: PeriodicSampler[tuple[int, float, int]] = PeriodicSampler(self._sample, hz, name="gradeff-ram")
        # The kernel's mark is reset at every segment: the window's peak is the largest mark
        # read before each reset and at its end.
        self._window_kernel_peak: int | None = None
        self._t0 = 0.0

    def _open_window(self) -> None:
        self._window_kernel_peak = None
        self._kernel.open()
        self._kernel.reset()
        self._statm.open()
        self._meminfo.open()
        self._children_t = float("-inf")  # the first sample lists the children
        self._t0 = time.perf_counter()
        self._sampler.start()

    def _close_window(self) -> RamRecord:
        self._children_t = float("-inf")  # and so does the last
        values = self._sampler.stop()
        self._window_kernel_peak = max_known((self._window_kernel_peak, self._kernel.read()))
        self._kernel.close()
        self._statm.close()
        self._meminfo.close()
        return self._summarize(values, self._window_kernel_peak, time.perf_counter() - self._t0)

    def _begin_segment(self) -> float:
        # The mark so far belongs to the window; the segment starts its own.
        self._window_kernel_peak = max_known((self._window_kernel_peak, self._kernel.read()))
        self._kernel.reset()
        t0 = time.perf_counter()
        # The children list is not rebuilt here: at every epoch's two ends that would cost
        # more than the rest of the sample; the thread refreshes it every children_refresh_s.
        self._sampler.sample_now()
        return t0

    def _end_segment(self, t0: float) -> RamRecord:
        t1 = self._sampler.sample_now()
        kernel_peak = self._kernel.read()
        self._window_kernel_peak = max_known((self._window_kernel_peak, kernel_peak))
        return self._summarize(self._sampler.between(t0, t1), kernel_peak, t1 - t0)

    @staticmethod
    def _summarize(values: list[tuple[int, float, int]], kernel_peak: int | None, duration: float) -> RamRecord:
        if not values:
            return RamRecord(peak_rss_bytes=kernel_peak, peak_source="kernel" if kernel_peak is not None else "sampled",
                             mean_rss_bytes=None, peak_system_percent=None, samples=0, duration_s=duration)
        rss = [v[0] for v in values]
        with_children = any(v[2] for v in values)
        exact = kernel_peak is not None and not with_children
        return RamRecord(
            peak_rss_bytes=max_known((max(rss), kernel_peak)),
            peak_source="kernel" if exact else "sampled",
            mean_rss_bytes=sum(rss) / len(rss),
            peak_system_percent=max(v[1] for v in values),
            samples=len(values),
            duration_s=duration,
        )

    def _sample(self) -> tuple[int, float, int] | None:
        now = time.monotonic()
        try:
            rss = statm_rss_bytes(self._statm.read())
            if rss is None:  # no /proc, or the process is gone: psutil knows which
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
        percent = meminfo_used_percent(self._meminfo.read())
        if percent is None:
            percent = psutil.virtual_memory().percent
        return rss, percent, len(self._children)
