"""Linear probe: the task head alone trains on the backbone's frozen features.

On a linear head this is multinomial logistic regression on the features the pretrained backbone
computes (DINOv2's evaluation protocol), trained by the suite's own loop with the cell's optimizer
and epochs. The features are those of the backbone in evaluation mode: dropout off and batch
normalisation with its running statistics, which training batches then never update, so the
features of a sample are the same in every epoch and at evaluation. Open to every classifier with a
head.
"""

from __future__ import annotations

from torch import nn

from gradeff.axes.methods import Adapted, within

__all__ = ["apply", "backbone_modules"]


def backbone_modules(model: nn.Module, head: tuple[str, ...]) -> list[nn.Module]:
    """The submodules outside the head that do not contain it (the head's ancestors keep their mode)."""
    names = [name for name, _ in model.named_modules() if name and within(name, head)]
    return [module for name, module in model.named_modules()
            if name and not within(name, head) and not any(inner.startswith(name + ".") for inner in names)]


def apply(model, hp, *, total_steps: int, head: tuple[str, ...] = ()) -> Adapted:
    """Freeze everything but the head; keep the backbone in evaluation mode in every forward pass.

    Raises:
        ValueError: the model has no head (nothing for a probe to train).
    """
    trained = 0
    for name, parameter in model.named_parameters():
        keep = within(name, head)
        parameter.requires_grad_(keep)
        trained += parameter.numel() if keep else 0
    if not trained:
        raise ValueError(f"{type(model).__name__} has no head parameters in {head!r}: a linear probe has nothing "
                         "to train")
    backbone = backbone_modules(model, head)

    def frozen_features(module, args):
        # model.train() (the loop, the evaluation's restore) sets every submodule's mode: reset the
        # backbone's before each forward pass.
        for submodule in backbone:
            submodule.training = False

    model.register_forward_pre_hook(frozen_features)
    return Adapted(model=model, info={"head_parameters": trained})
