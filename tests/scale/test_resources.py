"""Each shard's job is sized from what its cells are expected to take: recorded wall times, else the dry run's."""

import math

import pytest

from gradeff.records.store import append_record
from gradeff.scale.resources import (
    FALLBACK_TIMEOUT_MIN,
    PROCESS_BYTES,
    START_SECONDS,
    CellEstimate,
    ShardEstimate,
    cell_estimates,
    recorded_estimates,
    shard_estimates,
    size_array,
)
from tests.conftest import build_record, meters

GIB = 2**30


def _plan(target: str = "cpu", **cells) -> dict:
    return {"profile": "paper", "pretraining": {"vit_s": 600.0}, "target": {"name": target},
            "cells": {cell: {"model": cell.split("-")[0], "status": "ready", "seconds": None,
                             "predicted_peak_bytes": None, "pretrains": False} | values
                      for cell, values in cells.items()}}


def test_records_come_first_then_the_dry_run_and_a_skipped_cell_takes_nothing():
    plan = _plan(**{"vit-adam-standard": {"seconds": 100.0, "predicted_peak_bytes": GIB},
                    "vit-sgd-standard": {"seconds": 50.0, "predicted_peak_bytes": GIB},
                    "vim-adam-standard": {"status": "skipped: no CUDA"},
                    "vim-adam-budget": {"status": "oom: every block checkpointed still needs 3.7 GiB > 1.8 GiB",
                                        "seconds": 600.0},
                    "llm-adam-standard": {"status": "n/a: NotImplementedError: image classifiers only"}})
    recorded = {"vit-adam-standard": CellEstimate(seconds=7.0, memory_bytes=600 * 2**20, source="recorded")}
    estimates = cell_estimates(plan, recorded)
    assert estimates["vit-adam-standard"] == recorded["vit-adam-standard"]
    assert estimates["vit-sgd-standard"] == CellEstimate(seconds=50.0, memory_bytes=GIB + PROCESS_BYTES,
                                                         source="dry run")
    assert estimates["vim-adam-standard"].seconds == estimates["vim-adam-budget"].seconds == 0.0
    assert estimates["llm-adam-standard"].seconds is None


def test_a_shard_sums_its_cells_and_counts_the_pretraining_its_backbone_needs():
    plan = _plan(**{"vit_s-lora-standard-cifar100": {"model": "vit_s", "seconds": 100.0, "pretrains": True,
                                                     "predicted_peak_bytes": 3 * GIB},
                    "vit_s-full-standard-cifar100": {"model": "vit_s", "seconds": 200.0, "pretrains": True,
                                                     "predicted_peak_bytes": 5 * GIB}})
    estimates = cell_estimates(plan)
    cell_of = {f"t[{cell}]": cell for cell in plan["cells"]} | {"own::test": None}
    shards = shard_estimates([["t[vit_s-lora-standard-cifar100]", "t[vit_s-full-standard-cifar100]"], ["own::test"],
                              []], cell_of, estimates, plan)
    # Both cells, plus the backbone's pretraining once (whichever shard gets there first pretrains it).
    assert shards[0] == ShardEstimate(index=1, tests=2, seconds=900.0, memory_bytes=5 * GIB + PROCESS_BYTES,
                                      unknown=())
    assert shards[1].seconds is None and shards[1].unknown == ("own::test",)
    assert shards[2] == ShardEstimate(index=3, tests=0, seconds=0.0, memory_bytes=None, unknown=())


def test_the_longest_shard_sets_the_time_limit_with_its_margin_and_the_largest_cell_the_memory():
    shards = [ShardEstimate(index=1, tests=3, seconds=600.0, memory_bytes=3 * GIB, unknown=()),
              ShardEstimate(index=2, tests=3, seconds=900.0, memory_bytes=2 * GIB, unknown=())]
    sizing = size_array(shards, time_margin=2.0, gpus=1)
    assert sizing.time_min == math.ceil((900 * 2 + START_SECONDS) / 60) == 35
    assert sizing.mem_gb == 5.0  # 3 GiB × 1.5, rounded up
    assert sizing.basis == (
        "time limit 35 min: longest shard (shard 2, 3 tests) expected 15 min 0 s × 2 + 300 s to start",
        "memory 5 GB: largest cell expected 3.00 GiB × 1.5", "GPUs: --gres=gpu:1 per shard")
    given = size_array(shards, time_margin=2.0, gpus=0, timeout_min=90, mem_gb=16)
    assert (given.time_min, given.mem_gb) == (90, 16)


def test_without_an_estimate_for_every_cell_the_limit_falls_back_and_says_why():
    shards = [ShardEstimate(index=1, tests=2, seconds=None, memory_bytes=None,
                            unknown=("llm-adam-standard", "llm-sgd-standard"))]
    sizing = size_array(shards, time_margin=2.0, gpus=0)
    assert (sizing.time_min, sizing.mem_gb) == (FALLBACK_TIMEOUT_MIN, None)
    assert sizing.basis[0].startswith("time limit 1440 min: no estimate for llm-adam-standard, llm-sgd-standard")


def test_recorded_estimates_read_wall_times_and_peak_rss_at_the_profile(tmp_path):
    path = tmp_path / "earlier.jsonl"
    append_record(path, build_record("llm-adam-standard", seconds=(1.0, 1.0), meters=meters()))
    append_record(path, build_record("llm-adam-standard", "interrupted", seconds=(50.0, 50.0)))
    found = recorded_estimates([path], profile="tiny")
    assert found["llm-adam-standard"].seconds == pytest.approx(3.0)  # total_seconds, the interrupted run left out
    assert found["llm-adam-standard"].memory_bytes == 400 * 2**20  # its peak RSS
    assert found["llm-adam-standard"].source == "recorded"


def test_on_a_gpu_the_predicted_peak_is_the_devices_not_the_hosts():
    plan = _plan("H100", **{"vit-adam-standard": {"seconds": 100.0, "predicted_peak_bytes": 60 * GIB}})
    assert cell_estimates(plan)["vit-adam-standard"] == CellEstimate(seconds=100.0, memory_bytes=None,
                                                                     source="dry run")
