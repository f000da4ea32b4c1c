"""Layers the PEFT study's backbones share: stochastic depth and a BatchNorm that tolerates checkpoint replays."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DropPath", "ReplaySafeBatchNorm2d", "drop_path", "freeze_batch_statistics"]


def drop_path(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Stochastic depth: zero a residual branch per sample with probability ``p`` and rescale the kept ones.

    A "sample" is the first dimension: blocks that see windows as their batch drop per window.
    Identity in eval mode or at rate 0.
    """
    if p == 0.0 or not training:
        return x
    keep = 1.0 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask.div_(keep)


class DropPath(nn.Module):
    """:func:`drop_path` as a module, so a block's rate shows in its repr."""

    def __init__(self, rate: float = 0.0):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_path(x, self.rate, self.training)

    def extra_repr(self) -> str:
        return f"rate={self.rate:g}"


class ReplaySafeBatchNorm2d(nn.BatchNorm2d):
    """``BatchNorm2d`` whose running statistics move once per training forward, however often it is replayed.

    Activation checkpointing runs a block's forward a second time during the backward pass. A
    training-mode BatchNorm's output depends only on the batch, so the replay reproduces it exactly,
    but a plain BatchNorm would fold the batch into its running statistics a second time, and a model
    trained with checkpointing would then evaluate differently from one trained without. The model
    numbers its training forwards (``pass_index``, bound into each checkpointed call, so a replay
    carries the number of the pass it replays); a pass not newer than the last one seen normalises
    with the batch statistics and leaves the running statistics alone. Without ``pass_index`` it is a
    plain ``BatchNorm2d``.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__(num_features, eps=eps)
        self._last_pass = 0

    def forward(self, x: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """Normalise ``x``; ``pass_index`` is the model's training-forward number (``None``: always update)."""
        if self.training and self.track_running_stats and pass_index is not None:
            if pass_index <= self._last_pass:
                # Same kernel and same saved tensors as the first pass (checkpointing checks that), but
                # the statistics it writes are throwaway copies and momentum 0 keeps them unchanged.
                return F.batch_norm(x, self.running_mean.clone(), self.running_var.clone(), self.weight, self.bias,
                                    True, 0.0, self.eps)
            self._last_pass = pass_index
        return super().forward(x)


def freeze_batch_statistics(model: nn.Module) -> int:
    """Keep every BatchNorm of ``model`` in eval mode in training: it normalises with its running statistics and
    never updates them, its scale and shift still train. Returns how many BatchNorms there are.

    What fine-tuning a pretrained backbone does (TinyViT's authors' fine-tuning configs: ``eval_bn_when_training``):
    the statistics were estimated over the whole pretraining. A tiny fine-tuning cell's batches (32 images of 100
    classes) give noisy statistics of their own, and 24 steps move the running ones most of the way to them; on the
    CIFAR-100 stand-in TinyViT's BitFit cell reached 11 % with batch statistics, 20 % with its backbone's frozen (the
    same pretraining, whose frozen features a linear probe reads at 28 %). A forward pre-hook resets the modes before
    every forward, since ``model.train()`` (the loop's, an evaluation's restore) sets every submodule's.
    """
    norms = [module for module in model.modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)]

    def keep(module, args):
        for norm in norms:
            norm.training = False

    if norms:
        model.register_forward_pre_hook(keep)
        keep(model, ())
    return len(norms)
