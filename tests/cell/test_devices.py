"""One GPU per xdist worker: round-robin pinning, the GPU's index and UUID in the environment, CPU untouched."""

import types

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gradeff.cell import environment as environment_module
from gradeff.cell.devices import pin_worker_device, worker_gpu, xdist_worker_index
from gradeff.meters import _nvml as nvml_module

PLUGIN = ("-p", "gradeff.pytest_plugin")


def test_worker_names():
    assert [xdist_worker_index(name) for name in ("gw0", "gw7", "gw12")] == [0, 7, 12]
    assert [xdist_worker_index(name) for name in (None, "", "master", "gw", "gwx")] == [None] * 5


@given(workers=st.integers(1, 40), gpus=st.integers(1, 9))
def test_round_robin_uses_every_gpu_evenly(workers, gpus):
    """Worker I gets GPU I mod count: every GPU is used when workers >= GPUs, loads differ by at most one."""
    assigned = [worker_gpu(i, gpus) for i in range(workers)]
    assert all(0 <= gpu < gpus for gpu in assigned)
    loads = [assigned.count(gpu) for gpu in range(gpus)]
    assert max(loads) - min(loads) <= 1
    assert len(set(assigned)) == min(workers, gpus)


def test_pinning_with_a_fake_device_list():
    """auto and cuda are pinned under xdist; cpu, an explicit cuda:N, no worker and no GPU are left as they are."""
    def four():
        return 4

    assert [pin_worker_device("auto", worker=f"gw{i}", count=four) for i in range(6)] == [
        "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]
    assert pin_worker_device("cuda", worker="gw5", count=lambda: 2) == "cuda:1"
    assert pin_worker_device("cpu", worker="gw1", count=four) == "cpu"
    assert pin_worker_device("cuda:3", worker="gw1", count=four) == "cuda:3"
    assert pin_worker_device("auto", worker="", count=four) == "auto"
    # No GPU: nothing is invented, not even a 0.
    assert pin_worker_device("auto", worker="gw1", count=lambda: 0) == "auto"
    assert worker_gpu(3, 0) is None and worker_gpu(None, 2) is None


def test_pinning_reads_torch_and_the_worker_variable(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pin_worker_device("auto") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pin_worker_device("auto") == "auto"


def test_environment_names_the_gpu_by_index_and_uuid(monkeypatch):
    gpus = {0: "GPU-aaaa", 1: "GPU-bbbb"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: f"Fake {index}")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(uuid=gpus[index]))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(nvml_module, "load_nvml", lambda: None)
    environment_module.environment.cache_clear()
    try:
        info = environment_module.environment("cuda:1")
        assert (info["gpu_index"], info["gpu_uuid"], info["device_name"]) == (1, "GPU-bbbb", "Fake 1")
        assert environment_module.environment("cuda")["gpu_index"] == 0
    finally:
        environment_module.environment.cache_clear()
    cpu = environment_module.environment("cpu")
    assert cpu["gpu_index"] is None and cpu["gpu_uuid"] is None
    environment_module.environment.cache_clear()


PINNED_TEST = """
import os
import pytest
from gradeff.pytest.options import SETTINGS

@pytest.mark.parametrize("i", range(6))
def test_device(request, i):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    expected = os.environ["EXPECTED"].format(gpu=int(worker[2:]) % 2)
    assert request.config.stash[SETTINGS].device == expected
"""

FAKE_TWO_GPUS = """
import os
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 2
"""


@pytest.mark.parametrize(("fake", "expected"), [(True, "cuda:{gpu}"), (False, "auto")])
def test_xdist_workers_are_pinned(pytester, monkeypatch, fake, expected):
    """-n 3 on a machine with two (fake) GPUs: gw0, gw1, gw2 train on cuda:0, cuda:1, cuda:0; on CPU nothing changes."""
    pytester.makepyfile(test_pinned=PINNED_TEST)
    if fake:
        pytester.makeconftest(FAKE_TWO_GPUS)
    monkeypatch.setenv("EXPECTED", expected)
    outcome = pytester.runpytest_subprocess(*PLUGIN, "-n", "3", f"--gradeff-results={pytester.path / 'r.jsonl'}")
    outcome.assert_outcomes(passed=6)


def test_a_pinned_cells_meters_watch_its_gpu_only():
    """A cell on cuda:1 opens its GPU and energy meters on device 1 (on this CPU machine they then read nothing)."""
    from gradeff.cell.metering import EpochMetering

    metering = EpochMetering(device=torch.device("cuda", 1))
    assert metering.meters["gpu"].device_index == 1 and metering.meters["energy"]._device_index == 1
    assert metering.meters["gpu"].available is torch.cuda.is_available()
