"""The blocks activation checkpointing can recompute, and checkpointing only some of them.

A transformers model's repeated blocks are ``GradientCheckpointingLayer`` modules; turning
checkpointing on sets a flag on each. Budget-adaptive checkpointing turns it on for all, then off
again for the blocks its plan keeps, so the checkpointed blocks run exactly as under static
checkpointing (same function, same non-reentrant recomputation, same RNG replay).
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from gradeff.axes.strategies import enable_checkpointing

__all__ = ["checkpoint_only", "checkpointable_layers", "short_name"]


def checkpointable_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every outermost checkpointable block, in forward (registration) order.

    A block inside another is left out: checkpointing the outer one already recomputes it.
    """
    # transformers, 6 s after torch: checkpointing only
    from transformers.modeling_layers import GradientCheckpointingLayer  # noqa: PLC0415

    layers: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if isinstance(module, GradientCheckpointingLayer) and not any(name.startswith(outer + ".")
                                                                      for outer, _ in layers):
            layers.append((name, module))
    return layers


def short_name(name: str) -> str:
    """A block's name without the prefixes wrappers add (peft's ``base_model.model.``, torch.compile's
    ``_orig_mod.``)."""
    for prefix in ("_orig_mod.", "base_model.model."):
        name = name.removeprefix(prefix)
    return name


def checkpoint_only(model: nn.Module, names: Iterable[str]) -> None:
    """Checkpoint exactly the blocks named (as :func:`checkpointable_layers` names them), no others.

    Raises:
        KeyError: a name that is not a checkpointable block of ``model``.
    """
    wanted = set(names)
    layers = dict(checkpointable_layers(model))
    unknown = wanted - set(layers)
    if unknown:
        raise KeyError(f"not checkpointable blocks of {type(model).__name__}: {sorted(unknown)}")
    enable_checkpointing(model)
    for name, layer in layers.items():
        layer.gradient_checkpointing = name in wanted
