"""Tests of the process-tree RSS meter."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import psutil
import pytest

from gradeff.meters.ram import RamMeter, RamRecord

# Their figures are times and meter readings: run while no other test does (tests/conftest.py).
pytestmark = pytest.mark.serial

MB = 1_000_000


def test_record_is_plausible():
    """RSS lies between 10 MB and total memory, peak >= mean, and both ends are sampled."""
    with RamMeter(hz=10) as meter:
        time.sleep(0.05)
    rec = meter.record
    assert isinstance(rec, RamRecord)
    assert 10 * MB < rec.peak_rss_bytes <= psutil.virtual_memory().total
    assert isinstance(rec.peak_rss_bytes, int)
    assert rec.peak_rss_bytes >= rec.mean_rss_bytes > 0
    assert rec.samples >= 2
    assert 0 < rec.peak_system_percent <= 100
    assert 0.05 <= rec.duration_s < 5


def test_allocation_inside_window_raises_peak():
    """A 200 MB bytearray alive inside the window raises the peak RSS by at least 150 MB."""
    baseline = psutil.Process().memory_info().rss
    with RamMeter(hz=10) as meter:
        buf = bytearray(200 * 2**20)  # zero-filled, so every page is touched
        time.sleep(0.05)
    assert meter.record.peak_rss_bytes - baseline >= 150 * MB
    del buf


def spawn_child_holding_100mb() -> subprocess.Popen:
    """Start a Python child that holds 100 MB, and return once its RSS shows it."""
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(100 * 2**20); import time; time.sleep(30)"])
    child_proc = psutil.Process(child.pid)
    deadline = time.monotonic() + 10
    while child_proc.memory_info().rss < 100 * MB:
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            pytest.fail("child never reached 100 MB")
        time.sleep(0.02)
    return child


def test_children_are_included():
    """The RSS of a child process holding 100 MB is added to the parent's."""
    child = spawn_child_holding_100mb()
    try:
        own = psutil.Process().memory_info().rss
        with RamMeter(hz=10) as meter:
            pass
        assert meter.record.peak_rss_bytes >= own + 90 * MB
    finally:
        child.kill()
        child.wait()


def test_child_started_inside_window_is_seen():
    """A child started after the first sample is found by the final one, despite the list cache."""
    own = psutil.Process().memory_info().rss
    with RamMeter(hz=10, children_refresh_s=60) as meter:
        child = spawn_child_holding_100mb()
    try:
        assert meter.record.peak_rss_bytes >= own + 90 * MB
    finally:
        child.kill()
        child.wait()


def test_periodic_samples_are_taken():
    """At 20 Hz a 0.3 s window has more samples than its two ends."""
    with RamMeter(hz=20) as meter:
        time.sleep(0.3)
    assert meter.record.samples >= 4


def test_stop_returns_promptly():
    """Leaving the window at hz=2 takes < 0.5 s: a liveness check of the thread, not a speed claim."""
    meter = RamMeter(hz=2)
    meter.__enter__()
    time.sleep(0.1)
    t0 = time.perf_counter()
    meter.__exit__(None, None, None)
    assert time.perf_counter() - t0 < 0.5


def test_record_before_exit_raises_and_record_is_frozen():
    """The record exists only after the window closes, and cannot be modified."""
    meter = RamMeter()
    with pytest.raises(RuntimeError):
        _ = meter.record
    with meter:
        pass
    with pytest.raises(dataclasses.FrozenInstanceError):
        meter.record.samples = 0  # type: ignore[misc]


def test_unknown_pid_fails_at_creation():
    """A pid that names no process is rejected when the meter is created."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(psutil.NoSuchProcess):
        RamMeter(pid=dead.pid)


def _kernel_peak_available() -> bool:
    return RamMeter()._kernel.available


needs_kernel_peak = pytest.mark.skipif(not _kernel_peak_available(), reason="kernel RSS high-water mark not resettable")


# The kernel's high-water mark covers this process alone, so the meter uses it only for a process without
# children; an earlier test may leave one behind (multiprocessing's forkserver), so the spikes are measured in
# a fresh interpreter.
_SPIKES = """
import json, psutil
from dataclasses import asdict
from gradeff.meters.ram import RamMeter
baseline = psutil.Process().memory_info().rss
with RamMeter(hz=0.01) as meter:  # no background sample during the segments, however long a loaded host takes
    with meter.segment() as first:
        buf = bytearray(200 * 2**20)
        del buf
    with meter.segment() as second:
        pass
print(json.dumps({"baseline": baseline, "first": asdict(first.record), "second": asdict(second.record),
                  "window": asdict(meter.record)}))
"""


@pytest.fixture(scope="module")
def spikes() -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", _SPIKES], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@needs_kernel_peak
def test_kernel_peak_catches_a_spike_between_samples(spikes):
    """200 MB allocated and freed between two samples is in the peak, exactly; the samples miss it."""
    rec, baseline = spikes["first"], spikes["baseline"]
    assert rec["peak_source"] == "kernel"
    assert rec["peak_rss_bytes"] - baseline >= 190 * 2**20
    assert rec["samples"] == 2 and rec["mean_rss_bytes"] - baseline < 50 * 2**20  # what sampling alone saw
    assert spikes["window"]["peak_rss_bytes"] >= rec["peak_rss_bytes"] and spikes["window"]["peak_source"] == "kernel"


@needs_kernel_peak
def test_each_segment_has_its_own_peak(spikes):
    """A spike in the first segment raises its peak and the window's, not the second segment's."""
    first, second, window = spikes["first"], spikes["second"], spikes["window"]
    assert first["peak_rss_bytes"] - second["peak_rss_bytes"] >= 150 * MB
    assert window["peak_rss_bytes"] == first["peak_rss_bytes"]
    assert first["duration_s"] < window["duration_s"]


def _segment_beside(child: subprocess.Popen):
    """An empty segment metered while ``child`` runs; the child is ended afterwards. Returns (window, segment)."""
    try:
        with RamMeter(hz=10) as meter:
            with meter.segment() as seg:
                pass
    finally:
        child.kill()
        child.wait()
    return meter.record, seg.record


def test_children_make_the_peak_a_sampled_lower_bound():
    """With a child process the tree's peak comes from samples and says so."""
    window, segment = _segment_beside(spawn_child_holding_100mb())
    assert window.peak_source == segment.peak_source == "sampled"
    assert segment.peak_rss_bytes >= 100 * MB


@needs_kernel_peak
def test_python_helper_processes_are_not_children():
    """An idle multiprocessing helper (a resource tracker) beside the process leaves its peak exact; a worker not."""
    helper = subprocess.Popen([sys.executable, "-c", "from multiprocessing.resource_tracker import main; "
                               "import time; time.sleep(60)"])
    time.sleep(0.2)
    window, segment = _segment_beside(helper)
    assert window.peak_source == segment.peak_source == "kernel"


def test_segment_needs_an_open_window():
    """A segment outside `with meter:` is a usage error."""
    meter = RamMeter()
    with pytest.raises(RuntimeError, match="open window"):
        with meter.segment():
            pass


def _vm_hwm_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        line = next(line for line in handle if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


@needs_kernel_peak
def test_another_process_is_sampled_and_its_mark_left_alone():
    """Watching another pid samples its RSS and never resets its high-water mark."""
    script = ("b = bytearray(300 * 2**20); del b; b = bytearray(100 * 2**20); print('ready', flush=True); "
              "import time; time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        hwm_before = _vm_hwm_bytes(child.pid)
        with RamMeter(hz=10, pid=child.pid) as meter:
            pass
        hwm_after = _vm_hwm_bytes(child.pid)
    finally:
        child.kill()
        child.wait()
    assert hwm_before >= 300 * MB
    assert hwm_after == hwm_before  # a reset would have dropped it to the current ~100 MB
    assert meter.record.peak_source == "sampled"
    assert 100 * MB <= meter.record.peak_rss_bytes < hwm_before
