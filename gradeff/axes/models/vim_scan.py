"""The selective scan of Vision Mamba (:mod:`gradeff.axes.models.vim`): the linear recurrence
``h_t = decay_t ⊙ h_{t-1} + inputs_t`` over a sequence, computed in parallel or step by step.

The parallel path is the (Blelloch) scan of ``mambapy.pscan``. The factors ``decay = exp(Δ A)`` lie in (0, 1]
because ``Δ >= 0`` and ``A < 0``, and the scan only multiplies them, so nothing can overflow (no cumulative sums
of ``Δ A`` are ever exponentiated); the scan is made of deterministic element-wise ops, so recomputing a layer
under activation checkpointing reproduces it bit for bit. ``pscan`` pads the sequence to the next power of two
internally (197 tokens at 224 px -> 256); lengths just past a power of two (17 and 65 tokens in the CPU
profiles) are scanned as a power-of-two head and a carried tail instead (see :func:`parallel_scan`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from mambapy.pscan import pscan

__all__ = ["SCANS", "parallel_scan", "sequential_scan"]


def parallel_scan(decay: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """``h_t = decay_t ⊙ h_{t-1} + inputs_t`` (``h_{-1} = 0``) for all ``t`` by ``mambapy``'s parallel scan.

    ``pscan`` pads the length to the next power of two, and its cost grows with the padded length. A
    sequence just past a power of two (``2^k + 1`` tokens: a square grid of patches plus the class token)
    would nearly double it, so such lengths are cut into a power-of-two head and the rest, the head's last
    state entering the rest's first step (``inputs_0 += decay_0 ⊙ h_head``): the same recurrence, exactly.
    Lengths whose padding costs less than half their size (197 at 224 px -> 256) take a single call.

    Args:
        decay, inputs: ``(batch, length, groups, elements)``: ``mambapy``'s ``(B, L, D, N)``, the last two
            axes being independent recurrences.

    Returns:
        The states ``h``, same shape.
    """
    length = inputs.shape[1]
    if length == 1:
        return inputs
    padded = 1 << (length - 1).bit_length()
    if 3 * length > 2 * padded:
        return pscan(decay, inputs)
    head = padded // 2
    # split (not slicing): its backward concatenates the two gradients instead of zero-filling each.
    decay_head, decay_tail = decay.split([head, length - head], dim=1)
    inputs_head, inputs_tail = inputs.split([head, length - head], dim=1)
    states = pscan(decay_head, inputs_head)
    first = inputs_tail[:, :1] + decay_tail[:, :1] * states[:, -1:]
    inputs_tail = torch.cat([first, inputs_tail[:, 1:]], dim=1)
    return torch.cat([states, parallel_scan(decay_tail, inputs_tail)], dim=1)


def sequential_scan(decay: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """The same recurrence as :func:`parallel_scan`, one step at a time (a reference and a baseline)."""
    state = torch.zeros_like(inputs[:, 0])
    states = []
    for t in range(inputs.shape[1]):
        state = decay[:, t] * state + inputs[:, t]
        states.append(state)
    return torch.stack(states, dim=1)


SCANS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "parallel": parallel_scan,
    "sequential": sequential_scan,
}
