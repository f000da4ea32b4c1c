"""BitFit (Ben Zaken et al., 2022): only the bias terms, and the task head, are trained."""

from __future__ import annotations

from gradeff.axes.methods import Adapted, within

__all__ = ["apply", "is_bias"]


def is_bias(name: str) -> bool:
    """Whether a parameter name is a bias term (``...bias``; norms' shifts included, as in BitFit)."""
    return name.rsplit(".", 1)[-1] == "bias"


def apply(model, hp, *, total_steps: int, head: tuple[str, ...] = ()) -> Adapted:
    """Freeze everything except biases and the head.

    Raises:
        ValueError: the model has no bias at all (BitFit would train only the head).
    """
    trained = 0
    for name, parameter in model.named_parameters():
        keep = is_bias(name) or within(name, head)
        parameter.requires_grad_(keep)
        trained += is_bias(name)
    if not trained:
        raise ValueError(f"{type(model).__name__} has no bias parameters: BitFit has nothing to train")
    return Adapted(model=model, info={"bias_tensors": trained})
