"""Exact, device-agnostic memory breakdown of a training step.

A training step holds four kinds of tensors: parameters, gradients, optimizer state and
activations saved for the backward pass. The first three are read off the model and the
optimizer after the step; activations are counted while the forward pass runs, through
``torch.autograd.graph.saved_tensors_hooks``, which autograd calls for every tensor it
saves. Counting from tensors rather than from an allocator makes the figures exact,
identical on CPU and GPU, and free of allocator caching and fragmentation; the
allocator's view is the GPU meter's job.

Sizes are of *storages*, deduplicated by address, because that is what occupies memory:
a transposed weight saved by a linear layer is a view of the weight and costs nothing
extra, and two ops saving the same activation save it once.

A sharded (FSDP2) parameter, its gradient and its optimizer state are DTensors whose ``numel()``
is the whole tensor's; this process holds only its local shard, which is what is counted.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradeff.meters.peak import LivePeakTracker
from gradeff.meters.storage import storage_of, tensor_bytes

__all__ = [
    "ActivationCounter",
    "MemoryBreakdown",
    "gradient_bytes",
    "logical_numel",
    "measure_step_memory",
    "optimizer_state_bytes",
    "parameter_bytes",
    "parameter_counts",
    "trainable_parameter_bytes",
]


def _storage_ptrs(tensors: Iterable[torch.Tensor]) -> set[tuple[str, int]]:
    keys = set()
    for t in tensors:
        _, key, _ = storage_of(t)
        if key is not None:
            keys.add(key)
    return keys


def _quant_state_tensors(state: Any) -> list[torch.Tensor]:
    """The tensors of a bitsandbytes ``QuantState`` (absmax, code, offset; nested for double quantisation)."""
    if state is None:
        return []
    tensors = [t for t in (getattr(state, name, None) for name in ("absmax", "code", "offset"))
               if isinstance(t, torch.Tensor)]
    return tensors + _quant_state_tensors(getattr(state, "state2", None))


def logical_numel(p: torch.Tensor) -> int:
    """The number of values ``p`` stands for: a 4-bit parameter packs two values per byte, and its quant state
    knows the shape it stands for."""
    shape = getattr(getattr(p, "quant_state", None), "shape", None)
    return int(torch.Size(shape).numel()) if shape is not None else p.numel()


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of all parameters of a model, quantisation constants included.

    Tied parameters (e.g. input embedding and output projection) are counted once,
    because ``model.parameters()`` yields each ``Parameter`` object once. A 4-bit weight
    (bitsandbytes ``Params4bit``) counts its packed bytes plus its per-block scaling
    constants, which live beside it and not as parameters.

    Args:
        model: The model.

    Returns:
        ``sum(numel * element_size)`` over the parameters and their quantisation states.
    """
    return sum(tensor_bytes(p) + sum(tensor_bytes(t) for t in _quant_state_tensors(getattr(p, "quant_state", None)))
               for p in model.parameters())


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """How many values the model's parameters hold, in all and trainable.

    A 4-bit weight counts the values it stands for (its unpacked shape), not its packed bytes,
    so QLoRA and LoRA report the same total for the same backbone.

    Returns:
        ``{"total": ..., "trainable": ...}``.
    """
    counts = {"total": 0, "trainable": 0}
    for p in model.parameters():
        n = logical_numel(p)
        counts["total"] += n
        counts["trainable"] += n if p.requires_grad else 0
    return counts


def trainable_parameter_bytes(model: nn.Module) -> int:
    """Bytes of the parameters with ``requires_grad``.

    Args:
        model: The model.

    Returns:
        ``sum(numel * element_size)`` over the trainable parameters.
    """
    return sum(tensor_bytes(p) for p in model.parameters() if p.requires_grad)


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of the gradients currently held in the parameters' ``.grad``.

    Parameters whose ``.grad`` is ``None`` (frozen, unused, or cleared with
    ``zero_grad(set_to_none=True)``) hold none and count zero.

    Args:
        model: The model.

    Returns:
        ``sum(numel * element_size)`` over the present gradients.
    """
    return sum(tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in an optimizer's state, scalar step counters included.

    Tensors sharing a storage are counted once, with the storage's size. Non-tensor
    state (Python numbers, ``None`` momentum buffers) costs no tensor memory and counts
    zero. State is created lazily by the first ``step()``, so call this after one.

    Args:
        optimizer: Any ``torch.optim.Optimizer`` (or one with the same ``state``
            mapping of parameter to dict).

    Returns:
        The total in bytes.
    """
    seen: set[tuple[str, int]] = set()
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if not isinstance(value, torch.Tensor):
                continue
            _, key, nbytes = storage_of(value)
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
            total += nbytes
    return total


class ActivationCounter:
    """Context manager measuring the bytes of storages autograd saves for backward.

    Storages of the model's parameters and buffers are excluded: autograd saves weights
    (or views of them) for the backward of most layers, but they are not activations and
    are already counted by :func:`parameter_bytes`.

    Each storage is counted once, however many ops save it or views of it, and only while
    it is alive: the counter follows the storages it has seen through weak references, so
    it knows when a backward pass frees them. ``saved_bytes`` is the peak of the bytes
    saved and still alive, which for a single forward pass is simply the sum of the
    distinct storages it saved, and for several micro-batches (gradient accumulation) is
    the largest set held at once rather than their sum.

    Regions under non-reentrant activation checkpointing
    (``torch.utils.checkpoint(..., use_reentrant=False)``) install their own saved-tensor
    hooks, which take precedence inside the region; what is left visible here is what
    checkpointing actually keeps: the region's inputs (saved through autograd when the
    region starts) and whatever runs outside checkpointed regions. The recomputation in
    the backward pass is likewise handled by checkpointing's own hooks.

    Example::

        with ActivationCounter(model) as counter:
            loss = model(**batch).loss
        loss.backward()
        print(counter.saved_bytes)
    """

    def __init__(self, model: nn.Module | None = None) -> None:
        """Create a counter.

        Args:
            model: Model whose parameters and buffers are not activations. Their
                addresses are read when the window opens, so the model may still be
                moved between construction and use.
        """
        self._model = model
        self._excluded: set[tuple[str, int]] = set()
        # key -> (weak reference to the storage, its bytes). torch keeps one Python
        # object per live storage, so the reference dies exactly when the storage does.
        self._live: dict[tuple[str, int], tuple[weakref.ref[Any], int]] = {}
        # Backward passes on CUDA run (and free saved tensors) on autograd's device
        # threads, so the death callbacks may race with the forward thread's hook. It is
        # reentrant because a garbage collection triggered inside the locked section can
        # free a storage and run a callback on the same thread.
        self._lock = threading.RLock()
        self._live_bytes = 0
        self._hooks: Any = None
        self.saved_bytes = 0
        """Peak bytes of distinct, alive, non-parameter storages saved in the window."""
        self.total_saved_bytes = 0
        """Bytes of every distinct storage saved in the window, freed or not."""
        self.saved_tensors = 0
        """Number of times autograd saved a tensor in the window (duplicates included)."""

    def __enter__(self) -> ActivationCounter:
        model = self._model
        self._excluded = _storage_ptrs([*model.parameters(), *model.buffers()]) if model is not None else set()
        with self._lock:
            self._live, self._live_bytes = {}, 0
        self.saved_bytes = self.total_saved_bytes = self.saved_tensors = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        self._hooks = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        # Returning the tensor itself keeps autograd's behaviour (and memory) unchanged:
        # this hook only looks.
        self.saved_tensors += 1
        storage, key, nbytes = storage_of(t)
        if key is None:
            # No single storage (sparse, subclasses) or an empty/meta one: no address whose
            # lifetime can be followed, so it counts as saved for good (empty ones are ~0 B).
            self._add(nbytes)
            return t
        if key in self._excluded:
            return t
        with self._lock:
            entry = self._live.get(key)
            if entry is not None and entry[0]() is storage:
                return t  # already counted
            if entry is not None:
                # A storage freed without our callback having run yet, whose address is
                # now reused: retire the old one before counting the new.
                self._live_bytes -= entry[1]
            ref = weakref.ref(storage, functools.partial(self._freed, key))
            self._live[key] = (ref, nbytes)
            self._add(nbytes)  # the lock is reentrant
        return t

    def _add(self, nbytes: int) -> None:
        with self._lock:
            self._live_bytes += nbytes
            self.total_saved_bytes += nbytes
            self.saved_bytes = max(self.saved_bytes, self._live_bytes)

    def _freed(self, key: tuple[str, int], ref: weakref.ref[Any]) -> None:
        with self._lock:
            entry = self._live.get(key)
            # The entry may already belong to a newer storage at the same address.
            if entry is not None and entry[0] is ref:
                del self._live[key]
                self._live_bytes -= entry[1]

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """Tensor memory of one training step, by kind, in bytes.

    Attributes:
        parameter_bytes: All parameters (tied ones once).
        trainable_parameter_bytes: Parameters with ``requires_grad``.
        gradient_bytes: Gradients present after the step.
        optimizer_state_bytes: Optimizer state after the step, step counters included.
        activation_bytes: Distinct storages saved for backward during the step,
            parameters and buffers excluded.
        peak_bytes: The real peak of tensor memory alive at once during the step (every tensor
            the step's ops create, plus parameters, buffers and optimizer state), by the
            live-tensor tracker; ``None`` where the step was not tracked.
        peak_by_device: The same per device (``{"cpu": ..., "cuda:0": ...}``): with host
            offload the activations a GPU sheds show up on ``cpu``.
    """

    parameter_bytes: int
    trainable_parameter_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int
    activation_bytes: int
    peak_bytes: int | None = None
    peak_by_device: dict[str, int] | None = None


def measure_step_memory(
    model: nn.Module, optimizer: torch.optim.Optimizer, step_fn: Callable[[], Any], *, track_peak: bool = True
) -> MemoryBreakdown:
    """Run one training step under an :class:`ActivationCounter` and a live-tensor tracker; break its memory down.

    Run it on a representative step, after at least one warm-up step if the optimizer's
    state or the model's buffers change shape on the first one.

    Args:
        model: The model being trained.
        optimizer: Its optimizer.
        step_fn: Runs forward, backward and ``optimizer.step()`` once. It should clear
            gradients before the forward pass, not after the step, or
            ``gradient_bytes`` will be read as zero.
        track_peak: also measure the live peak (off for a compiled model, which a dispatch mode would
            send back to eager execution: the figure would describe another step).

    Returns:
        The breakdown, read after the step.
    """
    # Last step's gradients die at this step's zero_grad; dropped first, they are not counted as
    # resident for the whole step (a tracker's baseline stays counted).
    optimizer.zero_grad(set_to_none=True)
    tracker = LivePeakTracker.for_training(model, optimizer) if track_peak else None
    with tracker or nullcontext(), ActivationCounter(model) as counter:
        step_fn()
    return MemoryBreakdown(
        parameter_bytes=parameter_bytes(model),
        trainable_parameter_bytes=trainable_parameter_bytes(model),
        gradient_bytes=gradient_bytes(model),
        optimizer_state_bytes=optimizer_state_bytes(optimizer),
        activation_bytes=counter.saved_bytes,
        peak_bytes=tracker.peak_bytes if tracker is not None else None,
        peak_by_device=dict(tracker.peak_by_device) if tracker is not None else None,
    )
