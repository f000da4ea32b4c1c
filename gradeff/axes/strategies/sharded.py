"""What one process of a sharded (FSDP2) cell does to its model and to its data.

Every process builds the same model from the same seed; :func:`shard_model` then hands each
transformer block, and the model's remaining parameters, to ``fully_shard``: each parameter is
cut along its first dimension, and this process keeps its 1/W chunk (a DTensor), gradients and
optimizer state included. Before a block runs, its parameters are gathered from every process;
after its backward, the gradients are reduce-scattered back into shards.

The data is split as the loop reads it (:class:`Ranks`): every process takes its own contiguous
slice of each micro-batch and weights its loss by its slice's share of the whole step's targets.
Gradients are *summed* over processes (FSDP2 averages by default; here the reduction is a plain sum),
so their sum is exactly the gradient the unsharded step takes on the whole micro-batch, and the
step's loss is the sum of the processes' weighted losses, all-reduced so every process (and a
line search in each) sees the same value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from gradeff.axes.strategies.layers import checkpointable_layers

__all__ = ["Ranks", "shard_model", "shard_record"]


@dataclass(frozen=True, slots=True)
class Ranks:
    """This process's place in a data-parallel group: which slice of each micro-batch it trains on."""

    rank: int
    world_size: int

    def local(self, idx: torch.Tensor) -> torch.Tensor:
        """This process's contiguous share of a micro-batch's sample indices (sizes differ by at most one)."""
        return idx.tensor_split(self.world_size)[self.rank]

    def total(self, loss: torch.Tensor) -> torch.Tensor:
        """The step's loss over every process: the sum of their target-weighted shares."""
        loss = loss.clone()
        dist.all_reduce(loss)
        return loss


def shard_model(model: torch.nn.Module, device: torch.device, world_size: int) -> int:
    """Shard ``model`` over the default process group: each transformer block, then the root.

    Call it before the optimizer is built: the optimizer must hold the sharded (DTensor) parameters.

    Returns:
        The number of blocks sharded as units of their own (the root holds the rest: embeddings, head).
    """
    # FSDP, 1 s after torch: sharded cells only
    from torch.distributed.fsdp import FSDPModule, fully_shard  # noqa: PLC0415

    mesh = init_device_mesh(device.type, (world_size,))
    blocks = [module for _, module in checkpointable_layers(model)]
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # Sum, not mean: each process's loss is already weighted by its share of the step's targets.
            # A plain SUM reduction (no pre-multiplied one, which gloo lacks) with nothing divided after it.
            module.set_force_sum_reduction_for_comms(True)
            module.set_gradient_divide_factor(1.0)
    return len(blocks)


def shard_record(model: torch.nn.Module) -> dict:
    """What sharding did to ``model``, for the cell's plan.

    ``row_bytes`` bounds how far one process's share of the parameters (and so of the gradients and the
    state kept per parameter) lies from an exact 1/W: each parameter is cut between rows, so a share is
    off by less than one row per parameter (by at most half a row with two processes).
    """
    from torch.distributed.fsdp import FSDPModule  # noqa: PLC0415 - FSDP, 1 s after torch: sharded cells only

    units = sum(isinstance(module, FSDPModule) for module in model.modules())
    rows = sum(p.numel() // max(1, p.shape[0]) * p.element_size() if p.dim() else p.element_size()
               for p in model.parameters())
    return {"sharded_blocks": units - 1, "row_bytes": rows}
