"""Attach the meters to a cell: one window per cell, a segment per epoch, their aggregate.

The RAM, GPU and energy meters open one window for the whole cell (their sampling threads and
device handles are set up once, outside the epochs) and each epoch is a segment of it, so every
epoch has its own figures at the cost of a few synchronous reads. A cell's figures are exact
aggregates of its epochs (peaks are maxima, means are sample-weighted, energies add up).
``None`` stays ``None``: a figure the machine cannot measure is never turned into a number by
aggregation.

What metering costs is recorded with the figures: per epoch, the seconds the segments' reads
took on the training thread and the CPU seconds the sampling threads spent, which compete with
the training's threads for cores.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gradeff.meters import (
    NVML_UTILIZATION_WINDOW_S,
    EnergyMeter,
    GpuMeter,
    RamMeter,
    co2_grams,
    max_known,
    measure_step_memory,
)

__all__ = ["EpochMetering", "MeterSettings", "aggregate", "memory_breakdown"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MeterSettings:
    """How the samplers run.

    Attributes:
        hz: sampling rate of the RAM and GPU samplers.
        grid_gco2_per_kwh: carbon intensity used for CO2-equivalent figures.
        peak_tflops: the device's peak TFLOP/s for MFU, replacing the table's (``None``: the table's, if any).
    """

    hz: float = 10.0
    grid_gco2_per_kwh: float = 400.0
    peak_tflops: float | None = None


class EpochMetering:
    """Opens the meters' window for a cell and runs epochs in segments of it.

    Use as a context manager around the epochs; :meth:`run` appends one measurement dict per
    epoch to ``epochs``. The meters are created with the object: creating them probes NVML
    and the RAPL zones, which belongs outside the timed epochs.
    """

    def __init__(self, device: torch.device, settings: MeterSettings | None = None):
        self.device = device
        self.settings = settings or MeterSettings()
        self.epochs: list[dict] = []
        index = device.index or 0
        on_gpu = device.type == "cuda"
        self._ram = RamMeter(hz=self.settings.hz)
        self._gpu = GpuMeter(device_index=index, hz=self.settings.hz,
                             cuda_available=lambda: on_gpu and torch.cuda.is_available())
        self._energy = EnergyMeter(grid_gco2_per_kwh=self.settings.grid_gco2_per_kwh, device_index=index,
                                   cuda_available=lambda: on_gpu and torch.cuda.is_available())
        self._stack: ExitStack | None = None
        self._pieces: list[dict] | None = None  # the open segment's pieces (see paused)
        self._piece: tuple | None = None

    def __enter__(self) -> EpochMetering:
        stack = ExitStack()
        try:
            for meter in (self._energy, self._gpu, self._ram):
                stack.enter_context(meter)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def _sampler_cpu_s(self) -> float:
        return self._ram.sampler_cpu_s + self._gpu.sampler_cpu_s + self._energy.sampler_cpu_s

    def run(self, fn: Callable[[], Any]) -> Any:
        """Call ``fn`` in a segment of each meter; append the segments' records as a dict."""
        with self.segment():
            return fn()

    @contextmanager
    def segment(self) -> Iterator[None]:
        """The block as one segment of each meter (an epoch); appends the segments' records as a dict.

        A block that raises appends nothing: an epoch that did not end has no figures. Inside it,
        :meth:`paused` leaves a stretch out of every meter (an evaluation between optimizer steps): the epoch's
        figures are then those of the pieces around it, combined as a cell's epochs are (:func:`aggregate`).
        """
        if self._stack is None:
            raise RuntimeError("EpochMetering needs the meters' window: use it inside `with metering:`")
        self._pieces = []
        self._open_piece()
        try:
            yield
        finally:
            self._close_piece()
            pieces, self._pieces = self._pieces, None
        self.epochs.append(pieces[0] if len(pieces) == 1 else _combine(pieces, self.settings.grid_gco2_per_kwh))

    @contextmanager
    def paused(self) -> Iterator[dict]:
        """Inside :meth:`segment`, a block no meter measures. Yields the epoch's figures up to the pause (its
        ``energy.joules``: the energy the training has used so far in this epoch)."""
        if self._pieces is None:
            raise RuntimeError("paused() belongs inside a segment")
        self._close_piece()
        try:
            yield _combine(self._pieces, self.settings.grid_gco2_per_kwh)
        finally:
            self._open_piece()

    def _open_piece(self) -> None:
        sampler_cpu0, t0 = self._sampler_cpu_s(), time.perf_counter()
        meters = (self._energy.segment(), self._gpu.segment(), self._ram.segment())
        for meter in meters:
            meter.__enter__()
        self._piece = (meters, sampler_cpu0, t0, time.perf_counter())

    def _close_piece(self) -> None:
        meters, sampler_cpu0, t0, t_fn = self._piece
        fn_s = time.perf_counter() - t_fn
        for meter in reversed(meters):
            meter.__exit__(None, None, None)
        energy, gpu, ram = meters
        self._pieces.append({"ram": asdict(ram.record), "gpu": asdict(gpu.record), "energy": asdict(energy.record),
                             "cost": {"reads_s": time.perf_counter() - t0 - fn_s,
                                      "sampler_cpu_s": self._sampler_cpu_s() - sampler_cpu0, "epoch_s": fn_s}})


def _combine(pieces: list[dict], grid_gco2_per_kwh: float) -> dict:
    """Pieces of one epoch as one epoch's figures (the layout of a single segment's)."""
    combined = aggregate(pieces, grid_gco2_per_kwh)
    del combined["cost"]["fraction"]
    return combined


def _weighted_mean(values, weights):
    pairs = [(v, w) for v, w in zip(values, weights) if v is not None and w]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def _sum_all(values):
    # A total is only meaningful if every part was measured.
    return None if not values or any(v is None for v in values) else sum(values)


def aggregate(epochs: list[dict], grid_gco2_per_kwh: float) -> dict:
    """The cell-level figures of per-epoch measurement dicts (``{}`` if there are none)."""
    if not epochs:
        return {}
    ram = [e["ram"] for e in epochs]
    gpu = [e["gpu"] for e in epochs]
    energy = [e["energy"] for e in epochs]
    ram_samples = [r["samples"] for r in ram]
    gpu_samples = [g["samples"] for g in gpu]
    joules = _sum_all([e["joules"] for e in energy])
    gpu_duration = sum(g["duration_s"] for g in gpu)
    return {
        "ram": {
            "peak_rss_bytes": max_known(r["peak_rss_bytes"] for r in ram),
            # The cell's peak is exact only if every epoch's is.
            "peak_source": "kernel" if all(r["peak_source"] == "kernel" for r in ram) else "sampled",
            "mean_rss_bytes": _weighted_mean([r["mean_rss_bytes"] for r in ram], ram_samples),
            "peak_system_percent": max_known(r["peak_system_percent"] for r in ram),
            "samples": sum(ram_samples),
            "duration_s": sum(r["duration_s"] for r in ram),
        },
        "gpu": {
            "available": all(g["available"] for g in gpu),
            "device_name": gpu[0]["device_name"],
            "util_mean_percent": _weighted_mean([g["util_mean_percent"] for g in gpu], gpu_samples),
            "util_max_percent": max_known(g["util_max_percent"] for g in gpu),
            "mem_used_peak_bytes": max_known(g["mem_used_peak_bytes"] for g in gpu),
            "power_mean_w": _weighted_mean([g["power_mean_w"] for g in gpu], gpu_samples),
            "alloc_peak_bytes": max_known(g["alloc_peak_bytes"] for g in gpu),
            "reserved_peak_bytes": max_known(g["reserved_peak_bytes"] for g in gpu),
            "samples": sum(gpu_samples),
            # NVML averages utilisation over up to a second: shorter windows are unreliable.
            "short_window": bool(gpu[0]["available"]) and gpu_duration < NVML_UTILIZATION_WINDOW_S,
            "duration_s": gpu_duration,
        },
        "energy": {
            "joules": joules,
            "source": energy[0]["source"],
            "co2_grams": co2_grams(joules, grid_gco2_per_kwh) if joules is not None else None,
            "duration_s": sum(e["duration_s"] for e in energy),
        },
        "cost": _cost([e["cost"] for e in epochs]),
    }


def _cost(costs: list[dict]) -> dict:
    """Summed metering cost of the epochs, and its share of their time."""
    total = {key: sum(c[key] for c in costs) for key in ("reads_s", "sampler_cpu_s", "epoch_s")}
    spent = total["reads_s"] + total["sampler_cpu_s"]
    # CPU seconds over wall seconds: the share of one core's time the meters took during the epochs.
    total["fraction"] = spent / total["epoch_s"] if total["epoch_s"] > 0 else None
    return total


def memory_breakdown(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: Callable[[], Any]) -> dict:
    """Parameter, gradient, optimizer-state and activation bytes and the live peak of one representative step."""
    return asdict(measure_step_memory(model, optimizer, step,
                                      track_peak=getattr(model, "live_peak_visible", True)))
