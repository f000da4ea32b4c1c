"""Meters: one module per resource, each a context manager that yields a frozen record.

A meter's window (``with meter:``) can be cut into segments (``with meter.segment() as s:``),
each with its own record, without restarting its sampling thread.

Records use raw units (bytes as ``int``, seconds and joules as ``float``) and ``None``
for what the machine cannot measure, never a made-up 0. Devices are probed when a
meter is created, never when this package is imported.

May import: :mod:`gradeff.specs`.
"""

from .energy import (
    DEFAULT_GRID_GCO2_PER_KWH,
    DEFAULT_WATTS_PER_LOGICAL_CPU,
    EnergyMeter,
    EnergyRecord,
    EnergySource,
    co2_grams,
    combine_energy,
)
from .gpu import NVML_UTILIZATION_WINDOW_S, AllocatorStats, GpuMeter, GpuRecord, combine_gpu
from .memory import (
    ActivationCounter,
    MemoryBreakdown,
    gradient_bytes,
    measure_step_memory,
    optimizer_state_bytes,
    parameter_bytes,
    parameter_counts,
    trainable_parameter_bytes,
)
from .peak import LivePeakTracker
from .ram import RamMeter, RamRecord, combine_ram
from .sampler import PeriodicSampler
from .window import Segment, WindowMeter, max_known, weighted_mean

__all__ = [
    "DEFAULT_GRID_GCO2_PER_KWH",
    "DEFAULT_WATTS_PER_LOGICAL_CPU",
    "NVML_UTILIZATION_WINDOW_S",
    "ActivationCounter",
    "AllocatorStats",
    "EnergyMeter",
    "EnergyRecord",
    "EnergySource",
    "GpuMeter",
    "GpuRecord",
    "LivePeakTracker",
    "MemoryBreakdown",
    "PeriodicSampler",
    "RamMeter",
    "RamRecord",
    "Segment",
    "WindowMeter",
    "co2_grams",
    "combine_energy",
    "combine_gpu",
    "combine_ram",
    "gradient_bytes",
    "max_known",
    "measure_step_memory",
    "optimizer_state_bytes",
    "parameter_bytes",
    "parameter_counts",
    "trainable_parameter_bytes",
    "weighted_mean",
]
