"""Meters attached to real cells: what a CPU run records, and the memory laws on records."""

import dataclasses
import time

import pytest
import torch

import gradeff.cell.metering as metering_module
from gradeff.axes.optim import OPTIMIZERS
from gradeff.cell.config import RunConfig
from gradeff.cell.metering import EpochMetering, MeterSettings, SampledMeter, aggregate
from gradeff.cell.run import run_cell
from gradeff.meters import RamMeter, WindowMeter
from gradeff.studies.grid import Cell

CONFIG = RunConfig(profile="tiny", seed=0, epochs=2, device="cpu")
GPU_FIELDS = ("device_name", "util_mean_percent", "util_max_percent", "mem_used_peak_bytes", "power_mean_w",
              "alloc_peak_bytes", "reserved_peak_bytes")


def _epoch(peak, mean, samples, joules, util=None):
    return {
        "ram": {"peak_rss_bytes": peak, "peak_source": "kernel", "mean_rss_bytes": mean, "peak_system_percent": 10.0,
                "samples": samples, "duration_s": 1.0},
        "gpu": {"available": util is not None, "device_name": None, "util_mean_percent": util,
                "util_max_percent": util, "mem_used_peak_bytes": None, "power_mean_w": None, "alloc_peak_bytes": None,
                "reserved_peak_bytes": None, "samples": samples if util is not None else 0, "short_window": False,
                "duration_s": 1.0},
        "energy": {"joules": joules, "source": "estimate", "co2_grams": None, "duration_s": 1.0},
        "cost": {"reads_s": 0.001, "sampler_cpu_s": 0.002, "epoch_s": 1.0},
    }


def test_aggregate_takes_peaks_weighted_means_and_sums():
    """Cell figures: max of peaks, sample-weighted means, summed energy and durations."""
    cell = aggregate([_epoch(100, 50.0, 2, 3.0, util=10.0), _epoch(300, 200.0, 6, 5.0, util=50.0)], 400.0)
    assert cell["ram"]["peak_rss_bytes"] == 300 and cell["ram"]["samples"] == 8
    assert cell["ram"]["mean_rss_bytes"] == pytest.approx((50 * 2 + 200 * 6) / 8)
    assert cell["gpu"]["util_mean_percent"] == pytest.approx((10 * 2 + 50 * 6) / 8)
    assert cell["energy"]["joules"] == 8.0 and cell["energy"]["co2_grams"] == pytest.approx(8 / 3.6e6 * 400)
    assert cell["ram"]["duration_s"] == 2.0


def test_aggregate_keeps_unmeasured_as_none():
    """An unmeasured epoch makes the total unknown, never a partial sum or 0."""
    cell = aggregate([_epoch(None, None, 0, None), _epoch(None, None, 0, 2.0)], 400.0)
    assert cell["ram"]["peak_rss_bytes"] is None and cell["ram"]["mean_rss_bytes"] is None
    assert cell["energy"]["joules"] is None and cell["energy"]["co2_grams"] is None
    assert cell["gpu"]["util_mean_percent"] is None
    assert aggregate([], 400.0) == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only record")
def test_cpu_cell_records_rss_estimated_energy_breakdown_and_no_gpu_figures():
    """On a CPU machine: RSS and a labelled energy estimate per epoch and cell, every GPU field None."""
    record = run_cell(Cell("vit", "adam", "standard"), CONFIG)
    assert record.status == "ok", record.detail
    for meters in [record.meters] + [e.meters for e in record.epochs]:
        assert 50 * 2**20 < meters["ram"]["peak_rss_bytes"] < 64 * 2**30
        assert meters["energy"]["source"] == "estimate" and meters["energy"]["joules"] > 0
        assert meters["gpu"]["available"] is False
        assert all(meters["gpu"][name] is None for name in GPU_FIELDS)
        # No child processes in a cell: the peak is the kernel's exact one wherever Linux offers it.
        assert meters["ram"]["peak_source"] == ("kernel" if RamMeter()._kernel.available else "sampled")
        assert 0 < meters["cost"]["reads_s"] < meters["cost"]["epoch_s"]
    memory = record.meters["memory"]
    assert memory["parameter_bytes"] == memory["trainable_parameter_bytes"] == memory["gradient_bytes"] > 0
    assert memory["activation_bytes"] > 0


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_optimizer_state_bytes_follow_the_spec(optimizer):
    """A cell's measured optimizer-state bytes are exactly its optimizer's state law on the trainable parameters."""
    from gradeff.axes.models import build_model

    record = run_cell(Cell("llm", optimizer, "standard"), CONFIG)
    trainable = [p for p in build_model("llm", "tiny", device="meta").parameters() if p.requires_grad]
    assert record.meters["memory"]["optimizer_state_bytes"] == OPTIMIZERS[optimizer].state_bytes(trainable)


@pytest.mark.parametrize("model", ["llm", "vlm"])
def test_strategies_change_activation_bytes_as_designed(model):
    """Accumulation keeps the micro-batch's activation bytes; checkpointing cuts them by more than half."""
    bytes_of = {s: run_cell(Cell(model, "sgd", s), CONFIG).meters["memory"]["activation_bytes"]
                for s in ("standard", "accum", "checkpoint")}
    assert bytes_of["accum"] == bytes_of["standard"]
    assert bytes_of["checkpoint"] < 0.5 * bytes_of["standard"]


def test_aggregate_sums_the_metering_cost_and_keeps_the_peak_exact_only_if_every_epoch_is():
    """Cost parts add up with their share of epoch time; one sampled epoch makes the cell's peak sampled."""
    epochs = [_epoch(100, 50.0, 2, 3.0), _epoch(300, 200.0, 6, 5.0)]
    cell = aggregate(epochs, 400.0)
    assert cell["cost"]["reads_s"] == pytest.approx(0.002) and cell["cost"]["epoch_s"] == pytest.approx(2.0)
    assert cell["cost"]["fraction"] == pytest.approx((0.002 + 0.004) / 2.0)
    assert cell["ram"]["peak_source"] == "kernel"
    epochs[1]["ram"]["peak_source"] = "sampled"
    assert aggregate(epochs, 400.0)["ram"]["peak_source"] == "sampled"


@pytest.mark.serial
def test_run_needs_the_window_and_records_what_metering_cost():
    """run() outside `with metering:` raises; inside, each epoch carries its reads and sampler time."""
    metering = EpochMetering(device=torch.device("cpu"), settings=MeterSettings(hz=100))
    with pytest.raises(RuntimeError, match="window"):
        metering.run(lambda: None)
    with metering:
        results = [metering.run(lambda: time.sleep(0.2) or 7) for _ in range(2)]
    assert results == [7, 7] and len(metering.epochs) == 2
    for epoch in metering.epochs:
        cost = epoch["cost"]
        assert 0.2 <= cost["epoch_s"] < 1.0
        # Segment reads are synchronous: more than nothing, far less than the epoch.
        assert 0 < cost["reads_s"] < 0.05
        # About 20 background samples at 100 Hz, each costing the thread some CPU.
        assert 0 < cost["sampler_cpu_s"] < 0.1
        assert epoch["ram"]["samples"] >= 10


def test_a_pause_is_left_out_of_the_epochs_figures(monkeypatch):
    """Inside an epoch's segment, paused() closes the meters' piece and opens a new one after: the epoch is one
    record in a single segment's layout, its seconds those of the pieces (a fake clock: 2 s + 3 s of work around
    a 50 s pause), its energy the pieces' sum; the pause sees the figures so far."""
    import types

    import gradeff.cell.metering as metering_module

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(metering_module, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    metering = EpochMetering(device=torch.device("cpu"), settings=MeterSettings(hz=100))
    with pytest.raises(RuntimeError, match="inside a segment"):
        with metering.paused():
            pass
    seen = {}
    with metering:
        with metering.segment():
            clock.now += 2.0
            with metering.paused() as so_far:
                seen = so_far
                clock.now += 50.0
            clock.now += 3.0
        with metering.segment():
            clock.now += 1.0
    assert len(metering.epochs) == 2
    paused, plain = metering.epochs
    assert set(paused) == set(plain) and set(paused["energy"]) == set(plain["energy"])
    assert paused["cost"]["epoch_s"] == 5.0 and set(paused["cost"]) == set(plain["cost"])
    assert seen["cost"]["epoch_s"] == 2.0
    joules = [paused["energy"]["joules"], seen["energy"]["joules"]]
    assert None not in joules and joules[0] >= joules[1]


class _CountingMeter(WindowMeter):
    """A meter of its own: counts the segments it was asked for, each record being its running count."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def _open_window(self):
        self.count = 0

    def _close_window(self):
        return {"segments": self.count}

    def _begin_segment(self):
        return None

    def _end_segment(self, token):
        self.count += 1
        return _Count(segments=1)


@dataclasses.dataclass(frozen=True)
class _Count:
    segments: int


def test_a_meter_is_its_module_plus_its_entry_in_the_table(monkeypatch):
    """An entry added to SAMPLED_METERS is made with the cell's metering, opened around the epochs, read per epoch
    (pauses included) and combined into the cell's figures by its own rule, with no other change."""
    counting = SampledMeter("count", lambda settings, device: _CountingMeter(),
                            lambda segments, grid: {"segments": sum(s["segments"] for s in segments)})
    monkeypatch.setattr(metering_module, "SAMPLED_METERS", (*metering_module.SAMPLED_METERS, counting))
    metering = EpochMetering(device=torch.device("cpu"), settings=MeterSettings(hz=1.0))
    with metering:
        metering.run(lambda: None)
        with metering.segment():
            with metering.paused():
                pass
    assert [list(epoch) for epoch in metering.epochs] == [["ram", "gpu", "energy", "count", "cost"]] * 2
    # The second epoch was two pieces around its pause: its count combines them.
    assert [epoch["count"] for epoch in metering.epochs] == [{"segments": 1}, {"segments": 2}]
    assert aggregate(metering.epochs, 400.0)["count"] == {"segments": 3}
