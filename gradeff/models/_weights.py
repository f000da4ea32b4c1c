"""Shared helpers for the model builders: build on a device, or load local weights."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["instantiate"]


def instantiate(model_cls, config, *, weights_dir: str | Path | None, device):
    """Instantiate ``model_cls`` from ``config`` (random init) or from a local weights directory.

    Loading never touches the network (``local_files_only``) and never runs repository code
    (no ``trust_remote_code``), so a benchmark run cannot silently download or execute anything.
    """
    if weights_dir is not None:
        path = Path(weights_dir)
        if not path.is_dir():
            raise FileNotFoundError(f"weights directory {path} does not exist")
        return model_cls.from_pretrained(path, local_files_only=True).to(device)
    # The meta device builds the module tree without allocating storage: paper-size
    # parameter counts cost milliseconds and no memory.
    with torch.device(device):
        return model_cls(config)
