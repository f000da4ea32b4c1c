"""Tests of the energy meter's sources: NVML, RAPL, CPU-time estimate, none."""

from __future__ import annotations

import os
import time
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch

import gradeff.meters.energy as energy_mod
from gradeff.meters.energy import DEFAULT_WATTS_PER_LOGICAL_CPU, EnergyMeter, EnergyRecord, co2_grams

# Their figures are times and meter readings: run while no other test does (tests/conftest.py).
pytestmark = pytest.mark.serial

MAX_RANGE_UJ = 262_143_328_850  # a typical Intel package value


def _rapl_readable(root: str = "/sys/class/powercap") -> bool:
    try:
        return any(
            os.access(os.path.join(root, z, "energy_uj"), os.R_OK)
            for z in os.listdir(root)
            if z.startswith("intel-rapl:")
        )
    except OSError:
        return False


def _write(path: Path, value: object) -> None:
    # Atomic replace, as a sampler thread may be reading the file at the same moment.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def make_zone(root: Path, name: str, label: str, energy_uj: int, max_range: int = MAX_RANGE_UJ) -> Path:
    """Create a powercap zone directory like the kernel's."""
    zone = root / name
    zone.mkdir()
    (zone / "name").write_text(f"{label}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    _write(zone / "energy_uj", energy_uj)
    return zone


Times = namedtuple("Times", "user system children_user children_system")


def fake_cpu_clock(monkeypatch, read) -> None:
    """Make ``read`` the CPU-time source of meters on this process and of any other, on 4 CPUs."""
    monkeypatch.setattr(os, "times", read)
    fake_psutil = SimpleNamespace(Process=lambda pid: SimpleNamespace(pid=pid, cpu_times=read),
                                  cpu_count=lambda logical=True: 4)
    monkeypatch.setattr(energy_mod, "psutil", fake_psutil)


def burn_cpu(seconds: float) -> None:
    """Spin the CPU for a wall-clock duration."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += sum(i * i for i in range(1000))


@pytest.mark.skipif(
    torch.cuda.is_available() or _rapl_readable(), reason="checks a machine without GPU and without readable RAPL"
)
def test_auto_on_this_machine_is_an_estimate():
    """With no GPU and no readable RAPL, auto falls to the estimate, > 0 after burning CPU."""
    proc = psutil.Process()
    t0 = proc.cpu_times()
    with EnergyMeter() as meter:
        burn_cpu(0.3)
    t1 = proc.cpu_times()
    rec = meter.record
    assert isinstance(rec, EnergyRecord)
    assert meter.source == rec.source == "estimate"
    assert rec.joules > 0
    cpu_s = (t1.user + t1.system) - (t0.user + t0.system)
    # Default: DEFAULT_WATTS_PER_LOGICAL_CPU per busy CPU-second; cpu_times ticks are 10 ms.
    assert rec.joules == pytest.approx(cpu_s * DEFAULT_WATTS_PER_LOGICAL_CPU, abs=0.3)
    assert rec.co2_grams == pytest.approx(rec.joules / 3.6e6 * 400.0)
    assert rec.duration_s >= 0.3


def test_estimate_formula_is_exact(monkeypatch, tmp_path):
    """E = (user + system + children CPU seconds) * cpu_tdp_w / logical CPUs."""
    readings = iter([Times(1.0, 0.5, 0.0, 0.0), Times(3.0, 1.0, 0.5, 0.0)])  # 3.0 CPU-seconds
    fake_cpu_clock(monkeypatch, lambda: next(readings))
    meter = EnergyMeter(source="estimate", powercap_root=tmp_path, cpu_tdp_w=40.0, cuda_available=lambda: False)
    with meter:
        pass
    assert meter.record.joules == pytest.approx(3.0 * 40.0 / 4)


def test_estimate_of_another_process_reads_its_cpu_times(monkeypatch, tmp_path):
    """For another pid the estimate charges that process's CPU time, not this one's."""
    own = iter([Times(100.0, 0.0, 0.0, 0.0)] * 2)
    other = iter([Times(1.0, 0.0, 0.0, 0.0), Times(2.0, 0.0, 0.0, 0.0)])
    monkeypatch.setattr(os, "times", lambda: next(own))
    fake_psutil = SimpleNamespace(Process=lambda pid: SimpleNamespace(cpu_times=lambda: next(other)),
                                  cpu_count=lambda logical=True: 4)
    monkeypatch.setattr(energy_mod, "psutil", fake_psutil)
    meter = EnergyMeter(source="estimate", powercap_root=tmp_path, cpu_tdp_w=40.0, cuda_available=lambda: False,
                        pid=os.getpid() + 1)
    with meter:
        pass
    assert meter.record.joules == pytest.approx(1.0 * 40.0 / 4)


def test_rapl_sums_package_zones(tmp_path):
    """Top-level package zones are summed; sub-zones, psys and mmio zones are ignored."""
    pkg0 = make_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    pkg1 = make_zone(tmp_path, "intel-rapl:1", "package-1", 5_000_000)
    sub = make_zone(pkg0, "intel-rapl:0:0", "core", 0)
    psys = make_zone(tmp_path, "intel-rapl:2", "psys", 0)
    mmio = make_zone(tmp_path, "intel-rapl-mmio:0", "package-0", 0)
    meter = EnergyMeter(powercap_root=tmp_path, cuda_available=lambda: False, rapl_hz=0.5)
    assert meter.source == "rapl"
    with meter:
        _write(pkg0 / "energy_uj", 3_500_000)  # +2.5 J
        _write(pkg1 / "energy_uj", 5_500_000)  # +0.5 J
        for zone in (sub, psys, mmio):
            _write(zone / "energy_uj", 99_000_000)  # would add 99 J each if counted
    rec = meter.record
    assert rec.source == "rapl"
    assert rec.joules == pytest.approx(3.0)


def test_rapl_wrap_around(tmp_path):
    """A counter that wraps from near its range to a small value adds what it ran through."""
    pkg0 = make_zone(tmp_path, "intel-rapl:0", "package-0", MAX_RANGE_UJ - 1_000)
    meter = EnergyMeter(powercap_root=tmp_path, cuda_available=lambda: False, rapl_hz=0.5)
    with meter:
        _write(pkg0 / "energy_uj", 500)
    assert meter.record.joules == pytest.approx(1_500 / 1e6)


def test_rapl_periodic_reads_survive_several_wraps(tmp_path):
    """Reading during the window unwraps a counter that wraps twice, which two reads cannot."""
    small_range = 10_000_000  # 10 J
    pkg0 = make_zone(tmp_path, "intel-rapl:0", "package-0", 0, max_range=small_range)
    with EnergyMeter(powercap_root=tmp_path, cuda_available=lambda: False, rapl_hz=40) as meter:
        for value in (6_000_000, 2_000_000, 8_000_000, 4_000_000):  # +6, +6 (wrap), +6, +6 (wrap)
            time.sleep(0.15)  # several read periods per step
            _write(pkg0 / "energy_uj", value)
        time.sleep(0.15)
    assert meter.record.joules == pytest.approx(24.0)


def test_unreadable_rapl_is_skipped(tmp_path):
    """A zone whose energy_uj cannot be read (root-only since 2020) is not a source."""
    zone = make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    (zone / "energy_uj").unlink()
    (zone / "energy_uj").mkdir()  # reading it raises even as root, unlike chmod 000
    assert EnergyMeter(powercap_root=tmp_path, cuda_available=lambda: False).source == "estimate"
    forced = EnergyMeter(source="rapl", powercap_root=tmp_path, cuda_available=lambda: False)
    assert forced.source == "none"
    with forced:
        pass
    assert forced.record.joules is None and forced.record.co2_grams is None


def fake_energy_nvml(state: dict, supported: bool = True) -> SimpleNamespace:
    """A pynvml stand-in whose total-energy counter reads state['mj']."""

    def total_energy(handle):
        if not supported:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return state["mj"]

    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: f"handle-{i}",
        nvmlDeviceGetTotalEnergyConsumption=total_energy,
    )


def test_nvml_counter_is_preferred(tmp_path):
    """With a GPU whose NVML has an energy counter, auto uses it (millijoules -> joules)."""
    make_zone(tmp_path, "intel-rapl:0", "package-0", 0)  # RAPL present but ranked lower
    state = {"mj": 1_000_000}
    meter = EnergyMeter(nvml=fake_energy_nvml(state), powercap_root=tmp_path, cuda_available=lambda: True)
    assert meter.source == "nvml"
    with meter:
        state["mj"] += 250_000
    assert meter.record.joules == pytest.approx(250.0)
    assert meter.record.source == "nvml"


def test_nvml_without_energy_counter_falls_through(tmp_path):
    """A GPU too old for the energy counter, or no GPU at all, does not select NVML."""
    state = {"mj": 0}
    old_gpu = EnergyMeter(
        nvml=fake_energy_nvml(state, supported=False), powercap_root=tmp_path, cuda_available=lambda: True
    )
    no_gpu = EnergyMeter(nvml=fake_energy_nvml(state), powercap_root=tmp_path, cuda_available=lambda: False)
    assert old_gpu.source == no_gpu.source == "estimate"


def test_source_none_measures_nothing():
    """source='none' gives None joules and CO2."""
    with EnergyMeter(source="none") as meter:
        burn_cpu(0.01)
    rec = meter.record
    assert (rec.source, rec.joules, rec.co2_grams) == ("none", None, None)
    assert rec.duration_s > 0


def test_co2_formula():
    """CO2 grams = joules / 3.6e6 * gCO2 per kWh, and None stays None."""
    assert co2_grams(3.6e6, 400.0) == pytest.approx(400.0)
    assert co2_grams(1800.0, 250.0) == pytest.approx(0.125)
    assert co2_grams(None) is None
    state = {"mj": 0}
    meter = EnergyMeter(nvml=fake_energy_nvml(state), cuda_available=lambda: True, grid_gco2_per_kwh=50.0)
    with meter:
        state["mj"] = 7_200_000  # 7200 J = 2 Wh
    assert meter.record.co2_grams == pytest.approx(2e-3 * 50.0)


def test_unknown_source_is_rejected():
    """A misspelt source raises ValueError at creation."""
    with pytest.raises(ValueError):
        EnergyMeter(source="rapl2")


def test_estimate_segments_are_counter_deltas(monkeypatch, tmp_path):
    """Each segment charges the CPU seconds between its own ends; the window charges all of them."""
    cpu_seconds = iter([0.0, 1.0, 3.0, 3.5, 4.0, 5.0])  # enter, segment 1 open/close, segment 2 open/close, exit
    fake_cpu_clock(monkeypatch, lambda: Times(next(cpu_seconds), 0.0, 0.0, 0.0))
    meter = EnergyMeter(source="estimate", powercap_root=tmp_path, cpu_tdp_w=40.0, cuda_available=lambda: False)
    with meter:
        with meter.segment() as first:
            pass
        with meter.segment() as second:
            pass
    assert first.record.joules == pytest.approx(2.0 * 10.0)
    assert second.record.joules == pytest.approx(0.5 * 10.0)
    assert meter.record.joules == pytest.approx(5.0 * 10.0)


def test_rapl_segments_integrate_their_own_reads(tmp_path):
    """A RAPL segment sums the counter's increase between its two synchronous reads."""
    pkg0 = make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter = EnergyMeter(powercap_root=tmp_path, cuda_available=lambda: False, rapl_hz=0.5)
    with meter:
        _write(pkg0 / "energy_uj", 1_000_000)  # before any segment: the window's only
        with meter.segment() as first:
            _write(pkg0 / "energy_uj", 3_000_000)
        _write(pkg0 / "energy_uj", 4_000_000)
        with meter.segment() as second:
            _write(pkg0 / "energy_uj", 4_500_000)
    assert first.record.joules == pytest.approx(2.0)
    assert second.record.joules == pytest.approx(0.5)
    assert meter.record.joules == pytest.approx(4.5)


def test_energy_segment_needs_an_open_window(tmp_path):
    """A segment outside `with meter:` is a usage error."""
    meter = EnergyMeter(source="estimate", powercap_root=tmp_path, cuda_available=lambda: False)
    with pytest.raises(RuntimeError, match="open window"):
        with meter.segment():
            pass
