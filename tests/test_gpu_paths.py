"""The GPU paths on a real CUDA device: allocator peaks, NVML samples, the NVML energy counter.

Skipped on a machine without CUDA, where the same paths run against fakes (tests/meters). On a
GPU machine ``pytest tests/test_gpu_paths.py -s`` is the whole hardware check; it prints the
figures it asserted on.
"""

import pytest
import torch

from gradeff.cell.config import RunConfig
from gradeff.cell.run import run_cell
from gradeff.meters import EnergyMeter, GpuMeter
from gradeff.studies.grid import Cell

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

MIB = 2**20


def _nvml_usable() -> bool:
    return GpuMeter(device_index=torch.cuda.current_device()).nvml_ok


def test_allocator_peaks_are_per_segment_on_the_device():
    """A 256 MiB tensor alive in the first segment is in its peak, not in the second's."""
    index = torch.cuda.current_device()
    with GpuMeter(device_index=index, hz=50) as meter:
        with meter.segment() as first:
            block = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
            del block
            torch.cuda.synchronize()
        with meter.segment() as second:
            torch.cuda.synchronize()
    print(f"\nsegment peaks: {first.record.alloc_peak_bytes} B, {second.record.alloc_peak_bytes} B; "
          f"NVML samples {first.record.samples}/{second.record.samples}, name {meter.record.device_name}")
    assert first.record.alloc_peak_bytes >= 256 * MIB > second.record.alloc_peak_bytes
    assert first.record.reserved_peak_bytes >= first.record.alloc_peak_bytes
    assert meter.record.alloc_peak_bytes == first.record.alloc_peak_bytes
    assert meter.record.device_name


def test_cuda_cell_records_every_gpu_figure():
    """A tiny llm cell on CUDA: allocator peak ≥ weights + gradients + state, NVML and energy measured."""
    record = run_cell(Cell("llm", "adam", "standard"), RunConfig(profile="tiny", seed=0, epochs=2, device="cuda"))
    assert record.status == "ok", record.detail
    gpu, energy, memory = record.meters["gpu"], record.meters["energy"], record.meters["memory"]
    print(f"\ngpu: {gpu}\nenergy: {energy}\nmemory: {memory}\ncost: {record.meters['cost']}")
    assert gpu["available"] is True and gpu["device_name"]
    resident = memory["parameter_bytes"] + memory["gradient_bytes"] + memory["optimizer_state_bytes"]
    assert gpu["alloc_peak_bytes"] >= resident
    assert gpu["reserved_peak_bytes"] >= gpu["alloc_peak_bytes"]
    if _nvml_usable():
        assert gpu["samples"] >= 2 * len(record.epochs)  # both ends of every epoch
        assert 0 <= gpu["util_mean_percent"] <= 100
        assert gpu["mem_used_peak_bytes"] >= gpu["alloc_peak_bytes"]
        assert gpu["short_window"] is (gpu["duration_s"] < 1.0)
    if EnergyMeter(device_index=torch.cuda.current_device()).source == "nvml":
        assert energy["source"] == "nvml" and energy["joules"] > 0


def test_the_step_loop_does_not_wait_for_the_gpu():
    """No host synchronisation inside an optimizer step: the loop reads losses only at its checks.

    Under CUDA's sync debug mode every synchronising call warns from the Python line that made it; none
    may come from ``optimizer_step``. The others (the checks, the epoch's end, library code) are printed.
    """
    import inspect
    import warnings

    from gradeff.cell import loop
    from tests.cell.test_loop import _state

    state = _state(1, optimizer="adam")
    state.device = torch.device("cuda")
    state.model.to(state.device)
    state.check_every = 4
    loop.warm_up(state)
    lines, first = inspect.getsourcelines(loop.optimizer_step)
    step_lines = range(first, first + len(lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            stats = loop.train_epoch(state)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    where = sorted({f"{w.filename.rsplit('/', 1)[-1]}:{w.lineno}" for w in syncs})
    print(f"\n{len(syncs)} synchronising calls in {stats.optimizer_steps} steps, from {where}")
    assert not [w for w in syncs if w.filename == loop.__file__ and w.lineno in step_lines]


def test_bf16_cell_on_the_gpu_has_an_mfu():
    """A tiny llm cell in bf16 on CUDA: model FLOPs counted, MFU against the device's table peak, in (0, 1)."""
    record = run_cell(Cell("llm", "adam", "standard"),
                      RunConfig(profile="tiny", seed=0, epochs=2, device="cuda", precision="bf16"))
    assert record.status == "ok", record.detail
    compute = record.meters["compute"]
    print(f"\ncompute: {compute}\ngpu: {record.meters['gpu']['device_name']}")
    assert record.hparams["precision"] == "bf16"
    assert compute["flops_per_sample"] > 0 and compute["achieved_flops_per_s"] > 0
    if compute["peak_flops_per_s"] is not None:  # a device the table knows
        assert 0 < compute["mfu"] < 1
