"""Energy used over a window of time, and the CO2 it stands for.

Sources, best first (``source="auto"`` takes the first one the machine offers):

``"nvml"``
    The GPU's own energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules
    since the driver loaded; Volta and newer). Measured, but covers the GPU board only:
    the host CPU and DRAM are not included.
``"rapl"``
    Intel/AMD RAPL package counters exposed by the Linux powercap framework
    (``/sys/class/powercap/intel-rapl:N/energy_uj``). Measured, for the whole CPU
    packages: every process on the machine, not only this one. Since 2020 (CVE-2020-8694)
    the files are readable by root only, so ordinary users usually fall through.
``"estimate"``
    A model, not a measurement: the process's CPU time times a per-CPU power
    (see :data:`DEFAULT_WATTS_PER_LOGICAL_CPU` and :class:`EnergyMeter`).
``"none"``
    Nothing: ``joules`` and ``co2_grams`` are ``None``.

A source requested explicitly that the machine does not offer gives ``"none"`` rather
than an exception, so one benchmark configuration runs on every machine; check
``EnergyMeter.source`` after creation to find out.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil
import torch

from ._nvml import close_nvml, load_nvml, open_nvml_device, torch_device_uuid
from .sampler import PeriodicSampler
from .window import WindowMeter

__all__ = [
    "DEFAULT_GRID_GCO2_PER_KWH",
    "DEFAULT_WATTS_PER_LOGICAL_CPU",
    "EnergyMeter",
    "EnergyRecord",
    "EnergySource",
    "co2_grams",
    "combine_energy",
]

EnergySource = Literal["nvml", "rapl", "estimate", "none"]
_SOURCES = ("auto", "nvml", "rapl", "estimate", "none")

# Power charged per busy logical CPU by the "estimate" source. A package's TDP divided
# by its hardware threads is 3-9 W on current parts (e.g. 270 W / 80 threads for a
# 40-core server part, 125 W / 16-24 threads for desktop parts), but a lightly loaded
# package runs its busy cores at turbo clocks well above that share, and uncore/DRAM
# power is not in it. 10 W is rounded up from that range on purpose: an energy estimate
# that errs high is the safer one to publish. Pass the real ``cpu_tdp_w`` when known.
DEFAULT_WATTS_PER_LOGICAL_CPU = 10.0

# Carbon intensity of electricity, gCO2e per kWh: of the order of the world average
# (roughly 400-500 g/kWh in recent IEA and Ember figures). Pass the local grid's value
# for a meaningful figure; it varies from ~20 (hydro/nuclear) to ~800 (coal).
DEFAULT_GRID_GCO2_PER_KWH = 400.0

_JOULES_PER_KWH = 3.6e6

# Top-level RAPL zones are "intel-rapl:<N>" (one per package, or "psys" for the whole
# platform); sub-zones ("intel-rapl:0:1", core/uncore/dram) are already counted in
# their package, and "intel-rapl-mmio:N" duplicates the package counter.
_RAPL_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")


def co2_grams(joules: float | None, grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH) -> float | None:
    """CO2-equivalent emitted to produce an amount of electric energy.

    ``co2 = joules / 3.6e6 (J per kWh) * grid_gco2_per_kwh``.

    Args:
        joules: Energy in joules; ``None`` when unknown.
        grid_gco2_per_kwh: Carbon intensity of the electricity, gCO2e per kWh.

    Returns:
        Grams of CO2-equivalent, or ``None`` when ``joules`` is ``None``.
    """
    if joules is None:
        return None
    return joules / _JOULES_PER_KWH * grid_gco2_per_kwh


def combine_energy(segments: Sequence[Mapping], grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH) -> dict:
    """Segments' records (as dicts) as one record of their whole stretch: energies add up, and a total is known only
    if every part was measured."""
    joules = [e["joules"] for e in segments]
    total = None if not joules or any(j is None for j in joules) else sum(joules)
    return {
        "joules": total,
        "source": segments[0]["source"],
        "co2_grams": co2_grams(total, grid_gco2_per_kwh) if total is not None else None,
        "duration_s": sum(e["duration_s"] for e in segments),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class EnergyRecord:
    """Energy over one measured window.

    Attributes:
        joules: Energy used in the window, in joules; ``None`` for source ``"none"`` or
            when the counter could not be read at both ends.
        source: Where the figure comes from: ``"nvml"``, ``"rapl"``, ``"estimate"`` or
            ``"none"`` (see the module documentation for what each covers).
        co2_grams: CO2-equivalent of ``joules`` at the meter's grid intensity, grams.
        duration_s: Length of the window in seconds.
    """

    joules: float | None
    source: EnergySource
    co2_grams: float | None
    duration_s: float


@dataclass(frozen=True, slots=True)
class _RaplZone:
    energy_file: Path
    max_range_uj: int


class EnergyMeter(WindowMeter[EnergyRecord]):
    """Context manager measuring energy over a window, from the best available source.

    The ``"estimate"`` source computes::

        E [J] = cpu_seconds * (cpu_tdp_w / logical_cpus)

    where ``cpu_seconds`` is the user + system CPU time of the process and of its
    waited-for children spent in the window (``psutil.Process.cpu_times``), and
    ``cpu_tdp_w`` defaults to ``DEFAULT_WATTS_PER_LOGICAL_CPU * logical_cpus``, so by
    default every busy CPU-second costs 10 J. Idle power and the GPU are not counted.

    Example::

        with EnergyMeter() as meter:
            with meter.segment() as epoch:  # optional: a stretch with its own record
                train_epoch()
            print(epoch.record.joules)
        print(meter.record.source, meter.record.joules)  # the whole window
    """

    def __init__(
        self,
        source: str = "auto",
        nvml: Any = None,
        powercap_root: str | os.PathLike[str] = "/sys/class/powercap",
        cpu_tdp_w: float | None = None,
        grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH,
        *,
        device_index: int = 0,
        cuda_available: Callable[[], bool] = torch.cuda.is_available,
        rapl_hz: float = 1.0,
        pid: int | None = None,
    ) -> None:
        """Probe the sources and pick one; nothing is read until the window opens.

        Args:
            source: ``"auto"``, or one of ``"nvml"``, ``"rapl"``, ``"estimate"``,
                ``"none"`` to force it (``"none"`` results if it is unavailable).
            nvml: Object with the ``pynvml`` functions (tests pass a fake); ``None`` to
                import ``pynvml`` when a CUDA device is present.
            powercap_root: Directory holding the ``intel-rapl:N`` zones.
            cpu_tdp_w: Power of the CPU package(s) at full load, watts, for the
                estimate; ``None`` for ``DEFAULT_WATTS_PER_LOGICAL_CPU`` per logical CPU.
            grid_gco2_per_kwh: Carbon intensity of the electricity, gCO2e per kWh.
            device_index: torch index of the CUDA device read by the ``"nvml"`` source.
            cuda_available: Whether a CUDA device is present; injectable for tests.
            rapl_hz: How often the RAPL counters are read during the window. They wrap
                around after ``max_energy_range_uj`` (minutes at full load), and a delta
                can only be unwrapped if at most one wrap happened between two reads.
            pid: Process whose CPU time the estimate charges; ``None`` for this one.
        """
        if source not in _SOURCES:
            raise ValueError(f"source must be one of {_SOURCES}, got {source!r}")
        super().__init__()
        self.grid_gco2_per_kwh = grid_gco2_per_kwh
        self._device_index = device_index
        self._rapl_hz = rapl_hz
        self._proc = psutil.Process(os.getpid() if pid is None else pid)
        # For this process one times(2) system call gives the same four figures as psutil's
        # parse of /proc/<pid>/stat, for a sixth or less of its cost at both ends of every epoch.
        self._cpu_times: Callable[[], Any] = os.times if pid is None or pid == os.getpid() else self._proc.cpu_times
        self._logical_cpus = psutil.cpu_count(logical=True) or os.cpu_count() or 1
        self.cpu_tdp_w = DEFAULT_WATTS_PER_LOGICAL_CPU * self._logical_cpus if cpu_tdp_w is None else cpu_tdp_w
        self._nvml: Any = None
        self._uuid: str | None = None
        self._rapl_zones: list[_RaplZone] = []

        wanted = ("nvml", "rapl", "estimate") if source == "auto" else (source,)
        self.source: EnergySource = "none"
        for candidate in wanted:
            if candidate == "nvml" and self._probe_nvml(nvml, cuda_available):
                self.source = "nvml"
                break
            if candidate == "rapl" and self._probe_rapl(Path(powercap_root)):
                self.source = "rapl"
                break
            if candidate == "estimate":
                self.source = "estimate"
                break

        self._handle: Any = None
        self._start_value: float | None = None
        self._t0 = 0.0

    # -- probing -----------------------------------------------------------------------

    def _probe_nvml(self, nvml: Any, cuda_available: Callable[[], bool]) -> bool:
        if not cuda_available():
            return False
        module = load_nvml(nvml)
        self._uuid = torch_device_uuid(self._device_index, torch.cuda.get_device_properties)
        handle = open_nvml_device(module, self._device_index, self._uuid)
        if handle is None:
            return False
        try:
            module.nvmlDeviceGetTotalEnergyConsumption(handle)  # NotSupported before Volta
            ok = True
        except Exception:  # noqa: BLE001
            ok = False
        close_nvml(module)
        if ok:
            self._nvml = module
        return ok

    def _probe_rapl(self, root: Path) -> bool:
        try:
            entries = sorted(p for p in root.iterdir() if _RAPL_PACKAGE_ZONE.match(p.name))
        except OSError:
            return False
        zones = []
        for zone in entries:
            try:
                # "psys" covers the whole platform, packages included: adding it to the
                # package zones would count the CPU twice.
                name_file = zone / "name"
                if name_file.exists() and name_file.read_text().strip() == "psys":
                    continue
                int((zone / "energy_uj").read_text())  # PermissionError for non-root since 2020
                max_range = int((zone / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                continue
            zones.append(_RaplZone(zone / "energy_uj", max_range))
        self._rapl_zones = zones
        return bool(zones)

    # -- window ------------------------------------------------------------------------

    def _open_window(self) -> None:
        self._sampler = None
        # The window is the first segment: its start precedes the sampler's first read.
        self._t0 = time.perf_counter()
        if self.source == "nvml":
            self._handle = open_nvml_device(self._nvml, self._device_index, self._uuid)
        elif self.source == "rapl":
            self._sampler = PeriodicSampler(self._read_rapl, self._rapl_hz, name="gradeff-rapl")
            self._sampler.start()
        self._start_value = self._read_counter()

    def _close_window(self) -> EnergyRecord:
        record = self._end_segment((self._t0, self._start_value))
        if self._sampler is not None:
            self._sampler.stop()
        if self._handle is not None:
            close_nvml(self._nvml)
            self._handle = None
        return record

    def _begin_segment(self) -> tuple[float, float | None]:
        # A segment is a counter delta, or for RAPL the reads between two synchronous ones.
        t0 = time.perf_counter()
        if self.source == "rapl" and self._sampler is not None:
            self._sampler.sample_now()
            return t0, None
        return t0, self._read_counter()

    def _end_segment(self, begun: tuple[float, float | None]) -> EnergyRecord:
        t0, start = begun
        if self.source == "rapl" and self._sampler is not None:
            t1 = self._sampler.sample_now()
            joules = self._integrate_rapl(self._sampler.between(t0, t1))
        else:
            joules = self._joules_between(start, self._read_counter())
            t1 = time.perf_counter()
        return self._make_record(joules, t1 - t0)

    def _read_counter(self) -> float | None:
        """The nvml (mJ) or estimate (CPU s) counter now; ``None`` for rapl (sampled) and none."""
        if self.source == "nvml":
            return self._read_nvml_mj()
        if self.source == "estimate":
            return self._cpu_seconds()
        return None

    def _joules_between(self, start: float | None, end: float | None) -> float | None:
        if start is None or end is None:
            return None
        if self.source == "nvml":
            return (end - start) / 1000.0  # millijoules
        return (end - start) * (self.cpu_tdp_w / self._logical_cpus)  # estimate: CPU seconds

    def _make_record(self, joules: float | None, duration: float) -> EnergyRecord:
        return EnergyRecord(joules=joules, source=self.source,
                            co2_grams=co2_grams(joules, self.grid_gco2_per_kwh), duration_s=duration)

    # -- readers -----------------------------------------------------------------------

    def _read_nvml_mj(self) -> float | None:
        if self._handle is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:  # noqa: BLE001
            return None

    def _read_rapl(self) -> tuple[int, ...] | None:
        try:
            return tuple(int(z.energy_file.read_text()) for z in self._rapl_zones)
        except (OSError, ValueError):
            return None  # e.g. a torn read; the next sample covers the interval

    def _integrate_rapl(self, readings: list[tuple[int, ...]]) -> float | None:
        if len(readings) < 2:
            return None
        total_uj = 0
        for before, after in zip(readings, readings[1:]):
            for zone, a, b in zip(self._rapl_zones, before, after):
                delta = b - a
                if delta < 0:
                    # The counter wrapped: it ran from `a` up to its range, then from 0 to `b`.
                    delta += zone.max_range_uj
                total_uj += delta
        return total_uj / 1e6

    def _cpu_seconds(self) -> float:
        t = self._cpu_times()
        # children_* only grow when a child is waited for, so running data-loader
        # workers are charged when they exit, not while they run.
        return t.user + t.system + t.children_user + t.children_system
