"""Tests of the GPU meter, with fake NVML and allocator where no GPU exists."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

import gradeff.meters.gpu as gpu_mod
from gradeff.meters.gpu import NVML_UTILIZATION_WINDOW_S, GpuMeter, GpuRecord

GPU_FIELDS = (
    "device_name",
    "util_mean_percent",
    "util_max_percent",
    "mem_used_peak_bytes",
    "power_mean_w",
    "alloc_peak_bytes",
    "reserved_peak_bytes",
)
NVML_FIELDS = ("util_mean_percent", "util_max_percent", "mem_used_peak_bytes", "power_mean_w")


class FakeNVMLError(Exception):
    """Stands for pynvml.NVMLError_LibraryNotFound and friends."""


def fake_nvml(*, init_error: bool = False, power_supported: bool = True) -> SimpleNamespace:
    """A pynvml stand-in: 50 % utilization, 1 GiB used, 100 W, with a call log."""
    log: list[tuple] = []

    def init():
        log.append(("init",))
        if init_error:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def power(handle):
        log.append(("power", handle))
        if not power_supported:
            raise FakeNVMLError("Not Supported")
        return 100_000  # milliwatts

    def by_uuid(uuid):
        log.append(("uuid", uuid))
        if uuid != "GPU-1234-abcd":
            raise FakeNVMLError("Not Found")
        return "handle-by-uuid"

    return SimpleNamespace(
        log=log,
        nvmlInit=init,
        nvmlShutdown=lambda: log.append(("shutdown",)),
        nvmlDeviceGetHandleByIndex=lambda i: log.append(("index", i)) or f"handle-{i}",
        nvmlDeviceGetHandleByUUID=by_uuid,
        nvmlDeviceGetName=lambda h: b"Fake GPU",  # old pynvml returned bytes
        nvmlDeviceGetUtilizationRates=lambda h: log.append(("util", h)) or SimpleNamespace(gpu=50, memory=20),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=2**30, free=2**30, total=2**31),
        nvmlDeviceGetPowerUsage=power,
    )


def fake_allocator(*, uuid: str | None = None) -> SimpleNamespace:
    """A torch.cuda stand-in whose peaks are 123 / 456 bytes once reset."""
    log: list[tuple] = []
    state = {"reset": False}

    def reset(device):
        log.append(("reset", device))
        state["reset"] = True

    def peak(value):
        # Reading a peak that was never reset would describe memory outside the window.
        return lambda device: value if state["reset"] else pytest.fail("peak read before reset")

    return SimpleNamespace(
        log=log,
        reset_peak_memory_stats=reset,
        max_memory_allocated=peak(123),
        max_memory_reserved=peak(456),
        get_device_name=lambda d: "Torch Name",
        get_device_properties=lambda d: SimpleNamespace(uuid=uuid) if uuid else SimpleNamespace(),
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour of a CPU-only machine")
def test_cpu_machine_reports_none_everywhere():
    """Without CUDA every GPU field is None (never torch's 0), available is False."""
    with GpuMeter() as meter:
        pass
    rec = meter.record
    assert isinstance(rec, GpuRecord)
    assert rec.available is False
    for field in GPU_FIELDS:
        assert getattr(rec, field) is None, field
    assert rec.samples == 0


def test_no_device_never_touches_nvml_or_allocator():
    """With cuda_available False neither NVML nor the allocator is called."""
    nvml, alloc = fake_nvml(), fake_allocator()
    with GpuMeter(nvml=nvml, cuda_available=lambda: False, allocator=alloc) as meter:
        pass
    assert nvml.log == [] and alloc.log == []
    assert all(getattr(meter.record, f) is None for f in GPU_FIELDS)


def test_fake_device_fields_come_out_right():
    """Fake NVML and allocator readings map to the record in raw units."""
    nvml, alloc = fake_nvml(), fake_allocator()
    with GpuMeter(hz=50, nvml=nvml, cuda_available=lambda: True, allocator=alloc) as meter:
        time.sleep(0.1)
    rec = meter.record
    assert rec.available is True
    assert rec.device_name == "Fake GPU"
    assert rec.util_mean_percent == 50.0
    assert rec.util_max_percent == 50.0
    assert rec.mem_used_peak_bytes == 2**30
    assert rec.power_mean_w == 100.0
    assert rec.alloc_peak_bytes == 123
    assert rec.reserved_peak_bytes == 456
    assert rec.samples >= 2
    assert alloc.log == [("reset", 0)]
    # Every NVML initialization is given back.
    assert nvml.log.count(("init",)) == nvml.log.count(("shutdown",)) >= 1


def test_nvml_failure_gives_none_nvml_fields():
    """NVML raising at init leaves its fields None; the allocator peaks still come through."""
    nvml, alloc = fake_nvml(init_error=True), fake_allocator()
    with GpuMeter(nvml=nvml, cuda_available=lambda: True, allocator=alloc) as meter:
        pass
    rec = meter.record
    assert rec.available is True
    for field in NVML_FIELDS:
        assert getattr(rec, field) is None, field
    assert rec.samples == 0
    assert rec.device_name == "Torch Name"  # falls back to torch's name
    assert (rec.alloc_peak_bytes, rec.reserved_peak_bytes) == (123, 456)


def test_real_pynvml_error_class_is_handled(monkeypatch):
    """A genuine pynvml.NVMLError subclass from nvmlInit is swallowed too."""
    pynvml = pytest.importorskip("pynvml")
    nvml = fake_nvml()

    def init():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    nvml.nvmlInit = init
    with GpuMeter(nvml=nvml, cuda_available=lambda: True, allocator=fake_allocator()) as meter:
        pass
    assert meter.record.util_mean_percent is None


def test_unsupported_power_only_drops_power():
    """A board without power readings keeps utilization and memory."""
    nvml = fake_nvml(power_supported=False)
    with GpuMeter(nvml=nvml, cuda_available=lambda: True, allocator=fake_allocator()) as meter:
        pass
    rec = meter.record
    assert rec.power_mean_w is None
    assert rec.util_mean_percent == 50.0 and rec.mem_used_peak_bytes == 2**30


def test_device_is_found_by_uuid_then_index():
    """torch's UUID picks the NVML handle; without one the index is used."""
    nvml = fake_nvml()
    with GpuMeter(device_index=1, nvml=nvml, cuda_available=lambda: True, allocator=fake_allocator(uuid="1234-abcd")):
        pass
    assert ("util", "handle-by-uuid") in nvml.log
    assert ("index", 1) not in nvml.log

    nvml = fake_nvml()
    alloc = fake_allocator()
    with GpuMeter(device_index=1, nvml=nvml, cuda_available=lambda: True, allocator=alloc):
        pass
    assert ("util", "handle-1") in nvml.log
    assert alloc.log == [("reset", 1)]


def test_short_window_flag(monkeypatch):
    """short_window is True below NVML's averaging period and False above it."""
    with GpuMeter(nvml=fake_nvml(), cuda_available=lambda: True, allocator=fake_allocator()) as meter:
        pass
    assert meter.record.short_window is True

    # A fake clock for the meter only: 1.5 s pass between enter and exit.
    clock = iter([100.0, 100.0 + NVML_UTILIZATION_WINDOW_S + 0.5])
    monkeypatch.setattr(gpu_mod, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    with GpuMeter(nvml=fake_nvml(), cuda_available=lambda: True, allocator=fake_allocator()) as meter:
        pass
    assert meter.record.short_window is False
    assert meter.record.duration_s == pytest.approx(NVML_UTILIZATION_WINDOW_S + 0.5)


def test_segments_reset_the_allocator_peaks_and_the_window_keeps_the_largest():
    """Each segment reports the peaks reached within it; the window's record is their maximum."""
    alloc = fake_allocator()
    peaks = {"allocated": 0}
    alloc.max_memory_allocated = lambda device: peaks["allocated"]
    alloc.max_memory_reserved = lambda device: peaks["allocated"] * 2
    nvml = fake_nvml()
    with GpuMeter(hz=0.5, nvml=nvml, cuda_available=lambda: True, allocator=alloc) as meter:
        with meter.segment() as first:
            peaks["allocated"] = 1000
        alloc.reset_peak_memory_stats(0)  # what the next reset would do to the fake's reading
        peaks["allocated"] = 300
        with meter.segment() as second:
            pass
    assert (first.record.alloc_peak_bytes, first.record.reserved_peak_bytes) == (1000, 2000)
    assert (second.record.alloc_peak_bytes, second.record.reserved_peak_bytes) == (300, 600)
    assert (meter.record.alloc_peak_bytes, meter.record.reserved_peak_bytes) == (1000, 2000)
    assert [entry for entry in alloc.log if entry[0] == "reset"] == [("reset", 0)] * 4  # window, 2 segments, test
    # Each segment is sampled at both ends, within the window's single NVML session.
    assert first.record.samples == second.record.samples == 2
    assert meter.record.samples == 6
    assert nvml.log.count(("init",)) - 1 == nvml.log.count(("shutdown",)) - 1 == 1  # probe + window


def test_gpu_segment_needs_an_open_window():
    """A segment outside `with meter:` is a usage error."""
    meter = GpuMeter(nvml=fake_nvml(), cuda_available=lambda: True, allocator=fake_allocator())
    with pytest.raises(RuntimeError, match="open window"):
        with meter.segment():
            pass
