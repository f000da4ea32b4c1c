"""Device names: the one place that parses ``--gradeff-device`` and decides where cells run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["DEVICES", "resolve_device", "validate_device"]

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
