"""GPU utilization, memory and power over a window of time, from NVML and torch.

Two sources, because they answer different questions:

* NVML (the library behind ``nvidia-smi``) sees the whole device: utilization, memory
  used by every process and context, board power. It is sampled on a background
  thread.
* torch's caching allocator knows what *this* process asked for: the peak of live
  tensors (``max_memory_allocated``) and of memory held by the cache
  (``max_memory_reserved``). Its peaks are reset when the window opens, so they are
  exact and need no sampling.

On a machine without a CUDA device every GPU field is ``None``. That gate matters: a
CPU-only torch answers ``torch.cuda.max_memory_allocated() == 0``, a plausible-looking
figure for a measurement that never happened.

CUDA work is asynchronous: synchronize the device before leaving the ``with`` block
if the window must include all the work queued in it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ._nvml import close_nvml, device_name, load_nvml, open_nvml_device, torch_device_uuid
from .sampler import PeriodicSampler
from .window import WindowMeter, max_known, weighted_mean

__all__ = ["NVML_UTILIZATION_WINDOW_S", "AllocatorStats", "GpuMeter", "GpuRecord", "combine_gpu"]

# NVML reports utilization as the fraction of time a kernel ran over a trailing sample
# period of between 1/6 s and 1 s depending on the product (nvmlDeviceGetUtilizationRates
# documentation). A window shorter than the longest period can be dominated by work
# done before it opened, so such a record is flagged.
NVML_UTILIZATION_WINDOW_S = 1.0


class AllocatorStats(Protocol):
    """The part of ``torch.cuda`` the meter reads; tests substitute a fake."""

    def reset_peak_memory_stats(self, device: int) -> None: ...

    def max_memory_allocated(self, device: int) -> int: ...

    def max_memory_reserved(self, device: int) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuRecord:
    """One GPU over one measured window.

    Every measured field is ``None`` when the quantity could not be read: no CUDA
    device, no NVML library, or a query the GPU does not support.

    Attributes:
        available: Whether a CUDA device was present when the meter was created.
        device_name: Name of the device (from NVML, else from torch).
        util_mean_percent: Mean of NVML's sampled GPU utilization, in percent.
        util_max_percent: Largest sampled utilization, in percent.
        mem_used_peak_bytes: Largest sampled device memory in use (all processes), bytes.
        power_mean_w: Mean of the sampled board power draw, in watts.
        alloc_peak_bytes: Peak of memory in live tensors of this process (torch
            ``max_memory_allocated``), bytes.
        reserved_peak_bytes: Peak of memory held by torch's caching allocator
            (``max_memory_reserved``), bytes.
        samples: Number of NVML samples the utilization/memory/power figures come from
            (0 when NVML was not read).
        short_window: Whether the window was shorter than NVML's utilization averaging
            period (:data:`NVML_UTILIZATION_WINDOW_S`), which makes the utilization
            figures unreliable.
        duration_s: Length of the window in seconds.
    """

    available: bool
    device_name: str | None
    util_mean_percent: float | None
    util_max_percent: float | None
    mem_used_peak_bytes: int | None
    power_mean_w: float | None
    alloc_peak_bytes: int | None
    reserved_peak_bytes: int | None
    samples: int
    short_window: bool
    duration_s: float


def combine_gpu(segments: Sequence[Mapping]) -> dict:
    """Segments' records (as dicts) as one record of their whole stretch: peaks are maxima, means are weighted by
    samples, and the stretch is short when the device was read for less than NVML's averaging period in all."""
    samples = [g["samples"] for g in segments]
    duration = sum(g["duration_s"] for g in segments)
    return {
        "available": all(g["available"] for g in segments),
        "device_name": segments[0]["device_name"],
        "util_mean_percent": weighted_mean([g["util_mean_percent"] for g in segments], samples),
        "util_max_percent": max_known(g["util_max_percent"] for g in segments),
        "mem_used_peak_bytes": max_known(g["mem_used_peak_bytes"] for g in segments),
        "power_mean_w": weighted_mean([g["power_mean_w"] for g in segments], samples),
        "alloc_peak_bytes": max_known(g["alloc_peak_bytes"] for g in segments),
        "reserved_peak_bytes": max_known(g["reserved_peak_bytes"] for g in segments),
        "samples": sum(samples),
        # NVML averages utilisation over up to a second: shorter windows are unreliable.
        "short_window": bool(segments[0]["available"]) and duration < NVML_UTILIZATION_WINDOW_S,
        "duration_s": duration,
    }


def _max_pairs(a: tuple[int | None, int | None], b: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
    """Element-wise maximum of two (allocated, reserved) peak pairs; ``None`` is unknown."""
    return max_known((a[0], b[0])), max_known((a[1], b[1]))


# One NVML sample: (utilization %, memory used bytes, power W), each None if unreadable.
_Sample = tuple[float | None, int | None, float | None]


class GpuMeter(WindowMeter[GpuRecord]):
    """Context manager measuring one CUDA device over a window.

    Example::

        with GpuMeter(device_index=0) as meter:
            with meter.segment() as epoch:  # optional: a stretch with its own record
                train_epoch()
                torch.cuda.synchronize()
            print(epoch.record.alloc_peak_bytes)
        print(meter.record.alloc_peak_bytes)  # the whole window
    """

    def __init__(
        self,
        device_index: int = 0,
        hz: float = 10.0,
        nvml: Any = None,
        *,
        cuda_available: Callable[[], bool] = torch.cuda.is_available,
        allocator: AllocatorStats | None = None,
    ) -> None:
        """Probe the device; nothing is sampled until the window opens.

        Args:
            device_index: torch index of the CUDA device to watch.
            hz: NVML sampling frequency in hertz.
            nvml: Object with the ``pynvml`` functions (tests pass a fake); ``None`` to
                import ``pynvml`` if the device is present.
            cuda_available: Whether a CUDA device is present; injectable so tests can
                pretend one is.
            allocator: Source of the torch allocator peaks, ``torch.cuda`` by default;
                injectable so tests can run without a device.
        """
        super().__init__()
        self.device_index = device_index
        self._hz = hz
        self._handle: Any = None
        self._peaks_reset = False
        # The allocator peaks are reset at every segment: the window's are the largest read
        # before each reset and at its end.
        self._window_peaks: tuple[int | None, int | None] = (None, None)
        self._t0 = 0.0
        self.available = bool(cuda_available())
        # Nothing below touches CUDA or NVML without a device, so a CPU machine never
        # even imports pynvml.
        self._allocator: Any = (allocator if allocator is not None else torch.cuda) if self.available else None
        self._nvml: Any = load_nvml(nvml) if self.available else None
        self._uuid: str | None = None
        self.device_name: str | None = None
        self.nvml_ok = False
        if self.available:
            self._uuid = torch_device_uuid(device_index, getattr(self._allocator, "get_device_properties", None))
            handle = open_nvml_device(self._nvml, device_index, self._uuid)
            if handle is not None:
                self.nvml_ok = True
                self.device_name = device_name(self._nvml, handle)
                close_nvml(self._nvml)
            if self.device_name is None:
                self.device_name = self._torch_device_name()

    def _open_window(self) -> None:
        self._sampler = None
        self._window_peaks = (None, None)
        self._reset_peaks()
        if self.nvml_ok:
            self._handle = open_nvml_device(self._nvml, self.device_index, self._uuid)
            if self._handle is not None:
                self._sampler = PeriodicSampler(self._sample, self._hz, name="gradeff-gpu")
                self._sampler.start()
        self._t0 = time.perf_counter()

    def _close_window(self) -> GpuRecord:
        duration = time.perf_counter() - self._t0
        values: list[_Sample] = []
        if self._sampler is not None:
            values = self._sampler.stop()
        if self._handle is not None:
            close_nvml(self._nvml)
            self._handle = None
        self._window_peaks = _max_pairs(self._window_peaks, self._read_peaks())
        return self._summarize(values, self._window_peaks, duration)

    def _begin_segment(self) -> float:
        # The allocator peaks are reset so that they are the segment's own; NVML figures
        # come from the samples the window's thread took within the segment.
        self._window_peaks = _max_pairs(self._window_peaks, self._read_peaks())
        self._reset_peaks()
        t0 = time.perf_counter()
        if self._sampler is not None:
            self._sampler.sample_now()
        return t0

    def _end_segment(self, t0: float) -> GpuRecord:
        t1 = self._sampler.sample_now() if self._sampler is not None else time.perf_counter()
        peaks = self._read_peaks()
        self._window_peaks = _max_pairs(self._window_peaks, peaks)
        values = self._sampler.between(t0, t1) if self._sampler is not None else []
        return self._summarize(values, peaks, t1 - t0)

    def _reset_peaks(self) -> None:
        self._peaks_reset = False
        if self.available:
            try:
                self._allocator.reset_peak_memory_stats(self.device_index)
                self._peaks_reset = True
            except Exception:  # noqa: BLE001 - a broken CUDA context: peaks stay None
                pass

    def _read_peaks(self) -> tuple[int | None, int | None]:
        """Allocated and reserved peaks since the last reset; ``None`` when not measured."""
        if not (self.available and self._peaks_reset):
            return None, None
        try:
            return (int(self._allocator.max_memory_allocated(self.device_index)),
                    int(self._allocator.max_memory_reserved(self.device_index)))
        except Exception:  # noqa: BLE001
            return None, None

    def _summarize(self, values: list[_Sample], peaks: tuple[int | None, int | None], duration: float) -> GpuRecord:
        util = [v[0] for v in values if v[0] is not None]
        mem = [v[1] for v in values if v[1] is not None]
        power = [v[2] for v in values if v[2] is not None]
        return GpuRecord(
            available=self.available,
            device_name=self.device_name,
            util_mean_percent=sum(util) / len(util) if util else None,
            util_max_percent=max(util) if util else None,
            mem_used_peak_bytes=max(mem) if mem else None,
            power_mean_w=sum(power) / len(power) if power else None,
            alloc_peak_bytes=peaks[0],
            reserved_peak_bytes=peaks[1],
            samples=len(values),
            short_window=duration < NVML_UTILIZATION_WINDOW_S,
            duration_s=duration,
        )

    def _torch_device_name(self) -> str | None:
        get_name = getattr(self._allocator, "get_device_name", None)
        if get_name is None:
            return None
        try:
            return str(get_name(self.device_index))
        except Exception:  # noqa: BLE001
            return None

    def _sample(self) -> _Sample | None:
        nvml, handle = self._nvml, self._handle
        # Each query can fail on its own (power is "not supported" on some boards), so
        # one missing figure does not discard the others.
        util = mem = power = None
        try:
            util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:  # noqa: BLE001
            pass
        try:
            mem = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
        except Exception:  # noqa: BLE001
            pass
        try:
            power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # NVML reports milliwatts
        except Exception:  # noqa: BLE001
            pass
        if util is None and mem is None and power is None:
            return None
        return util, mem, power
