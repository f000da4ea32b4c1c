"""Passes that must leave no trace: a measuring, planning, compiling or warm-up forward and backward.

A cell's model sees, before its first timed epoch, passes that are not training: the FLOP count, a
budget plan's measured pass, the over-budget check, torch.compile's first call, the warm-up. Each
runs the model in training mode, so each would move what a training step moves besides the weights:
BatchNorm's running statistics and batch counters (buffers) and the random-number generators (dropout,
stochastic depth). :func:`untouched` puts all of it back bit for bit, so a cell trains exactly as if
the pass had not happened, and a budget cell that checkpoints no block trains exactly as the standard
cell does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

__all__ = ["untouched"]


def _cuda_devices() -> list[int]:
    # Only devices whose generators exist: forking an uninitialised CUDA context would create one.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


@contextmanager
def untouched(model: torch.nn.Module, devices: Sequence[int | torch.device] | None = None) -> Iterator[None]:
    """Run the block's passes over ``model``, then restore every buffer and the RNG, and drop the gradients.

    Args:
        model: the model the passes run (its buffers are copied before and written back after, in place,
            so references to them stay valid).
        devices: CUDA devices whose generators to fork (default: every initialised one); the CPU's always is.
    """
    saved = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    with torch.random.fork_rng(devices=_cuda_devices() if devices is None else list(devices)):
        try:
            yield
        finally:
            with torch.no_grad():
                for buffer, copy in saved:
                    buffer.copy_(copy)
            for parameter in model.parameters():
                parameter.grad = None
