"""The memory-strategy axis: STRATEGIES registry, and how a strategy prepares a cell.

A strategy acts before the loop — it prepares the model (checkpointing every block, the blocks a
memory budget needs, activations offloaded to the host, the compiler's own recomputation under a
budget) — or as data (``accumulate``: how many micro-batches make one optimizer step; ``shards``:
which slice of each micro-batch this process trains on, see :mod:`gradeff.axes.strategies.sharded`). The
loop itself has no strategy branches.

May import: :mod:`gradeff.specs`, :mod:`gradeff.meters` and the other axes (never in a cycle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gradeff.specs.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["BUDGET_KINDS", "COMPILE_BACKENDS", "STRATEGIES", "StrategySpec", "enable_checkpointing",
           "micro_batches_per_step", "rate_strategy"]

# How a budget strategy meets its budget: by checkpointing the blocks it must (the PEFT paper's adaptive
# algorithm), or by letting torch.compile's partitioner choose what to recompute (the library's knapsack).
BUDGET_KINDS = ("adaptive", "compiler")

# torch.compile's backends ``--gradeff-compile`` offers. Measured on the tiny grid models, one CPU thread, an epoch
# against eager: inductor ViT 0.93x (36 s to compile), Llama 1.28x (22 s); aot_eager_decomp_partition 1.69x and
# 1.40x (3 s): inductor is the fastest compiled backend on a CPU as on a GPU, the other the quickest to compile.
COMPILE_BACKENDS = ("inductor", "aot_eager_decomp_partition")


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategySpec:
    """One memory strategy.

    Attributes:
        key: registry key.
        name: human-readable name.
        checkpointing: recompute every block's activations in backward instead of storing them.
        accumulate: one optimizer step per ``accum_steps`` micro-batches (effective batch k·b), over the same
            epochs as the others: k times fewer optimizer steps, at a learning rate tuned for it (its own rows of
            the tuned table, :func:`rate_strategy`). Why the same epochs and not the same steps: the main paper
            accumulates over its 25 epochs, and what a user weighs is the same data and forward/backward work for
            less memory; as many steps would cost k times the compute (the main study's accumulation cells 4×,
            about 60 worker-seconds more at tiny). Why its own rate: the best rate of a batch k times larger is not
            the small batch's, and at the standard cell's rate an accumulation cell measured under-training.
        offload: keep what is saved for backward (with checkpointing: block inputs) in host memory.
        budget: ``adaptive`` or ``compiler``: fit the step into a memory budget (see
            :mod:`gradeff.axes.strategies.budget`); ``None`` for strategies without one.
        budget_fraction: where the budget lies between the cell's own predicted peaks with every
            block checkpointed (0) and with none (1): the memory study's curve, whose points then
            span each model's whole trade-off, however large its parameters and activations are;
            ``None``: the absolute budget (``--gradeff-memory-budget``, else the profile's default).
        shards: train data-parallel across ``--gradeff-world-size`` processes with FSDP2, each holding
            its 1/W share of the parameters, gradients and optimizer state (see :mod:`gradeff.cell.distributed`).
    """

    key: str
    name: str
    checkpointing: bool = False
    accumulate: bool = False
    offload: bool = False
    budget: str | None = None
    budget_fraction: float | None = None
    shards: bool = False

    @property
    def trains_as_standard(self) -> bool:
        """Whether the strategy changes only what training keeps in memory, not what it computes: checkpointing,
        host offload and the adaptive budget recompute or move exact values, so the trained model is the
        ``standard`` cell's bit for bit (tested as a law). Accumulation (other sums), sharding (other
        reductions) and the compiler (other kernels) are not."""
        return ((self.checkpointing or self.offload or self.budget == "adaptive")
                and not (self.accumulate or self.shards or self.budget == "compiler"))

    @property
    def cpu_limitation(self) -> str | None:
        """Why the strategy measures on a CPU nothing of what it is for (a CPU run leaves it out unless it is named),
        or ``None``. Offload moves saved tensors out of the device's memory into the host's, which on a CPU are
        one memory. The compiler's budget is read on the compiled step's live peak, which no CPU meter sees (the
        compiled graph's saved tensors are counted, its temporaries are not), and its time on the CPU compile
        backend is not the time of the GPU kernels it stands for."""
        if self.budget == "compiler":
            return ("a compiled step's live peak is not measurable on a CPU, and the CPU compile backend's time is "
                    "not the GPU kernels'")
        if self.offload:
            return "on a CPU the host is the device: offloading moves nothing out of the memory it is meant to relieve"
        return None

    def __post_init__(self):
        if self.budget is not None and self.budget not in BUDGET_KINDS:
            raise ValueError(f"{self.key}: unknown budget kind {self.budget!r}; valid: {', '.join(BUDGET_KINDS)}")
        if self.budget_fraction is not None and (self.budget is None or not 0 <= self.budget_fraction <= 1):
            raise ValueError(f"{self.key}: a budget fraction needs a budget kind and lies in [0, 1]")
        if self.shards and (self.checkpointing or self.accumulate or self.offload or self.budget is not None):
            # Not combined yet: a budget is planned from one process's unsharded step, and the sharded
            # path is tested on its own.
            raise ValueError(f"{self.key}: a sharded strategy does not combine with checkpointing, accumulation, "
                             f"offload or a budget")


def _fractions(kind: str, prefix: str, name: str) -> tuple[StrategySpec, ...]:
    return tuple(StrategySpec(key=f"{prefix}{percent}",
                              name=f"{name}, budget {percent} % of the way from full checkpointing to none",
                              budget=kind, budget_fraction=percent / 100) for percent in (80, 60, 40, 20))


STRATEGIES: Registry[StrategySpec] = Registry(
    "strategy",
    (
        StrategySpec(key="standard", name="Standard"),
        StrategySpec(key="checkpoint", name="Activation checkpointing", checkpointing=True),
        StrategySpec(key="accum", name="Gradient accumulation", accumulate=True),
        StrategySpec(key="budget", name="Budget-adaptive checkpointing", budget="adaptive"),
        StrategySpec(key="compile_budget", name="torch.compile under a memory budget", budget="compiler"),
        StrategySpec(key="offload", name="Checkpointing with host offload", checkpointing=True, offload=True),
        *_fractions("adaptive", "budget", "Budget-adaptive checkpointing"),
        # The compiler's cell at level 100 %: compiled at the full activation budget (1.0), so no recomputation is
        # asked for. A compiled cell's time is read against it, so the ratio is the budget's recomputation and not
        # the compile backend's speed (on a CPU the anchor ran the tiny ViT-S 1.66x slower than eager).
        StrategySpec(key="compile_budget100", name="torch.compile at the full activation budget (the compiled anchor)",
                     budget="compiler", budget_fraction=1.0),
        *_fractions("compiler", "compile_budget", "torch.compile"),
        StrategySpec(key="fsdp", name="Sharded data parallel (FSDP2)", shards=True),
    ),
    plural="strategies",
)


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Turn on non-reentrant activation checkpointing of every block (transformers 5 API).

    Non-reentrant checkpointing recomputes with the saved RNG state, so gradients are the same
    as without it (dropout included); only memory and time change.
    """
    if not hasattr(model, "activation_checkpointing_enable"):
        raise TypeError(f"{type(model).__name__} has no activation_checkpointing_enable()")
    model.activation_checkpointing_enable({"use_reentrant": False})


def micro_batches_per_step(strategy: str, accum_steps: int) -> int:
    """How many micro-batches one optimizer step consumes under ``strategy``."""
    return accum_steps if STRATEGIES[strategy].accumulate else 1


def rate_strategy(strategy: str) -> str:
    """The strategy whose tuned learning rate ``strategy`` trains at (:mod:`gradeff.cell.protocols`): its own where it
    changes the effective batch (accumulation: a k-times larger batch in k times fewer steps wants another rate),
    else ``standard`` (the same steps on the same batches: checkpointing, offload, a budget, sharding)."""
    return strategy if strategy in list(STRATEGIES) and STRATEGIES[strategy].accumulate else "standard"
