"""LoRA (Hu et al., 2022) through peft: low-rank adapters on the backbone's linears, weights frozen."""

from __future__ import annotations

from gradeff.axes.methods import Adapted

__all__ = ["apply", "lora_config", "wrap"]


def lora_config(hp, *, head: tuple[str, ...]):
    """The ``peft.LoraConfig`` of the method's settings; the head trains in full (``modules_to_save``)."""
    from peft import LoraConfig

    return LoraConfig(r=hp.lora_r, lora_alpha=hp.lora_alpha, lora_dropout=hp.lora_dropout,
                      target_modules=list(hp.target_modules), modules_to_save=list(head) or None, bias="none")


def wrap(model, config) -> Adapted:
    """``peft.get_peft_model`` with ``config``; records how many modules got an adapter.

    Raises:
        ValueError: no target module matched (peft's own error, naming the targets).
    """
    from peft import get_peft_model

    peft_model = get_peft_model(model, config)
    adapted = sorted({name.rsplit(".lora_", 1)[0] for name, _ in peft_model.named_parameters() if ".lora_" in name})
    return Adapted(model=peft_model, info={"adapted_modules": len(adapted)})


def apply(model, hp, *, total_steps: int, head: tuple[str, ...] = ()) -> Adapted:
    """Add LoRA adapters of rank ``hp.lora_r`` to ``hp.target_modules``; everything else frozen but the head."""
    return wrap(model, lora_config(hp, head=head))
