"""Full fine-tuning: every parameter trains (the reference the other methods are measured against)."""

from __future__ import annotations

from gradeff.axes.methods import Adapted

__all__ = ["apply"]


def apply(model, hp, *, total_steps: int, head: tuple[str, ...] = ()) -> Adapted:
    """Make every parameter trainable and leave the model as it is."""
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return Adapted(model=model)
