"""QLoRA (Dettmers et al., 2023): the backbone's linears stored in 4-bit NF4 (bitsandbytes), LoRA on top.

Every ``nn.Linear`` outside the task head becomes a ``bitsandbytes.nn.Linear4bit`` whose weight is
quantised when it is placed on the device (blocks of 64 values, one absmax each; with double
quantisation the absmax values are themselves 8-bit). Then peft's
``prepare_model_for_kbit_training`` freezes the base model and LoRA adapters are added as in
:mod:`gradeff.axes.methods.lora`. The forward dequantises each weight to the compute dtype on the fly.
"""

from __future__ import annotations

from gradeff.axes.methods import Adapted, within
from gradeff.axes.methods.lora import lora_config, wrap

__all__ = ["apply", "quantize_linears"]


def quantize_linears(model, *, quant_type: str, double_quant: bool, skip: tuple[str, ...] = ()) -> int:
    """Replace every ``nn.Linear`` (outside ``skip``) with a 4-bit ``Linear4bit`` holding its weight.

    Args:
        quant_type: ``nf4`` or ``fp4``.
        double_quant: quantise the per-block scaling constants too (QLoRA's double quantisation).
        skip: module names (or name suffixes) left in full precision, e.g. the task head.

    Returns:
        The number of linears quantised.
    """
    import bitsandbytes as bnb
    from torch import nn

    targets = [(name, module) for name, module in model.named_modules()
               if type(module) is nn.Linear and not within(name, skip)]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        device = linear.weight.device
        quantized = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                      compute_dtype=linear.weight.dtype, compress_statistics=double_quant,
                                      quant_type=quant_type, device="meta")
        # Params4bit quantises itself when moved to a real device (`.to(device)` below).
        quantized.weight = bnb.nn.Params4bit(linear.weight.data.detach().cpu(), requires_grad=False,
                                             quant_type=quant_type, compress_statistics=double_quant,
                                             module=quantized)
        if linear.bias is not None:
            quantized.bias = nn.Parameter(linear.bias.data.detach().cpu(), requires_grad=linear.bias.requires_grad)
        # On CPUs with AVX512-BF16, bitsandbytes repacks a 4-bit weight for its inference kernel the
        # first time it runs in eval mode, and the repacked weight then fails in training (the held-out
        # evaluation alternates with training epochs): keep the one layout both modes use.
        quantized.support_avx512bf16_for_cpu = False
        setattr(parent, child, quantized.to(device))
    return len(targets)


def apply(model, hp, *, total_steps: int, head: tuple[str, ...] = ()) -> Adapted:
    """Quantise the linears to 4-bit, freeze the base model, add LoRA adapters."""
    from peft import prepare_model_for_kbit_training

    quantized = quantize_linears(model, quant_type=hp.quant_type, double_quant=hp.double_quant, skip=head)
    # Gradient checkpointing is the strategy axis's business, not the method's.
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    adapted = wrap(model, lora_config(hp, head=head))
    adapted.info["quantized_linears"] = quantized
    return adapted
