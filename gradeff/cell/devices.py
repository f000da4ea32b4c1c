"""Device names: the one place that parses ``--gradeff-device`` and decides where cells run."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["DEVICES", "gpu_count", "pin_worker_device", "process_group_backend", "resolve_device", "validate_device",
           "worker_gpu", "xdist_worker_index"]

DEVICES = ("auto", "cpu", "cuda")


def validate_device(device: str) -> str:
    """Return ``device`` if it names a usable device (``auto``, ``cpu``, ``cuda`` or ``cuda:N``).

    torch is imported only to check a CUDA request, so validating options stays light.

    Raises:
        ValueError: unknown device, or ``cuda`` asked for without a usable GPU.
    """
    kind, _, index = device.partition(":")
    if kind not in DEVICES or (index and not (kind == "cuda" and index.isdigit())):
        raise ValueError(f"unknown device {device!r}; valid devices: {', '.join(DEVICES)} (or cuda:N)")
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but torch sees no usable CUDA GPU; use cpu or auto")
    return device


def resolve_device(device: str) -> torch.device:
    """The ``torch.device`` for ``device``; ``auto`` → ``cuda`` when a GPU is usable, else ``cpu``.

    Raises:
        ValueError: as :func:`validate_device`.
    """
    import torch

    validate_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def gpu_count() -> int:
    """CUDA devices torch can use (0 on a CPU-only machine; never asks a device that is not there)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def xdist_worker_index(worker: str | None) -> int | None:
    """``I`` of a pytest-xdist worker name ``gwI`` (``PYTEST_XDIST_WORKER``); ``None`` outside xdist."""
    match = re.fullmatch(r"gw(\d+)", worker or "")
    return int(match.group(1)) if match else None


def worker_gpu(worker_index: int | None, count: int) -> int | None:
    """The GPU of worker ``I``: ``I mod count`` (round-robin, so more workers than GPUs share them evenly).

    ``None`` when there is no worker or no GPU: a CPU run is never given a GPU index.
    """
    if worker_index is None or count < 1:
        return None
    return worker_index % count


def pin_worker_device(device: str, *, worker: str | None = None,
                      count: Callable[[], int] = gpu_count) -> str:
    """The device an xdist worker trains on: ``auto`` or ``cuda`` become ``cuda:<I mod count>``.

    One GPU per worker keeps cells from sharing a device (their times, peaks and energy would mix);
    ``-n`` larger than the GPU count puts workers ``I`` and ``I + count`` on the same GPU. ``cpu`` and an
    explicit ``cuda:N`` are kept as given, and so is everything outside xdist or without a GPU.

    Args:
        device: ``--gradeff-device``'s value.
        worker: the worker name; default ``$PYTEST_XDIST_WORKER``.
        count: how many GPUs are usable (injectable, so tests can pretend a machine has several).
    """
    if device not in ("auto", "cuda"):
        return device
    index = xdist_worker_index(worker if worker is not None else os.environ.get("PYTEST_XDIST_WORKER"))
    if index is None:
        return device
    gpu = worker_gpu(index, count())
    return device if gpu is None else f"cuda:{gpu}"


def process_group_backend(device: str) -> str:
    """The torch.distributed backend a sharded cell on ``device`` joins: NCCL between GPUs, gloo on a CPU."""
    return "nccl" if resolve_device(device).type == "cuda" else "gloo"
