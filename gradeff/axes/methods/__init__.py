"""The fine-tuning-method axis: METHODS registry and ``apply_method``.

A method decides which parameters train and how: ``full`` trains everything; ``lora``,
``adalora`` and ``qlora`` add peft adapters to the backbone's linears (QLoRA after storing them
in 4-bit NF4 with bitsandbytes); ``bitfit`` trains only the biases. The task head (a fresh
classifier when fine-tuning on a new dataset) always trains. A method acts on the model before
the loop and may ask for a call after every optimizer step (AdaLoRA re-allocates its rank
budget there); the loop itself never branches on the method.

May import: :mod:`gradeff.specs`, :mod:`gradeff.meters` and the other axes (never in a cycle).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradeff.specs.registry import Registry

if TYPE_CHECKING:
    from torch import nn

__all__ = ["METHODS", "Adapted", "MethodHParams", "MethodSpec", "apply_method", "within"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodHParams:
    """Settings of a fine-tuning method in one cell; recorded with the cell.

    Attributes:
        lr_scale: the method's learning rate as a multiple of the model's (adapters and biases
            are few, freshly initialised parameters and are usually trained at a larger rate).
        lora_r / lora_alpha / lora_dropout: LoRA rank, scaling numerator (scale = alpha / r) and
            dropout on the adapter input.
        target_modules: module-name suffixes of the linears LoRA adapts (per backbone).
        adalora_init_r / adalora_target_r: AdaLoRA's initial and final average rank per module.
        adalora_tinit / adalora_tfinal: fractions of the optimizer steps before the rank budget
            starts shrinking and after it has reached its target (AdaLoRA's warm-up and final
            fine-tuning phases).
        adalora_delta_t: optimizer steps between two rank re-allocations.
        quant_type / double_quant: the 4-bit storage of QLoRA (NF4, quantised scaling constants).
    """

    lr_scale: float = 1.0
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.1
    target_modules: tuple[str, ...] = field(default=())
    adalora_init_r: int = 12
    adalora_target_r: int = 8
    adalora_tinit: float = 0.1
    adalora_tfinal: float = 0.2
    adalora_delta_t: int = 1
    quant_type: str = "nf4"
    double_quant: bool = True

    def __post_init__(self):
        if self.lr_scale <= 0 or min(self.lora_r, self.lora_alpha, self.adalora_target_r, self.adalora_delta_t) < 1:
            raise ValueError("lr_scale must be > 0 and ranks, alpha and delta_t >= 1")
        if self.adalora_target_r > self.adalora_init_r:
            raise ValueError("AdaLoRA's target rank cannot exceed its initial rank")
        if min(self.adalora_tinit, self.adalora_tfinal) < 0 or self.adalora_tinit + self.adalora_tfinal >= 1:
            raise ValueError("adalora_tinit and adalora_tfinal are fractions of the steps with a sum below 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodSpec:
    """One fine-tuning method.

    Attributes:
        key: registry key (``lora``); also what ``-m "cell(method='lora')"`` selects.
        name: human-readable name.
        module: module defining ``apply(model, hp, *, total_steps, head) -> Adapted``; imported
            only when a cell is built.
        needs_biases: the method trains biases only, so a model without any has nothing to train.
        requires: importable modules beyond the default install, with the pip extra that brings them.
        trains: whether the method trains anything; a cell of a method that does not (``zero_shot``)
            has no training epochs, only the held-out evaluation.
        apply: the ``apply`` function itself, instead of ``module`` (a method registered from a conftest).
        hparams: the method's settings, as :class:`MethodHParams` fields (``{"lr_scale": 10.0,
            "lora_r": 16}``); unnamed fields keep their defaults, and the LoRA targets are the model's.
    """

    key: str
    name: str
    module: str = ""
    needs_biases: bool = False
    requires: tuple[tuple[str, str], ...] = ()
    trains: bool = True
    apply: Callable[..., Adapted] | None = None
    hparams: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.module) == (self.apply is not None):
            raise ValueError(f"method {self.key!r}: give module='package.module' (with apply()) or apply=<function>, "
                             f"not both")
        known = {f.name for f in fields(MethodHParams)} - {"target_modules"}
        unknown = sorted(set(self.hparams) - known)
        if unknown:
            raise ValueError(f"method {self.key!r}: unknown hparams {unknown}; known: {', '.join(sorted(known))}")
        object.__setattr__(self, "hparams", MappingProxyType(dict(self.hparams)))


METHODS: Registry[MethodSpec] = Registry(
    "method",
    (
        MethodSpec(key="full", name="Full fine-tuning", module="gradeff.axes.methods.full"),
        # Adapters, biases and a fresh head are few, freshly initialised parameters: they train at 10× the model's
        # rate, as they usually get.
        MethodSpec(key="lora", name="LoRA", module="gradeff.axes.methods.lora", requires=(("peft", "peft"),),
                   hparams={"lr_scale": 10.0}),
        MethodSpec(key="adalora", name="AdaLoRA", module="gradeff.axes.methods.adalora", requires=(("peft", "peft"),),
                   hparams={"lr_scale": 10.0}),
        MethodSpec(key="qlora", name="QLoRA (4-bit NF4 + LoRA)", module="gradeff.axes.methods.qlora",
                   requires=(("peft", "peft"), ("bitsandbytes", "peft")), hparams={"lr_scale": 10.0}),
        MethodSpec(key="bitfit", name="BitFit (biases only)", module="gradeff.axes.methods.bitfit", needs_biases=True,
                   hparams={"lr_scale": 10.0}),
        # The foundation-model baselines' methods: the head alone on frozen features, or nothing at all.
        MethodSpec(key="linear_probe", name="Linear probe (head only, frozen features)",
                   module="gradeff.axes.methods.linear_probe", hparams={"lr_scale": 10.0}),
        MethodSpec(key="zero_shot", name="Zero-shot (no training)", module="gradeff.axes.methods.zero_shot",
                   trains=False),
    ),
)


@dataclass(kw_only=True)
class Adapted:
    """A model prepared by a method.

    Attributes:
        model: the model to train (the same module, or a peft wrapper around it).
        after_step: called with the global step number after every optimizer step, while the
            step's gradients are still there; ``None`` when the method needs nothing.
        info: what the method did, for the record (e.g. how many linears were quantised).
    """

    model: nn.Module
    after_step: Callable[[int], None] | None = None
    info: dict = field(default_factory=dict)


def within(name: str, modules: tuple[str, ...]) -> bool:
    """Whether the module or parameter ``name`` is one of ``modules`` or inside one.

    Names are compared by dotted components, so ``classifier`` matches ``classifier.weight`` and
    ``model.classifier.bias`` but not ``classifier_norm.weight``.
    """
    return any(f".{module}." in f".{name}." for module in modules)


def apply_method(key: str, model: nn.Module, hp: MethodHParams, *, total_steps: int,
                 head: tuple[str, ...] = ()) -> Adapted:
    """Prepare ``model`` for fine-tuning with method ``key``.

    Args:
        key: method key (see ``METHODS``).
        model: the model, weights loaded and strategy applied.
        hp: the method's settings (see :func:`gradeff.studies.hparams.method_hparams_for`).
        total_steps: optimizer steps the cell will take (AdaLoRA schedules its budget over them).
        head: names of the task-head modules, trained by every method.

    Returns:
        The adapted model and its per-step hook.

    Raises:
        KeyError: unknown method; the message lists the valid ones.
    """
    spec = METHODS[key]
    apply = spec.apply or importlib.import_module(spec.module).apply
    return apply(model, hp, total_steps=total_steps, head=head)
