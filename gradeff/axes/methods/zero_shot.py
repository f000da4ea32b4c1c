"""Zero-shot evaluation: nothing trains; the model is evaluated as it comes.

For the foundation-model baselines that classify without training (contrastive VLMs against class
prompts, autoregressive VLMs scoring class names). Its spec says ``trains=False``: a cell of this
method has no training epochs, only the held-out evaluation.
"""

from __future__ import annotations

from gradeff.axes.methods import Adapted

__all__ = ["apply"]


def apply(model, hp, *, total_steps: int, head: tuple[str, ...] = ()) -> Adapted:
    """Freeze every parameter, the head's too: there is nothing to train."""
    frozen = 0
    for parameter in model.parameters():
        parameter.requires_grad_(False)
        frozen += parameter.numel()
    return Adapted(model=model, info={"frozen_parameters": frozen})
