"""How each strategy prepares a cell's model before its epochs, and what it records of it.

``prepare`` is the one place that reads a strategy's spec: static checkpointing switches every
block on (with host offload if asked), the adaptive budget measures, plans and switches on the
blocks it chose, the compiler budget compiles the model under the matching activation budget. The
record it returns goes into the cell's ``plan``; a budget that cannot be met raises
:class:`BudgetUnreachable` before any training, with the numbers.
"""

from __future__ import annotations

import math
import time

import torch

from gradeff.axes.strategies import STRATEGIES, enable_checkpointing
from gradeff.axes.strategies.budget import (
    BudgetPlan,
    StepProfile,
    calibrated,
    compiler_fraction,
    measure_checkpointed_peak,
    plan,
    profile_step,
)
from gradeff.axes.strategies.layers import checkpoint_only, checkpointable_layers
from gradeff.axes.strategies.sharded import shard_record
from gradeff.meters.untouched import untouched

__all__ = ["BudgetUnreachable", "CompiledUnderBudget", "OffloadedActivations", "budget_bytes", "budget_fraction",
           "prepare"]

MIB = 2**20


class BudgetUnreachable(RuntimeError):
    """Even the most memory-frugal plan does not fit the budget: the cell ends ``oom`` before training.

    Attributes:
        plan: the plan's record (budget, predictions), kept in the cell's record.
    """

    def __init__(self, message: str, plan: dict):
        super().__init__(message)
        self.plan = plan


def _unreachable(plan_: BudgetPlan, record: dict) -> BudgetUnreachable:
    kind = "measured" if plan_.measured_frugal_peak is not None else "predicted"
    return BudgetUnreachable(
        f"even checkpointing every block does not fit: {kind} peak {plan_.predicted_peak / MIB:.2f} MiB > "
        f"{plan_.target / MIB:.2f} MiB (budget {plan_.budget / MIB:.2f} MiB less a {plan_.margin:.0%} margin); "
        f"without checkpointing {plan_.unconstrained_peak / MIB:.2f} MiB", record)


class CompiledUnderBudget(torch.nn.Module):
    """A model compiled by torch.compile whose partitioner recomputes activations to meet a budget.

    ``torch._functorch.config.activation_memory_budget`` (a fraction of the activations saved) is read
    when a graph is compiled; applying it around every call keeps it for recompilations and away from
    every other model in the process.

    The live-tensor tracker cannot measure it: under a Python dispatch mode the compiled graph does
    not run (torch.compile falls back to eager), so its steps report ``live_peak_visible = False``
    and their memory is the breakdown (activations are still counted through saved-tensor hooks).
    """

    live_peak_visible = False

    def __init__(self, model: torch.nn.Module, fraction: float, backend: str):
        super().__init__()
        # Compile with no more threads than the cell trains on: inductor's default, a pool of compile subprocesses
        # (one per core, each importing torch), starts beside the other pytest-xdist workers' training and costs
        # more than it saves on a small machine (a tiny vit_s compiled cell: 7.7 s → 6.1 s on two cores).
        # inductor, 1.7 s after torch: compiled cells only
        from torch._inductor import config as inductor  # noqa: PLC0415

        inductor.compile_threads = max(1, min(inductor.compile_threads, torch.get_num_threads()))
        self.compiled = torch.compile(model, backend=backend)
        self.fraction = fraction

    def forward(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            # Held-out evaluation and inference save nothing for backward, so the budget does not apply to
            # them; the eager model (same weights) spares a compile per evaluation batch shape and mode.
            return self.compiled._orig_mod(*args, **kwargs)
        with torch._functorch.config.patch(activation_memory_budget=self.fraction):
            return self.compiled(*args, **kwargs)


class OffloadedActivations(torch.nn.Module):
    """A model whose forward keeps every tensor saved for backward in host memory (``save_on_cpu``).

    With checkpointing on, what is saved is each block's inputs and the activations outside blocks;
    on a GPU they leave device memory for pinned host memory and come back in backward. On a
    CPU-only machine the host is the device: the copies cost time and save nothing, which the
    per-device peak shows.
    """

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.offloaded_bytes = 0
        """Bytes of the distinct tensors the last forward sent to host memory."""

    def forward(self, *args, **kwargs):
        # Pinned host memory makes the copies asynchronous; it needs an accelerator to exist.
        hooks = torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())
        offload, seen = hooks.pack_hook, set()
        self.offloaded_bytes = 0

        def counting(t: torch.Tensor):
            key = (t.device, t.untyped_storage().data_ptr())
            if key not in seen:
                seen.add(key)
                self.offloaded_bytes += t.untyped_storage().nbytes()
            return offload(t)

        hooks.pack_hook = counting  # read when the hooks are entered
        with hooks:
            return self.model(*args, **kwargs)


def compile_backend(device: torch.device) -> str:
    """inductor on a GPU; on a CPU the same partitioner without C++ code generation.

    ``aot_eager_decomp_partition`` runs AOTAutograd's min-cut rematerialisation partitioner (where the
    activation memory budget acts) and then plain eager kernels: the same choice of what to recompute
    for about 3 s of compiling per tiny model instead of 15-30 s of inductor C++ builds on two cores.
    """
    return "inductor" if device.type == "cuda" else "aot_eager_decomp_partition"


def prepare(strategy: str, model: torch.nn.Module, batch: dict, *, device: torch.device, state_bytes: int,
            budget: int | None, margin: float, level: float | None = None) -> tuple[torch.nn.Module, dict]:
    """Apply ``strategy`` to ``model`` and say what it did.

    Args:
        strategy: strategy key.
        model: the model as it will train (method applied).
        batch: one training micro-batch on ``device`` (for the budget strategies' measurement and compile).
        state_bytes: the optimizer state of the trainable parameters, by its law.
        budget: the absolute budget in bytes for budget strategies without a fraction.
        margin: the fraction of the budget kept free.
        level: where the budget lies between the cell's own extremes (see :func:`budget_bytes`) for a budget
            strategy without a fraction of its own when no absolute ``budget`` is given (the profile's default).

    Returns:
        The model to train (the same one, or its compiled wrapper) and the plan's record.

    Raises:
        BudgetUnreachable: the budget cannot be met.
    """
    spec = STRATEGIES[strategy]
    if spec.shards:
        # Sharded when the cell's state was built (before its optimizer); recorded here with the other plans.
        return model, shard_record(model)
    if spec.checkpointing:
        enable_checkpointing(model)
        record = {"checkpointed_layers": len(checkpointable_layers(model)), "layers": len(checkpointable_layers(model))}
        return (OffloadedActivations(model), record | {"offload": True}) if spec.offload else (model, record)
    if spec.budget is None:
        return model, {}
    profile = profile_step(model, batch, state_bytes=state_bytes, device=device)
    fraction = budget_fraction(strategy, budget, level)
    chosen = plan(profile, budget_bytes(profile, fraction, budget, margin, strategy), margin)
    record = {"kind": spec.budget, "budget_fraction": fraction, "profile": _profile_record(profile)}
    if spec.budget == "adaptive":
        # A prediction within its error band of the target is checked against a measured pass: a budget that
        # checkpointing every block meets is never refused.
        chosen = calibrated(profile, chosen, lambda: measure_checkpointed_peak(model, batch, profile, device=device))
        record |= chosen.to_record()
        if not chosen.fits:
            raise _unreachable(chosen, record)
        checkpoint_only(model, chosen.checkpointed)
        return model, record
    return _compile(model, batch, profile, chosen, record, device)


def budget_fraction(strategy: str, budget: int | None, level: float | None) -> float | None:
    """Where a budget strategy's budget lies between the cell's own extremes: its own fraction (the memory grid's
    levels), else ``level`` unless an absolute ``budget`` is given; ``None``: the absolute budget."""
    own = STRATEGIES[strategy].budget_fraction
    return own if own is not None else (level if budget is None else None)


def budget_bytes(profile: StepProfile, fraction: float | None, budget: int | None, margin: float,
                 strategy: str = "") -> int:
    """The budget in bytes: at ``fraction`` of the way from the cell's predicted peak with every block checkpointed
    (0) to the one with none (1), both from its own measured pass, so the budget scales with the model and method;
    else the absolute ``budget``."""
    if fraction is not None:
        # Between the model's own extremes, so the curve's points span every model's trade-off; the
        # margin is added back so the plan's target is that point itself.
        frugal = profile.predicted_peak(layer.name for layer in profile.layers)
        point = frugal + fraction * (profile.predicted_peak() - frugal)
        # Rounded up until the plan's whole-byte target (budget × (1 - margin), rounded down) is not below the
        # point: at level 100 % the target is then the unconstrained peak itself and nothing is recomputed.
        budget = math.ceil(point / (1 - margin))
        while int(budget * (1 - margin)) < point:
            budget += 1
        return budget
    if budget is None:
        raise ValueError(f"strategy {strategy!r} needs a memory budget")
    return budget


def _profile_record(profile: StepProfile) -> dict:
    return {"forward_backward_peak_bytes": profile.forward_backward_peak,
            "activation_bytes": profile.activation_bytes,
            "layer_savings_bytes": [layer.savings for layer in profile.layers]}


def _compile(model, batch, profile: StepProfile, chosen: BudgetPlan, record: dict,
             device: torch.device) -> tuple[torch.nn.Module, dict]:
    fraction = compiler_fraction(profile, chosen.target)
    backend = compile_backend(device)
    # A compiled graph is cached by the code it traced: a new cell must not reuse another cell's graph
    # (and its budget).
    torch._dynamo.reset()
    compiled = CompiledUnderBudget(model, fraction, backend)
    devices = [device] if device.type == "cuda" else []
    start = time.perf_counter()
    # The first call compiles forward and backward; like the measuring pass it leaves no trace (RNG, buffers).
    with untouched(model, devices):
        compiled(**batch).loss.backward()
    record = record | {"budget_bytes": chosen.budget, "margin": chosen.margin, "target_bytes": chosen.target,
                       "unconstrained_peak_bytes": chosen.unconstrained_peak, "activation_memory_budget": fraction,
                       "compile_backend": backend, "compile_seconds": time.perf_counter() - start}
    return compiled, record
