"""``--gradeff-dry-run``: what a selection of cells would need and take, without training any of them.

Every selected cell is built at its profile on the ``meta`` device (its fine-tuning method applied; no memory,
no weights read), and one forward and backward pass over a micro-batch of its shapes is run there, which gives:

- **step FLOPs**: counted by ``torch.utils.flop_counter`` as the cells count them (matrix products, convolutions,
  attention; not element-wise work such as the Mamba models' selective scans, so their times are lower bounds),
  per optimizer step (``accum`` steps hold several micro-batches), plus the forward passes activation
  checkpointing repeats (the checkpointed blocks' share of the forward, by block count);
- **predicted peak memory**: parameters (QLoRA's 4-bit weights by bitsandbytes' layout: half a byte per value
  plus the quantisation constants) + gradients + the optimizer's state by its law + the batch + every tensor
  autograd saves for backward, less what the strategy recomputes; the budget strategy's plan is made exactly as
  a cell makes it. Transient buffers (attention scores freed within an op, allocator rounding) are not in it;
  activations are counted in float32 (autocast keeps the matrix products' outputs in half precision);
- **estimated time**: every optimizer step and every held-out evaluation's FLOPs (an evaluation before training
  and after each epoch) over the device's peak FLOP/s at the session's precision times an assumed model FLOPs
  utilisation (``--gradeff-mfu``, default :data:`DEFAULT_MFU`).

The device is the session's (``--gradeff-device``) or one named (``--gradeff-dry-run=H200``): its peak comes from
the MFU meter's table (``--gradeff-peak-tflops`` overrides it) and its memory from :data:`DEVICE_MEMORY`. The
weights (given checkpoints are checked when the session starts; the suite's pretraining, cached or still to run)
and the data (a local copy or the synthetic stand-in) are said per cell. Nothing is written to the results file.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from gradeff.axes.data import TASKS
from gradeff.axes.data.real_sources import source_for
from gradeff.axes.methods import apply_method, within
from gradeff.axes.models import MODELS, build_model
from gradeff.axes.models.checkpoint import given_weights
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES, micro_batches_per_step
from gradeff.cell.devices import resolve_device
from gradeff.cell.pretrain import INFO_FILE, pretrained_folder
from gradeff.records.formatting import format_bytes, format_seconds
from gradeff.studies.hparams import (
    MEMORY_BUDGET_LEVELS,
    MEMORY_BUDGETS,
    hparams_for,
    method_hparams_for,
    pretrain_hparams,
)

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

if TYPE_CHECKING:
    import torch

__all__ = ["DEFAULT_MFU", "DEVICE_MEMORY", "PLAN_FORMAT", "CellForecast", "Target", "add_options", "dry_run_lines",
           "forecast_cell", "plan_document", "pretraining_seconds", "target_for"]

# An assumption, not a measurement: the paper-profile llm cell measured 0.33 (standard) and 0.27 (checkpoint) in
# bf16 on an H200 (docs/scale-out.md); small vision models at batch 64 rarely do better.
DEFAULT_MFU = 0.3
# Device memory by name fragment (first match wins), in bytes: what nvidia-smi reports as total for each
# (H200 "141 GB": 143,771 MiB; H100 "80 GB": 81,559 MiB), not the datasheet's rounded figure.
_MIB = 2**20
DEVICE_MEMORY: tuple[tuple[str, int], ...] = (
    ("H200", 143_771 * _MIB), ("H100", 81_559 * _MIB), ("A100-SXM4-40GB", 40_960 * _MIB),
    ("A100-PCIE-40GB", 40_960 * _MIB), ("A100", 81_920 * _MIB), ("L4", 23_034 * _MIB),
)
_GIB = 2**30
_RUNS_FIRST = "runs first"
# The JSON of --gradeff-dry-run-json; a reader refuses another format.
PLAN_FORMAT = "gradeff-dry-run/1"


def _mfu(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def add_options(parser) -> None:
    """``--gradeff-dry-run[=DEVICE]`` and the MFU its time estimate assumes (``--gradeff-mfu``)."""
    group = parser.getgroup("gradeff")
    group.addoption("--gradeff-dry-run", nargs="?", const="", default=None, metavar="DEVICE",
                    help="build every selected cell on meta and print its step FLOPs, predicted peak memory and "
                         "estimated time, then stop without training; DEVICE names the GPU to estimate for (H200, "
                         "H100, A100, L4; default: the session's device)")
    group.addoption("--gradeff-mfu", type=_mfu, default=DEFAULT_MFU, metavar="FRACTION",
                    help=f"the model FLOPs utilisation the dry run's time estimate assumes (default {DEFAULT_MFU})")
    group.addoption("--gradeff-dry-run-json", default=None, metavar="PATH",
                    help="with --gradeff-dry-run: also write its plans as JSON to PATH (every selected test's cell and "
                         "seed, each cell's estimate, the device): what `gradeff launch` sizes its jobs by")


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The device a dry run estimates for.

    Attributes:
        name: its name (a GPU's, ``cpu``).
        memory_bytes: what it holds (``None``: unknown).
        peak_flops: its peak FLOP/s at the session's precision (``None``: unknown, no time estimate).
        peak_source: where the peak comes from (the table's entry, the option).
        mfu: the utilisation assumed.
        precision: the session's precision.
    """

    name: str
    memory_bytes: int | None
    peak_flops: float | None
    peak_source: str | None
    mfu: float
    precision: str


def target_for(named: str, device: str, *, precision: str, peak_tflops: float | None, mfu: float) -> Target:
    """The device to estimate for: ``named`` (a GPU name, matched against the tables) or else the session's."""
    from gradeff.meters.flops import peak_flops_per_s  # noqa: PLC0415 - torch, see the imports

    if named:
        name, memory = named, next((size for fragment, size in DEVICE_MEMORY if fragment.lower() in named.lower()),
                                   None)
    else:
        resolved = resolve_device(device)
        if resolved.type == "cuda":
            import torch

            properties = torch.cuda.get_device_properties(resolved)
            name, memory = properties.name, properties.total_memory
        else:
            import psutil

            name, memory = "cpu", psutil.virtual_memory().total
    # The peak table's fragments are upper case (H200, A100); a name typed in lower case still finds its entry.
    peak, source = peak_flops_per_s(name.upper() if named else name, precision, peak_tflops)
    return Target(name=name, memory_bytes=memory, peak_flops=peak, peak_source=source, mfu=mfu, precision=precision)


@dataclass(frozen=True, slots=True, kw_only=True)
class CellForecast:
    """What one cell would need and take (from its plan, :class:`gradeff.cell.plan.CellPlan`).

    Attributes:
        cell: the cell's id.
        status: ``ready``, ``skipped: <reason>``, ``oom: <why>`` (over the budget or the device) or
            ``n/a: <why>`` (the cell could not be built on meta).
        weights / data: where they come from, in words.
        step_flops: FLOPs of one optimizer step (``None`` where not built).
        predicted_peak: bytes (``None`` where not built).
        seconds: estimated training and evaluation time (``None``: no peak FLOP/s known, or not built).
        checkpointed: blocks the strategy recomputes, of all (``(0, n)`` without checkpointing).
        pretrains: the suite would pretrain the model first (no weights given, none cached).
    """

    cell: str
    status: str
    weights: str = ""
    data: str = ""
    step_flops: float | None = None
    predicted_peak: int | None = None
    seconds: float | None = None
    checkpointed: tuple[int, int] = (0, 0)
    pretrains: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class _Pass:
    """One method-adapted model's pass on meta: what every strategy and seed of it shares."""

    flops: float  # forward + backward of one micro-batch
    forward_flops: float
    profile: object  # gradeff.axes.strategies.budget.StepProfile
    samples: int


def _four_bit_bytes(numel: int) -> int:
    """A bitsandbytes NF4 weight with double quantisation: packed values, 8-bit absmax per 64, float32 absmax per
    256 of those, the 16-entry NF4 code, the second level's 256-entry code and its offset."""
    blocks = math.ceil(numel / 64)
    return math.ceil(numel / 2) + blocks + 4 * math.ceil(blocks / 256) + 4 * 16 + 4 * 256 + 4


def _meta_batch(task_kind: str, hp, batch_size: int) -> dict[str, torch.Tensor]:
    import torch

    meta = torch.device("meta")
    if task_kind == "image_classification":
        return {"pixel_values": torch.empty(batch_size, 3, hp.image_size, hp.image_size, device=meta),
                "labels": torch.zeros(batch_size, dtype=torch.long, device=meta)}
    raise NotImplementedError(f"the dry run builds batches of image classifiers only, not {task_kind}")


class _SavedOnMeta:
    """Bytes autograd saves per checkpointable block, on meta, where tensors have no address: storages are told
    apart by their C++ object instead (views share it, as they share an address on a real device)."""

    def __init__(self, model, layers):
        self.excluded = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
        self.layers, self.stack, self.seen = layers, [], set()
        self.saved = {name: 0 for name, _ in layers}
        self.boundary = {name: 0 for name, _ in layers}
        self.total = 0

    def _pack(self, t):
        key = t.untyped_storage()._cdata
        if key not in self.excluded and key not in self.seen:
            self.seen.add(key)
            self.total += t.untyped_storage().nbytes()
            if self.stack:
                self.saved[self.stack[-1]] += t.untyped_storage().nbytes()
        return t

    def _leave(self, module, args, output) -> None:
        self.stack.pop()

    def run(self, fn):
        import torch

        handles = []
        for name, layer in self.layers:
            def enter(module, args, name=name):
                self.stack.append(name)
                self.boundary[name] += sum(t.untyped_storage().nbytes() for t in args if isinstance(t, torch.Tensor))
            handles.append(layer.register_forward_pre_hook(enter))
            handles.append(layer.register_forward_hook(self._leave))
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                return fn()
        finally:
            for handle in handles:
                handle.remove()


@lru_cache(maxsize=64)
def _measure(model_key: str, method: str, dataset: str, profile: str, optimizer: str, batch_size: int,
             num_classes: int, image_size: int) -> _Pass:
    """Build the model with its method on meta and run one forward and backward of a micro-batch."""
    import torch

    from gradeff.axes.strategies.budget import LayerCost, StepProfile  # noqa: PLC0415
    from gradeff.axes.strategies.layers import checkpointable_layers  # noqa: PLC0415

    # torch, see the imports
    from gradeff.meters.flops import counted  # noqa: PLC0415

    spec = MODELS[model_key]
    # QLoRA's adapters, trainable parameters and FLOPs are LoRA's; only its weights' storage differs (below).
    built_method = "lora" if method == "qlora" else method
    network = build_model(model_key, profile, num_labels=num_classes, device="meta", image_size=image_size)
    adapted = apply_method(built_method, network, method_hparams_for(built_method, model_key, profile),
                           total_steps=1, head=spec.head).model.train()
    hp = replace(hparams_for(model_key, profile, dataset=dataset), image_size=image_size)
    batch = _meta_batch(TASKS[dataset].kind, hp, batch_size)
    trainable = [p for p in adapted.parameters() if p.requires_grad]
    forward_flops = counted(lambda: adapted(**batch).loss)
    layers = checkpointable_layers(adapted)
    saved = _SavedOnMeta(adapted, layers)
    flops = counted(lambda: saved.run(lambda: adapted(**batch).loss).backward())
    parameter_bytes = sum(p.numel() * p.element_size() for p in adapted.parameters())
    if method == "qlora":
        # QLoRA stores the weight of every plain linear outside the head in 4 bits (gradeff.axes.methods.qlora): the
        # adapted ones' base layers and the others alike; the adapters and biases stay in float32.
        for name, module in adapted.named_modules():
            if type(module) is torch.nn.Linear and not within(name, spec.head) and not module.weight.requires_grad:
                parameter_bytes += _four_bit_bytes(module.weight.numel()) - module.weight.numel() * 4
    batch_bytes = sum(t.numel() * t.element_size() for t in batch.values())
    trainable_bytes = sum(p.numel() * p.element_size() for p in trainable)
    profile_ = StepProfile(
        layers=tuple(LayerCost(name=name, saved_bytes=saved.saved[name], boundary_bytes=saved.boundary[name],
                               gradient_bytes=sum(p.numel() * p.element_size() for p in layer.parameters()
                                                  if p.requires_grad)) for name, layer in layers),
        forward_backward_peak=parameter_bytes + batch_bytes + saved.total, activation_bytes=saved.total,
        parameter_bytes=parameter_bytes, trainable_bytes=trainable_bytes,
        largest_trainable_bytes=max((p.numel() * p.element_size() for p in trainable), default=0),
        optimizer_state_bytes=OPTIMIZERS[optimizer].state_bytes(trainable))
    return _Pass(flops=flops, forward_flops=forward_flops, profile=profile_, samples=batch_size)


@lru_cache(maxsize=64)
def _given_weights(model: str, path: str, profile: str, num_classes: int, seed: int):
    # Once per model and classes: every method and strategy of a backbone reads the same checkpoint.
    return given_weights(model, path, profile, num_labels=num_classes, seed=seed)


def _weights_text(cell, config, num_classes: int) -> str:
    given = dict(config.weights)
    if cell.model in given:
        weights = _given_weights(cell.model, given[cell.model], config.profile, num_classes, config.seed)
        checkpoint = weights.checkpoint or {}
        head = f", head {checkpoint['head']}" if "head" in checkpoint else ""
        return f"{weights.format} {weights.path}{head}"
    if not MODELS[cell.model].fine_tunes:
        return "random" + (" (stand-in: no weights given)" if MODELS[cell.model].methods else "")
    cached = (pretrained_folder(cell.model, config.profile, config.seed, config.cache_dir) / INFO_FILE).is_file()
    return "suite pretraining (stand-in), " + ("cached" if cached else _RUNS_FIRST)


def _data_text(cell, config) -> str:
    source = source_for(cell.dataset, config.data)
    return f"{cell.dataset}: {source.path}" if source is not None else f"{cell.dataset}: synthetic stand-in"


def forecast_cell(cell, config, target: Target) -> CellForecast:
    """A cell's forecast (see the module docstring), from its plan as the runner would make it; never raises: a
    cell that cannot be planned or built says why."""
    # torch, see the imports
    from gradeff.axes.strategies.budget import plan as budget_plan  # noqa: PLC0415
    from gradeff.axes.strategies.prepare import budget_bytes, budget_fraction  # noqa: PLC0415
    from gradeff.cell.plan import plan_cell  # noqa: PLC0415

    try:
        plan = plan_cell(cell, config)
    except Exception as exc:  # noqa: BLE001 - a cell the dry run cannot plan is reported, the others still forecast
        return CellForecast(cell=cell.id, status=_not_available(exc))
    if plan.skip is not None:
        return CellForecast(cell=cell.id, status=f"skipped: {plan.skip}")
    hp = plan.hp
    try:
        weights, data = _weights_text(cell, config, hp.num_classes), _data_text(cell, config)
        measured = _measure(cell.model, cell.method, cell.dataset, config.profile, cell.optimizer, hp.batch_size,
                            hp.num_classes, hp.image_size)
    except Exception as exc:  # noqa: BLE001 - a cell the dry run cannot build is reported, the others still forecast
        return CellForecast(cell=cell.id, status=_not_available(exc))
    strategy = STRATEGIES[cell.strategy]
    layers = [layer.name for layer in measured.profile.layers]
    status = "ready"
    if strategy.budget is not None:
        # As the cell plans it (gradeff.axes.strategies.prepare): its level, else the option, else the profile's
        # default.
        absolute = config.memory_budget or MEMORY_BUDGETS.get(config.profile)
        fraction = budget_fraction(cell.strategy, absolute, MEMORY_BUDGET_LEVELS.get(config.profile))
        budget = budget_bytes(measured.profile, fraction, absolute, config.memory_margin, cell.strategy)
        chosen = budget_plan(measured.profile, budget, config.memory_margin)
        checkpointed, peak = list(chosen.checkpointed), chosen.predicted_peak
        if not chosen.fits:
            status = (f"oom: every block checkpointed still needs {peak / _GIB:.2f} GiB > {chosen.target / _GIB:.2f} "
                      f"GiB (the {budget / _GIB:.2f} GiB budget less its {config.memory_margin:.0%} margin)")
    else:
        checkpointed = layers if strategy.checkpointing else []
        peak = measured.profile.predicted_peak(checkpointed)
        if config.memory_budget is not None and peak > config.memory_budget:
            status = f"oom: {peak / _GIB:.2f} GiB > --gradeff-memory-budget {config.memory_budget / _GIB:.2f} GiB"
    if status == "ready" and target.memory_bytes is not None and peak > target.memory_bytes:
        status = f"oom: {peak / _GIB:.1f} GiB > the device's {target.memory_bytes / _GIB:.1f} GiB"
    k = micro_batches_per_step(cell.strategy, hp.accum_steps)
    share = len(checkpointed) / len(layers) if layers else 0.0
    step_flops = k * (measured.flops + share * measured.forward_flops)
    steps = hp.epochs * (hp.train_samples // (hp.batch_size * k))
    evaluation = (hp.epochs + 1) * hp.heldout_samples * measured.forward_flops / measured.samples
    seconds = ((steps * step_flops + evaluation) / (target.peak_flops * target.mfu)
               if target.peak_flops is not None else None)
    return CellForecast(cell=cell.id, status=status, weights=weights, data=data, step_flops=step_flops,
                    predicted_peak=peak, seconds=seconds, checkpointed=(len(checkpointed), len(layers)),
                    pretrains=weights.endswith(_RUNS_FIRST))


def _not_available(exc: Exception) -> str:
    return f"n/a: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"


def _flops(value: float) -> str:
    scale, prefix = next(((scale, prefix) for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6))
                          if value >= scale), (1.0, ""))
    return f"{value / scale:.3g} {prefix}FLOP"


def pretraining_seconds(model: str, config, target: Target) -> float | None:
    """Estimated time of the suite's pretraining of ``model`` at the session's profile (its own FLOPs per sample,
    fully fine-tuned, times the recipe's samples and epochs), ``None`` without a peak FLOP/s."""
    recipe = pretrain_hparams(model, config.profile)
    hp = hparams_for(model, config.profile)
    measured = _measure(model, "full", MODELS[model].task, config.profile, "adamw", hp.batch_size,
                        recipe.num_classes, hp.image_size)
    flops = measured.flops / measured.samples * recipe.train_samples * recipe.epochs
    return flops / (target.peak_flops * target.mfu) if target.peak_flops is not None else None


def dry_run_lines(plans: list[CellForecast], target: Target, *, profile: str,
                  pretraining: dict[str, float | None] | None = None) -> list[str]:
    """The dry run's table: one line per cell, a header naming the device and the assumptions, totals."""
    memory = f"{target.memory_bytes / _GIB:.1f} GiB" if target.memory_bytes else "memory unknown"
    peak = (f"peak {target.peak_flops / 1e12:.1f} TFLOP/s at {target.precision} ({target.peak_source}), "
            f"assumed MFU {target.mfu:g}" if target.peak_flops is not None
            else f"no peak FLOP/s known at {target.precision}: give --gradeff-peak-tflops for a time estimate")
    width = max([len(p.cell) for p in plans] + [4])
    lines = [f"gradeff dry run: {len(plans)} cells, profile {profile}, on {target.name} ({memory}; {peak})",
             f"{'cell':<{width}}  {'step FLOPs':>12}  {'peak memory':>11}  {'ckpt':>5}  {'est. time':>13}  "
             f"status; weights; data"]
    for p in plans:
        if p.step_flops is None:
            lines.append(f"{p.cell:<{width}}  {'':>12}  {'':>11}  {'':>5}  {'':>13}  {p.status}")
            continue
        ckpt = f"{p.checkpointed[0]}/{p.checkpointed[1]}"
        lines.append(f"{p.cell:<{width}}  {_flops(p.step_flops):>12}  {format_bytes(p.predicted_peak):>11}  "
                     f"{ckpt:>5}  {format_seconds(p.seconds):>13}  {p.status}; {p.weights}; {p.data}")
    timed = [p.seconds for p in plans if p.seconds is not None and p.status == "ready"]
    ready = sum(p.status == "ready" for p in plans)
    lines.append(f"{ready} ready, {sum(p.status.startswith('oom') for p in plans)} over memory, "
                 f"{sum(p.status.startswith('skipped') for p in plans)} skipped, "
                 f"{sum(p.status.startswith('n/a') for p in plans)} not built; estimated time of the ready cells: "
                 f"{format_seconds(sum(timed) if timed else None)} (one seed)")
    for model, seconds in (pretraining or {}).items():
        lines.append(f"{model}: no --gradeff-weights and no cached pretraining: the suite pretrains it first "
                     f"(estimated {format_seconds(seconds)}, once for every cell and later session)")
    lines.append("step FLOPs: counted matrix products, convolutions and attention of one optimizer step (recomputation "
                 "included; element-wise work such as the Mamba scans is not counted, so their times are lower "
                 "bounds); peak: parameters + gradients + optimizer state + batch + saved activations (float32), "
                 "transients not counted; ckpt: blocks recomputed of all")
    return lines


def plan_document(tests: list[tuple[str, object, int]], plans: list[CellForecast], target: Target, *, profile: str,
                  pretraining: dict[str, float | None]) -> dict:
    """The dry run as JSON data (``--gradeff-dry-run-json``).

    Args:
        tests: every selected test as ``(node id, its grid cell or None, seed)``.
        plans: the cells' plans.
        target: the device estimated for.
        profile: the session's profile.
        pretraining: model → estimated seconds of the pretraining the suite would run first.

    Returns:
        ``{"format", "profile", "target", "pretraining", "cells": {cell id: axes and plan}, "tests": [...]}``;
        sizes in bytes, times in seconds, ``None`` where not estimated.
    """
    by_id = {plan.cell: plan for plan in plans}
    cells = {}
    for _, cell, _ in tests:
        if cell is None or cell.id in cells:
            continue
        plan = by_id[cell.id]
        cells[cell.id] = {"grid": cell.grid, "model": cell.model, "optimizer": cell.optimizer,
                          "strategy": cell.strategy, "method": cell.method, "dataset": cell.dataset,
                          "status": plan.status, "seconds": plan.seconds, "predicted_peak_bytes": plan.predicted_peak,
                          "step_flops": plan.step_flops, "pretrains": plan.pretrains}
    return {"format": PLAN_FORMAT, "profile": profile, "target": asdict(target), "pretraining": pretraining,
            "cells": cells,
            "tests": [{"nodeid": nodeid, "cell": cell.id if cell is not None else None, "seed": seed}
                      for nodeid, cell, seed in tests]}
