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

The sampling meters are one table, :data:`SAMPLED_METERS`: each names its record, how it is made for a cell and how
its segments combine (the meter module's own rule). A new meter is its module under :mod:`gradeff.meters` and its
entry here, with its field names in :data:`gradeff.records.fields.METER_FIELDS` (which readers check without
importing torch; a test holds the two to each other).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gradeff.meters import (
    EnergyMeter,
    GpuMeter,
    RamMeter,
    WindowMeter,
    combine_energy,
    combine_gpu,
    combine_ram,
    measure_step_memory,
)

__all__ = ["SAMPLED_METERS", "EpochMetering", "MeterSettings", "SampledMeter", "aggregate", "memory_breakdown"]


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


@dataclass(frozen=True, slots=True)
class SampledMeter:
    """One meter that watches a cell's window (:class:`~gradeff.meters.window.WindowMeter`).

    Attributes:
        name: its record's key under ``meters`` (a cell's and each epoch's).
        make: the meter for a cell on a device, under the session's settings; made with the cell's metering, outside
            its epochs (making one probes the device).
        combine: its segments' records (dicts) as one record of their whole stretch, at the session's grid
            intensity: an epoch's pieces, or a cell's epochs.
    """

    name: str
    make: Callable[[MeterSettings, torch.device], WindowMeter]
    combine: Callable[[list[dict], float], dict]


def _on_gpu(device: torch.device) -> Callable[[], bool]:
    return lambda: device.type == "cuda" and torch.cuda.is_available()


# In the order of the records' keys. The windows open in the reverse order (energy first, so its window holds the
# others' opening) and close in this one.
SAMPLED_METERS: tuple[SampledMeter, ...] = (
    SampledMeter("ram", lambda settings, device: RamMeter(hz=settings.hz),
                 lambda segments, grid: combine_ram(segments)),
    SampledMeter("gpu", lambda settings, device: GpuMeter(device_index=device.index or 0, hz=settings.hz,
                                                          cuda_available=_on_gpu(device)),
                 lambda segments, grid: combine_gpu(segments)),
    SampledMeter("energy", lambda settings, device: EnergyMeter(grid_gco2_per_kwh=settings.grid_gco2_per_kwh,
                                                                device_index=device.index or 0,
                                                                cuda_available=_on_gpu(device)),
                 combine_energy),
)


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
        self.meters: dict[str, WindowMeter] = {meter.name: meter.make(self.settings, device)
                                               for meter in SAMPLED_METERS}
        self._stack: ExitStack | None = None
        self._pieces: list[dict] | None = None  # the open segment's pieces (see paused)
        self._piece: tuple | None = None

    def __enter__(self) -> EpochMetering:
        stack = ExitStack()
        try:
            for meter in reversed(self.meters.values()):
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
        return sum(meter.sampler_cpu_s for meter in self.meters.values())

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
        segments = {name: meter.segment() for name, meter in reversed(self.meters.items())}
        for segment in segments.values():
            segment.__enter__()
        self._piece = (segments, sampler_cpu0, t0, time.perf_counter())

    def _close_piece(self) -> None:
        segments, sampler_cpu0, t0, t_fn = self._piece
        fn_s = time.perf_counter() - t_fn
        for segment in reversed(segments.values()):
            segment.__exit__(None, None, None)
        self._pieces.append({name: asdict(segments[name].record) for name in self.meters}
                            | {"cost": {"reads_s": time.perf_counter() - t0 - fn_s,
                                        "sampler_cpu_s": self._sampler_cpu_s() - sampler_cpu0, "epoch_s": fn_s}})


def _combine(pieces: list[dict], grid_gco2_per_kwh: float) -> dict:
    """Pieces of one epoch as one epoch's figures (the layout of a single segment's)."""
    combined = aggregate(pieces, grid_gco2_per_kwh)
    del combined["cost"]["fraction"]
    return combined


def aggregate(epochs: list[dict], grid_gco2_per_kwh: float) -> dict:
    """The cell-level figures of per-epoch measurement dicts (``{}`` if there are none): each meter's epochs
    combined by its own rule, and the metering's cost."""
    if not epochs:
        return {}
    return {meter.name: meter.combine([epoch[meter.name] for epoch in epochs], grid_gco2_per_kwh)
            for meter in SAMPLED_METERS} | {"cost": _cost([epoch["cost"] for epoch in epochs])}


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
