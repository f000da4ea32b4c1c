"""The memory-strategy axis: STRATEGIES registry.

A strategy acts before the loop (``prepare`` the model) or as data (``accumulate``: how many
micro-batches make one optimizer step). The loop itself has no strategy branches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gradeff.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["STRATEGIES", "StrategySpec", "enable_checkpointing", "micro_batches_per_step"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategySpec:
    """One memory strategy.

    Attributes:
        key: registry key.
        name: human-readable name.
        checkpointing: recompute layer activations in backward instead of storing them.
        accumulate: one optimizer step per ``accum_steps`` micro-batches (effective batch k·b).
    """

    key: str
    name: str
    checkpointing: bool = False
    accumulate: bool = False


STRATEGIES: Registry[StrategySpec] = Registry(
    "strategy",
    (
        StrategySpec(key="standard", name="Standard"),
        StrategySpec(key="checkpoint", name="Activation checkpointing", checkpointing=True),
        StrategySpec(key="accum", name="Gradient accumulation", accumulate=True),
    ),
)


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Turn on non-reentrant activation checkpointing (transformers 5 API).

    Non-reentrant checkpointing recomputes with the saved RNG state, so gradients are the same
    as without it (dropout included); only memory and time change.
    """
    if not hasattr(model, "activation_checkpointing_enable"):
        raise TypeError(f"{type(model).__name__} has no activation_checkpointing_enable()")
    model.activation_checkpointing_enable({"use_reentrant": False})


def micro_batches_per_step(strategy: str, accum_steps: int) -> int:
    """How many micro-batches one optimizer step consumes under ``strategy``."""
    return accum_steps if STRATEGIES[strategy].accumulate else 1
