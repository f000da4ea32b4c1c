"""A cell's state built before it trains: its data, model (starting weights loaded, method applied), optimizer
and scheduler, the device it runs on, and what is released after it.

:func:`gradeff.cell.run.run_plan` builds a planned cell here (or takes a :class:`Built` from the public fixtures, which
build it through :func:`build_cell`), then trains it.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass

import torch

from gradeff.axes.data import Dataset
from gradeff.axes.methods import apply_method
from gradeff.axes.models import MODELS, build_model
from gradeff.axes.models._layers import freeze_batch_statistics
from gradeff.axes.models.checkpoint import load_checkpoint
from gradeff.axes.optim import build_optimizer
from gradeff.axes.strategies import micro_batches_per_step
from gradeff.axes.strategies.sharded import Ranks, shard_model
from gradeff.cell.arithmetic import cell_arithmetic
from gradeff.cell.devices import resolve_device
from gradeff.cell.loop import TrainState
from gradeff.cell.plan import CellPlan, cell_data
from gradeff.cell.precision import make_scaler
from gradeff.cell.pretrain import StartingWeights, starting_weights
from gradeff.studies.hparams import HParams

__all__ = ["Built", "build_cell", "build_into", "prepare_state", "release", "use_device"]


def _warmup_scheduler(optimizer, hp: HParams, total_steps: int):
    warmup_steps = math.ceil(hp.warmup_ratio * total_steps)
    if warmup_steps == 0:
        return None
    # Linear warm-up, then constant: the paper gives the warm-up ratio and nothing after it.
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup_steps))


def prepare_state(plan: CellPlan, device: torch.device, *, weights: StartingWeights | None = None,
                  dataset: Dataset | None = None) -> TrainState:
    """Build the data, model (weights loaded, method applied), optimizer and scheduler of a planned cell.

    The strategy's own preparation of the model (:func:`gradeff.axes.strategies.prepare.prepare`) follows.

    Args:
        dataset: the cell's data as :func:`gradeff.cell.plan.cell_data` gave it, with ``plan`` sized by it;
            ``None``: resolved here.
    """
    if dataset is None:
        dataset, plan = cell_data(plan)
    cell, config, hp, method_hp = plan.cell, plan.config, plan.hp, plan.method_hp
    model_spec = MODELS[cell.model]
    # Same seed before building: every optimizer, strategy and method of a model starts from the same
    # weights (and the same fresh head when a pretrained backbone meets a new dataset).
    torch.manual_seed(config.seed)
    # A published checkpoint (a state dict) loads into the built model by its key map; a folder through
    # transformers.
    state_dict = weights is not None and weights.format == "state_dict"
    weights_dir = weights.path if weights is not None and not state_dict else None
    model = build_model(cell.model, config.profile, num_labels=hp.num_classes, weights_dir=weights_dir,
                        vocab_size=dataset.info.get("vocab_size"), image_size=hp.image_size)
    if state_dict:
        load_checkpoint(model, cell.model, weights.path, num_labels=hp.num_classes)
    if weights is not None and weights.source != "random" and model_spec.batch_norm:
        # Fine-tuning keeps the pretrained backbone's BatchNorm statistics (see freeze_batch_statistics).
        freeze_batch_statistics(model)
    model = model.to(device)
    k = micro_batches_per_step(cell.strategy, hp.accum_steps)
    steps = len(dataset) // (hp.batch_size * k) * hp.epochs
    adapted = apply_method(cell.method, model, method_hp, total_steps=steps, head=model_spec.head)
    ranks = None
    if config.rank is not None:
        # Sharded before the optimizer is built: it must hold this process's shards, not the whole parameters.
        shard_model(adapted.model, device, config.world_size)
        ranks = Ranks(config.rank, config.world_size)
    trainable = [p for p in adapted.model.parameters() if p.requires_grad]
    # A method that trains nothing (a zero-shot baseline) gets no optimizer: its cell only evaluates.
    optimizer = (build_optimizer(cell.optimizer, trainable, hp.lr * method_hp.lr_scale, fused=config.fused)
                 if trainable else None)
    return TrainState(model=adapted.model, optimizer=optimizer, dataset=dataset, batch_size=hp.batch_size,
                      micro_batches_per_step=k, seed=config.seed, device=device,
                      scheduler=_warmup_scheduler(optimizer, hp, steps) if optimizer is not None else None,
                      after_step=adapted.after_step, scaler=make_scaler(device, config.precision), ranks=ranks,
                      workers=config.workers)


@dataclass(kw_only=True)
class Built:
    """A cell's state built before :func:`~gradeff.cell.run.run_plan` (by :func:`build_cell`): what the public
    fixtures hand a grid test, and then what the runner trains.

    Attributes:
        state: data, model (weights loaded, method applied), optimizer and scheduler; ``None`` if building failed.
        weights: the starting weights, once resolved.
        started: when building the model began (a one-off pretraining is the cache's cost): the record's start.
        plan: the cell's plan with the sizes its data set (real data sets its own); ``None`` if that failed.
        error: what building raised; :func:`~gradeff.cell.run.run_plan` raises it again inside the cell, so it
            becomes the cell's status (``oom``, ``error``, ``interrupted``) like a failure of its own build.
    """

    state: TrainState | None = None
    weights: StartingWeights | None = None
    started: float = 0.0
    plan: CellPlan | None = None
    error: BaseException | None = None


def use_device(device: torch.device) -> None:
    if device.type == "cuda" and device.index is not None:
        # Calls that take no device (empty_cache, library kernels) then use this cell's GPU, and a pinned
        # xdist worker opens no context on GPU 0.
        torch.cuda.set_device(device)


def build_into(target, plan: CellPlan, device: torch.device, dataset: Dataset) -> None:
    """Starting weights, then model and optimizer on the cell's ``dataset``, into ``target`` (a :class:`Built` or
    the cell's progress): whatever was resolved before a failure stays there for the record.

    ``plan`` is the cell's plan sized by its data (:func:`~gradeff.cell.plan.cell_data`)."""
    cell, config = plan.cell, plan.config
    target.weights = starting_weights(cell.model, config.profile, config.seed, local=dict(config.weights),
                                      cache_dir=config.cache_dir, device=str(device), num_labels=plan.hp.num_classes)
    # A one-off pretraining is the cache's cost (recorded in ``weights``), not this cell's.
    target.started = time.time()
    target.state = prepare_state(plan, device, weights=target.weights, dataset=dataset)


def build_cell(plan: CellPlan) -> Built:
    """Build a planned cell's data, model and optimizer as :func:`~gradeff.cell.run.run_plan` would, for
    ``run_plan(plan, built=)``.

    Never raises: a failure is kept in ``error`` for the cell's record. The caller owns the objects;
    :func:`release` before the next cell's build drops what the previous one left.
    """
    built = Built(started=time.time())
    device = resolve_device(plan.config.device)
    use_device(device)
    try:
        # As while training: a pretraining run on the way sees the same arithmetic.
        with cell_arithmetic(plan.cell, plan.config):
            dataset, built.plan = cell_data(plan)
            build_into(built, built.plan, device, dataset)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - the build's failure is kept and becomes the cell's record
        built.error = exc
    return built


def release(device: torch.device | str) -> None:
    """What the runner does after each cell it built itself: free the last cell's tensors, freeze what survives."""
    _release(resolve_device(device) if isinstance(device, str) else device)


def _release(device: torch.device) -> None:
    # Drop the cell's tensors before the next cell so peaks and OOMs do not leak across cells.
    gc.collect()
    # What survives a cell is the session's own (imported modules, cached datasets): freezing it keeps
    # the next cell's full collection from walking the hundreds of thousands of objects transformers,
    # peft and torch import (0.2 s per cell on two cores). Frozen objects are still freed by reference
    # counting; only cycles among them would stay.
    gc.freeze()
    if device.type == "cuda":
        torch.cuda.empty_cache()
