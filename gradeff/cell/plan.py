"""What a cell is to run with, resolved before anything is built: its plan, then its data.

:func:`plan_cell` resolves a cell under one session configuration once, into a frozen :class:`CellPlan`: its
hyper-parameters (its specs' sizes, the session's overrides, the protocol's rate) and why it is skipped, if it is.
The public fixtures, the runner and the dry run each take that plan and pass it down (build, train, record), so a
cell is planned one way whoever runs it and no step resolves it again. A rate search's trial is a cell under another
configuration (another rate, the validation split only): it is planned anew (:meth:`CellPlan.under`).

:func:`cell_data` gives the planned cell's data and the sizes real data sets (drawn once per machine, built once per
process); it runs when the cell is built, not when it is planned, so a dry run and a skipped cell read no data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from gradeff.axes.data import TASKS, Dataset, data_sizes
from gradeff.axes.data.cache import cached
from gradeff.axes.data.real import load_real
from gradeff.axes.data.real_sources import source_for
from gradeff.axes.data.real_tensors import BPE_VOCAB
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES
from gradeff.cell.devices import gpu_count, process_group_backend, resolve_device
from gradeff.cell.precision import precision_incompatibility
from gradeff.cell.pretrain import cache_root
from gradeff.cell.protocols import RateChoice, choose_rate
from gradeff.studies.grid import Cell, incompatibility
from gradeff.studies.hparams import HParams, MethodHParams, hparams_for, method_hparams_for

if TYPE_CHECKING:
    from gradeff.cell.config import RunConfig

__all__ = ["CellPlan", "CellSettings", "cannot_run", "cell_data", "plan_cell", "sharding_incompatibility",
           "task_dataset"]


class CellSettings(NamedTuple):
    """What a cell trains with: its sizes, its fine-tuning method's settings and its learning rate's choice."""

    hp: HParams
    method_hp: MethodHParams
    rate: RateChoice


@dataclass(frozen=True, slots=True)
class CellPlan:
    """A cell under one session configuration, resolved once: what every later step reads instead of resolving it.

    Attributes:
        cell: the cell.
        config: the session's configuration for it (seed, profile, protocol, device, ...).
        settings: its sizes, method settings and rate (:func:`plan_cell`); once its data is built, with the sizes
            real data sets (:meth:`sized`).
        skip: why it is skipped before any of it is built, or ``None`` where it runs.
    """

    cell: Cell
    config: RunConfig
    settings: CellSettings
    skip: str | None

    @property
    def hp(self) -> HParams:
        return self.settings.hp

    @property
    def method_hp(self) -> MethodHParams:
        return self.settings.method_hp

    @property
    def rate(self) -> RateChoice:
        return self.settings.rate

    def sized(self, hp: HParams) -> CellPlan:
        """The plan with the sizes its data set (:func:`cell_data`: real data has the rows and classes it has)."""
        return replace(self, settings=self.settings._replace(hp=hp))

    def under(self, **changes) -> CellPlan:
        """The same cell planned under a changed configuration (a search's trial: another rate, fewer epochs)."""
        return plan_cell(self.cell, replace(self.config, **changes))


def plan_cell(cell: Cell, config: RunConfig) -> CellPlan:
    """The cell's plan under ``config``: its settings (:func:`_settings`) and its skip reason (:func:`cannot_run`)."""
    return CellPlan(cell=cell, config=config, settings=_settings(cell, config), skip=cannot_run(cell, config))


def _settings(cell: Cell, config: RunConfig) -> CellSettings:
    """The cell's sizes and method settings, with its rate as the protocol (or a trial) sets it: the one place a
    cell's hyper-parameters are put together (real data's own sizes are :func:`cell_data`'s).

    Where the rate is not the shared one it is the optimizer's whole rate: ``hp.lr`` holds it and the method's
    scale is 1 (a tuned rate was tuned with the method in place).
    """
    hp = hparams_for(cell.model, config.profile, epochs=config.epochs, dataset=cell.dataset)
    if config.train_samples is not None:
        step = hp.batch_size * hp.accum_steps
        hp = replace(hp, train_samples=max(step, min(hp.train_samples, config.train_samples) // step * step))
    method_hp = method_hparams_for(cell.method, cell.model, config.profile)
    if config.lr is not None:
        rate = RateChoice(lr=config.lr, source=config.lr_source or "a tuning trial's rate", replaces=True)
    elif cell.method in METHODS and not METHODS[cell.method].trains:
        # Evaluated as it is: a rate would claim a choice (shared, tuned) that was never used.
        rate = RateChoice(lr=hp.lr * method_hp.lr_scale, source=f"none: {cell.method} trains nothing, no rate is used")
    else:
        rate = choose_rate(config.protocol, profile=config.profile, model=cell.model, optimizer=cell.optimizer,
                           method=cell.method, dataset=cell.dataset, shared_lr=hp.lr * method_hp.lr_scale,
                           strategy=cell.strategy, given_data=any(source.key == cell.dataset for source in config.data))
    if rate.replaces:
        hp, method_hp = replace(hp, lr=rate.lr), replace(method_hp, lr_scale=1.0)
    return CellSettings(hp, method_hp, rate)


def task_dataset(task: str, hp: HParams, seed: int, cache_dir: str | None = None) -> Dataset:
    """The task's data for these sizes: cells of one model share it, whatever their rate or epochs."""
    return _sized_dataset(task, data_sizes(task, hp), seed, cache_dir)


@lru_cache(maxsize=8)
def _sized_dataset(task: str, sizes: tuple, seed: int, cache_dir: str | None) -> Dataset:
    # Built once per process (a tuning search's trials at other rates reuse it too), drawn once per machine.
    spec = TASKS[task]

    def draw() -> Dataset:
        return spec.build(seed=seed, **dict(sizes))

    if not isinstance(spec.builder, str):
        return draw()
    return cached(spec.builder, {"seed": seed, **dict(sizes), **spec.options}, draw, root=cache_root(cache_dir))


@lru_cache(maxsize=8)
def _real_dataset(source, **settings) -> Dataset:
    return load_real(source, **settings)


def cell_data(plan: CellPlan) -> tuple[Dataset, CellPlan]:
    """The planned cell's data, and its plan with the sizes real data sets (:meth:`CellPlan.sized`).

    Real data has the rows it has: a cell trains on at most the profile's training samples, in whole steps of
    ``batch_size × accum_steps`` (so every strategy sees the same samples), and the head has the data's classes.
    """
    dataset, hp = _data(plan.cell, plan.config, plan.hp)
    return dataset, plan.sized(hp)


def _data(cell: Cell, config: RunConfig, hp: HParams) -> tuple[Dataset, HParams]:
    source = source_for(cell.dataset, config.data)
    if source is None:
        return task_dataset(cell.dataset, hp, config.seed, config.cache_dir), hp
    # The caps come from the profile alone, so every cell of a session asks for (and caches) the same tensors.
    caps = hparams_for(cell.model, config.profile, dataset=cell.dataset)
    data = _real_dataset(source, kind=TASKS[cell.dataset].kind, image_size=hp.image_size, seq_len=hp.seq_len,
                         caption_len=hp.caption_len, vocab_size=BPE_VOCAB[config.profile],
                         train_cap=caps.train_samples, heldout_cap=caps.heldout_samples,
                         cache_root=cache_root(config.cache_dir), task=cell.dataset)
    step = hp.batch_size * hp.accum_steps
    usable = len(data) // step * step
    if usable == 0:
        raise ValueError(f"{cell.dataset}: {len(data)} training samples make no whole step of "
                         f"{hp.batch_size} × {hp.accum_steps}")
    if usable < len(data):
        data = data.head(usable)
    # Markov states belong to the synthetic text; real text's vocabulary is the tokenizer's (in the task's info).
    return data, replace(hp, train_samples=usable, heldout_samples=len(data.heldout),
                         validation_samples=len(data.validation) if data.validation is not None else 0, num_states=None,
                         num_classes=data.info.get("num_classes", hp.num_classes))


def cannot_run(cell: Cell, config: RunConfig) -> str | None:
    """Why the cell cannot run with these settings (its skip reason), or ``None``."""
    return (_weights_needed(cell, config) or incompatibility(cell)
            or precision_incompatibility(cell.optimizer, config.precision) or sharding_incompatibility(cell, config)
            or _left_out_on_cpu(cell, config))


def _left_out_on_cpu(cell: Cell, config: RunConfig) -> str | None:
    """A strategy that measures nothing of what it is for on a CPU (:attr:`StrategySpec.cpu_limitation`), on a CPU,
    unless the session named it: the default run spends its minutes on what a CPU can answer."""
    limitation = STRATEGIES[cell.strategy].cpu_limitation
    if limitation is None or cell.strategy in config.named_strategies or resolve_device(config.device).type != "cpu":
        return None
    return f"left out on a CPU unless named (--gradeff-strategies {cell.strategy} runs it here): {limitation}"


def _weights_needed(cell: Cell, config: RunConfig) -> str | None:
    """A model that runs only from given weights, without them (or without an implementation to load them into)."""
    spec = MODELS[cell.model]
    if spec.needs_weights and cell.model not in dict(config.weights):
        return (f"needs weights: --gradeff-weights {cell.model}=PATH (a save_pretrained copy of {spec.hub_id}, with "
                f"its tokenizer) or {cell.model}=hub with --gradeff-allow-hub"
                + (f"; and besides, {spec.unavailable}" if spec.unavailable else ""))
    if spec.unavailable:
        return f"not runnable: {spec.unavailable}"
    return None


def sharding_incompatibility(cell: Cell, config: RunConfig) -> str | None:
    """Why ``cell`` cannot be sharded over ``config.world_size`` processes, or ``None`` (also for unsharded cells)."""
    if not STRATEGIES[cell.strategy].shards:
        return None
    method, size = METHODS[cell.method], config.world_size
    if not method.trains:
        return f"{method.name} trains nothing, so there is nothing to shard"
    if any(module == "bitsandbytes" for module, _ in method.requires):
        return f"{method.name}'s 4-bit weights (bitsandbytes) cannot be cut into FSDP shards"
    optimizer = OPTIMIZERS[cell.optimizer]
    if not optimizer.target.startswith("torch.optim:"):
        # torch's optimizers step DTensor shards; CG's flat vectors and bitsandbytes' 8-bit kernels take whole tensors.
        return f"{optimizer.name} is not a torch.optim optimizer, which FSDP's sharded parameters need"
    if config.precision == "fp16":
        return "fp16 loss scaling of sharded gradients needs a sharded scaler; use bf16 or fp32"
    hp = hparams_for(cell.model, config.profile, epochs=config.epochs, dataset=cell.dataset)
    last = hp.train_samples % hp.batch_size
    if hp.batch_size < size or 0 < last < size:
        return (f"a micro-batch of {min(hp.batch_size, last or hp.batch_size)} samples cannot be split over "
                f"{size} processes")
    if process_group_backend(config.device) == "nccl":
        if size > gpu_count():
            return f"{size} processes need {size} GPUs; {gpu_count()} visible"
    return None
