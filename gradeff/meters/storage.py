"""What memory a tensor occupies: the storage behind it, deduplicated by address, and a sharded tensor's local part.

Shared by the step's memory breakdown (:mod:`gradeff.meters.memory`), the live-peak tracker
(:mod:`gradeff.meters.peak`) and the budget planner (:mod:`gradeff.axes.strategies.budget`), which must agree on what a
tensor costs.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["local_part", "storage_of", "tensor_bytes"]


def local_part(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this process holds: a DTensor's local shard, any other tensor itself.

    The class is recognised by name, so that measuring an unsharded cell never imports torch.distributed.
    """
    return t._local_tensor if type(t).__name__ == "DTensor" and hasattr(t, "_local_tensor") else t


def tensor_bytes(t: torch.Tensor) -> int:
    t = local_part(t)
    return t.numel() * t.element_size()


def storage_of(t: torch.Tensor) -> tuple[Any, tuple[str, int] | None, int]:
    """(storage, dedup key, bytes) behind ``t``; key ``None`` when there is no address to follow."""
    t = local_part(t)
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        # Sparse and some subclass tensors have no single storage: count the tensor itself.
        return None, None, tensor_bytes(t)
    ptr = storage.data_ptr()
    # Empty storages (and meta tensors) all sit at address 0; they must not merge.
    key = (str(t.device), ptr) if ptr else None
    return storage, key, storage.nbytes()
