"""Run one cell end to end and turn whatever happened into a record.

The harness, not the code under test, owns measurement: it seeds, builds, warms up, times each
epoch (through pytest-benchmark when given a timer), and classifies failures. A failing cell —
divergence, out of memory, any exception — becomes a record with its status; it never takes the
session or other cells down.
"""

from __future__ import annotations

import gc
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from gradeff.data import Dataset, make_dataset
from gradeff.devices import resolve_device
from gradeff.environment import code_version, environment
from gradeff.grid import Cell, incompatibility
from gradeff.hparams import HParams, hparams_for
from gradeff.loop import Diverged, TrainState, optimizer_step, train_epoch, warm_up
from gradeff.metering import EpochMetering, MeterSettings, aggregate, memory_breakdown
from gradeff.meters import ActivationCounter, trainable_parameter_bytes
from gradeff.models import MODELS, build_model
from gradeff.optim import OPTIMIZERS, build_optimizer
from gradeff.results import CellRecord, EpochRecord, Summary
from gradeff.strategies import STRATEGIES, enable_checkpointing, micro_batches_per_step

__all__ = ["EpochTimer", "MemoryBudgetExceeded", "RunConfig", "prepare_state", "run_cell"]

# Runs ``epoch_fn`` ``rounds`` times (pytest-benchmark's pedantic mode, or a plain loop).
EpochTimer = Callable[[Callable[[], object], int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Session-wide settings of a run.

    Attributes:
        epochs: ``None`` uses the profile's epochs.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
    """

    profile: str = "tiny"
    seed: int = 0
    epochs: int | None = None
    device: str = "auto"
    session: str = ""
    meters: MeterSettings = MeterSettings()
    memory_budget: int | None = None


class MemoryBudgetExceeded(RuntimeError):
    """A cell needs more memory than ``--gradeff-memory-budget`` allows: recorded as ``oom``."""


@lru_cache(maxsize=8)
def _dataset(task: str, hp: HParams, seed: int) -> Dataset:
    # Cells of one model share their data; building it once per session keeps it out of every cell.
    return make_dataset(task, hp, seed)


def _loop_timer(epoch_fn: Callable[[], object], rounds: int) -> None:
    for _ in range(rounds):
        epoch_fn()


def _warmup_scheduler(optimizer, hp: HParams, total_steps: int):
    warmup_steps = math.ceil(hp.warmup_ratio * total_steps)
    if warmup_steps == 0:
        return None
    # Linear warm-up, then constant: the paper gives the warm-up ratio and nothing after it.
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup_steps))


def prepare_state(cell: Cell, config: RunConfig, hp: HParams, device: torch.device) -> TrainState:
    """Build the data, model (strategy applied), optimizer and scheduler of a cell."""
    model_spec = MODELS[cell.model]
    dataset = _dataset(model_spec.task, hp, config.seed)
    # Same seed before building: every optimizer and strategy of a model starts from the same weights.
    torch.manual_seed(config.seed)
    model = build_model(cell.model, config.profile, num_labels=hp.num_classes).to(device)
    if STRATEGIES[cell.strategy].checkpointing:
        enable_checkpointing(model)
    optimizer = build_optimizer(cell.optimizer, [p for p in model.parameters() if p.requires_grad], hp.lr)
    k = micro_batches_per_step(cell.strategy, hp.accum_steps)
    steps_per_epoch = len(dataset) // (hp.batch_size * k)
    return TrainState(model=model, optimizer=optimizer, dataset=dataset, batch_size=hp.batch_size,
                      micro_batches_per_step=k, seed=config.seed, device=device,
                      scheduler=_warmup_scheduler(optimizer, hp, steps_per_epoch * hp.epochs))


def _release(device: torch.device) -> None:
    # Drop the cell's tensors before the next cell so peaks and OOMs do not leak across cells.
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _warm_up_within_budget(state: TrainState, optimizer_key: str, budget: int | None) -> None:
    """Warm up; with a budget, count the warm-up's activations and refuse a cell that exceeds it.

    Activation bytes are measured on the warm-up pass (one micro-batch, strategy applied);
    optimizer-state bytes follow the optimizer's state law (state tensors × trainable bytes),
    which the meters' tests prove exact up to step counters.
    """
    if budget is None:
        warm_up(state)
        return
    with ActivationCounter(state.model) as counter:
        warm_up(state)
    state_bytes = OPTIMIZERS[optimizer_key].state_per_param * trainable_parameter_bytes(state.model)
    needed = counter.saved_bytes + state_bytes
    if needed > budget:
        raise MemoryBudgetExceeded(f"activations {counter.saved_bytes} B + optimizer state {state_bytes} B = "
                                   f"{needed} B exceed the memory budget of {budget} B")


def run_cell(cell: Cell, config: RunConfig, *, timer: EpochTimer = _loop_timer) -> CellRecord:
    """Train one cell and return its record, whatever happens.

    Args:
        cell: the cell.
        config: profile, seed, epochs, device.
        timer: runs the epoch function ``epochs`` times; pass pytest-benchmark's pedantic
            wrapper to time each epoch as a benchmark round.

    Returns:
        A record with status ``ok``, ``diverged``, ``oom``, ``error``, ``skipped`` or
        ``interrupted`` (Ctrl-C during the cell: the caller records it, then stops the run).
    """
    started = time.time()
    hp = hparams_for(cell.model, config.profile, epochs=config.epochs)
    reason = incompatibility(MODELS[cell.model], OPTIMIZERS[cell.optimizer], STRATEGIES[cell.strategy])
    device = resolve_device(config.device)
    status, detail, failed_step = "ok", "", None
    state = None
    metering = EpochMetering(device=device, settings=config.meters)
    memory: dict = {}
    try:
        if reason is not None:
            status, detail = "skipped", reason
        else:
            state = prepare_state(cell, config, hp, device)
            _warm_up_within_budget(state, cell.optimizer, config.memory_budget)
            with metering:
                timer(lambda: metering.run(lambda: train_epoch(state)), hp.epochs)
            # One more step, after the timed epochs, under the activation counter: the breakdown
            # costs the measured epochs nothing.
            memory = memory_breakdown(state.model, state.optimizer,
                                      lambda: optimizer_step(state, state.step_groups(0)[0]))
    except Diverged as exc:
        status, detail, failed_step = "diverged", str(exc), exc.step
    except (torch.cuda.OutOfMemoryError, MemoryBudgetExceeded) as exc:
        status, detail = "oom", str(exc).splitlines()[0]
        failed_step = state.global_step + 1 if state is not None else None
    except KeyboardInterrupt:
        status, detail = "interrupted", "interrupted by the user (Ctrl-C)"
        failed_step = state.global_step + 1 if state is not None else None
    except Exception as exc:  # any other failure is a finding about this cell, not the session's end
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        status, detail = "error", f"{type(exc).__name__}: {exc} ({frame.filename}:{frame.lineno})"
    history = state.history if state is not None else []
    epochs = tuple(EpochRecord(**asdict(e), meters=m) for e, m in zip(history, metering.epochs))
    meters = aggregate(metering.epochs, config.meters.grid_gco2_per_kwh)
    if memory:
        meters["memory"] = memory
    finished = time.time()
    record = CellRecord(
        cell=cell.id, model=cell.model, optimizer=cell.optimizer, strategy=cell.strategy,
        profile=config.profile, seed=config.seed, device=str(device), status=status, detail=detail,
        failed_step=failed_step, epochs=epochs, summary=Summary.of(list(epochs), finished - started),
        loss_floor=state.dataset.loss_floor if state is not None else None,
        hparams=asdict(hp), environment=environment(str(device)), meters=meters, session=config.session,
        code_version=code_version(),
        started_at=started, finished_at=finished,
    )
    state = None  # the cell's model and optimizer are released before the next cell
    _release(device)
    return record
