"""AdaLoRA (Zhang et al., 2023) through peft: SVD-form adapters whose rank budget shrinks during training.

Each adapted linear starts with ``adalora_init_r`` singular triplets; after a warm-up of
``tinit`` steps the budget is cut step by step to ``adalora_target_r`` per module on average,
keeping the triplets with the largest importance, and stays fixed for the last ``tfinal`` steps.
peft does the allocation in ``update_and_allocate(step)``, which needs the step's gradients:
it runs as the method's after-step hook, before the next step clears them.
"""

from __future__ import annotations

from gradeff.axes.methods import Adapted
from gradeff.axes.methods.lora import wrap

__all__ = ["apply", "rank_budget"]


def apply(model, hp, *, total_steps: int, head: tuple[str, ...] = ()) -> Adapted:
    """Add AdaLoRA adapters scheduled over ``total_steps`` optimizer steps."""
    from peft import AdaLoraConfig

    tinit = int(hp.adalora_tinit * total_steps)
    tfinal = int(hp.adalora_tfinal * total_steps)
    if tinit >= total_steps - tfinal:
        raise ValueError(f"AdaLoRA needs more optimizer steps than {total_steps} to schedule its budget "
                         f"(warm-up {tinit}, final {tfinal})")
    config = AdaLoraConfig(init_r=hp.adalora_init_r, target_r=hp.adalora_target_r, tinit=tinit, tfinal=tfinal,
                           deltaT=hp.adalora_delta_t, total_step=total_steps, lora_alpha=hp.lora_alpha,
                           lora_dropout=hp.lora_dropout, target_modules=list(hp.target_modules),
                           modules_to_save=list(head) or None)
    adapted = wrap(model, config)
    peft_model = adapted.model
    adapted.after_step = peft_model.base_model.update_and_allocate
    adapted.info |= {"tinit": tinit, "tfinal": tfinal, "total_step": total_steps}
    return adapted


def rank_budget(model) -> int:
    """Singular triplets AdaLoRA keeps now, over all adapted modules.

    peft masks pruned triplets (their ``lora_E`` entries are zeroed) rather than resizing the
    matrices, so this count, not the parameter count, is the rank budget it has allocated: the
    ``True`` entries of the allocator's latest rank pattern, or every initial triplet before the
    first allocation.
    """
    config = model.peft_config[model.active_adapter]
    if config.rank_pattern:
        return sum(sum(mask) for mask in config.rank_pattern.values())
    modules = {name.rsplit(".lora_E", 1)[0] for name, _ in model.named_parameters() if ".lora_E." in name}
    return config.init_r * len(modules)
