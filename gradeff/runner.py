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

from gradeff.data import TASKS, Dataset, make_dataset
from gradeff.devices import resolve_device
from gradeff.environment import code_version, environment
from gradeff.evaluation import Evaluation, evaluate
from gradeff.grid import Cell, incompatibility
from gradeff.hparams import HParams, MethodHParams, hparams_for, method_hparams_for
from gradeff.loop import Diverged, TrainState, optimizer_step, train_epoch, warm_up
from gradeff.metering import EpochMetering, MeterSettings, aggregate, memory_breakdown
from gradeff.meters import ActivationCounter, parameter_counts, trainable_parameter_bytes
from gradeff.methods import apply_method
from gradeff.models import MODELS, build_model
from gradeff.optim import OPTIMIZERS, build_optimizer
from gradeff.pretrain import StartingWeights, starting_weights
from gradeff.results import CellRecord, EpochRecord, Summary
from gradeff.strategies import STRATEGIES, enable_checkpointing, micro_batches_per_step

__all__ = ["EpochTimer", "MemoryBudgetExceeded", "RunConfig", "prepare_state", "run_cell"]

# Runs ``epoch_fn`` ``rounds`` times, and ``after_epoch`` after each round outside its timing
# (pytest-benchmark's pedantic mode with a teardown, or a plain loop).
EpochTimer = Callable[[Callable[[], object], int, Callable[[], object]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Session-wide settings of a run.

    Attributes:
        epochs: ``None`` uses the profile's epochs.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        weights: model key → a local ``save_pretrained`` folder to start from.
        cache_dir: where the suite's pretrained backbones are cached (``None``: the default cache).
    """

    profile: str = "tiny"
    seed: int = 0
    epochs: int | None = None
    device: str = "auto"
    session: str = ""
    meters: MeterSettings = MeterSettings()
    memory_budget: int | None = None
    weights: tuple[tuple[str, str], ...] = ()
    cache_dir: str | None = None


class MemoryBudgetExceeded(RuntimeError):
    """A cell needs more memory than ``--gradeff-memory-budget`` allows: recorded as ``oom``."""


# Evaluation keeps no activations for backward, so it runs in batches this many times the training
# batch: fewer, larger passes cost less per sample (the memory the training step needed is the bound).
_EVAL_BATCHES = 4


@lru_cache(maxsize=8)
def _dataset(task: str, hp: HParams, seed: int) -> Dataset:
    # Cells of one model share their data; building it once per session keeps it out of every cell.
    return make_dataset(task, hp, seed)


def _loop_timer(epoch_fn: Callable[[], object], rounds: int, after_epoch: Callable[[], object]) -> None:
    for _ in range(rounds):
        epoch_fn()
        after_epoch()


def _warmup_scheduler(optimizer, hp: HParams, total_steps: int):
    warmup_steps = math.ceil(hp.warmup_ratio * total_steps)
    if warmup_steps == 0:
        return None
    # Linear warm-up, then constant: the paper gives the warm-up ratio and nothing after it.
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup_steps))


def prepare_state(cell: Cell, config: RunConfig, hp: HParams, device: torch.device, *,
                  weights: StartingWeights | None = None, method_hp: MethodHParams | None = None) -> TrainState:
    """Build the data, model (weights loaded, strategy and method applied), optimizer and scheduler of a cell."""
    model_spec = MODELS[cell.model]
    dataset = _dataset(cell.dataset, hp, config.seed)
    method_hp = method_hp or method_hparams_for(cell.method, cell.model, config.profile)
    # Same seed before building: every optimizer, strategy and method of a model starts from the same
    # weights (and the same fresh head when a pretrained backbone meets a new dataset).
    torch.manual_seed(config.seed)
    weights_dir = weights.path if weights is not None else None
    model = build_model(cell.model, config.profile, num_labels=hp.num_classes, weights_dir=weights_dir).to(device)
    if STRATEGIES[cell.strategy].checkpointing:
        enable_checkpointing(model)
    k = micro_batches_per_step(cell.strategy, hp.accum_steps)
    steps = len(dataset) // (hp.batch_size * k) * hp.epochs
    adapted = apply_method(cell.method, model, method_hp, total_steps=steps, head=model_spec.head)
    trainable = [p for p in adapted.model.parameters() if p.requires_grad]
    optimizer = build_optimizer(cell.optimizer, trainable, hp.lr * method_hp.lr_scale)
    return TrainState(model=adapted.model, optimizer=optimizer, dataset=dataset, batch_size=hp.batch_size,
                      micro_batches_per_step=k, seed=config.seed, device=device,
                      scheduler=_warmup_scheduler(optimizer, hp, steps), after_step=adapted.after_step)


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


def _heldout_fields(evaluation: Evaluation | None) -> dict:
    if evaluation is None:
        return {}
    return {"heldout_loss": evaluation.loss, "heldout_accuracy": evaluation.accuracy,
            "eval_seconds": evaluation.seconds}


def _task_record(cell: Cell, dataset: Dataset) -> dict:
    """The data a cell trained on, with the floors and Bayes accuracy its numbers are read against."""
    heldout = dataset.heldout
    return {
        "key": cell.dataset, "name": TASKS[cell.dataset].name, "train_samples": len(dataset),
        "loss_floor": dataset.loss_floor, "heldout_samples": len(heldout) if heldout is not None else 0,
        "heldout_loss_floor": heldout.loss_floor if heldout is not None else None,
        "bayes_accuracy": heldout.info.get("bayes_accuracy") if heldout is not None else None,
        "info": dataset.info,
    }


def run_cell(cell: Cell, config: RunConfig, *, timer: EpochTimer = _loop_timer) -> CellRecord:
    """Train one cell and return its record, whatever happens.

    Args:
        cell: the cell.
        config: profile, seed, epochs, device, starting weights.
        timer: runs the epoch function ``epochs`` times and the held-out evaluation after each,
            untimed; pass pytest-benchmark's pedantic wrapper to time each epoch as a benchmark round.

    Returns:
        A record with status ``ok``, ``diverged``, ``oom``, ``error``, ``skipped`` or
        ``interrupted`` (Ctrl-C during the cell: the caller records it, then stops the run).
    """
    started = time.time()
    hp = hparams_for(cell.model, config.profile, epochs=config.epochs, dataset=cell.dataset)
    method_hp = method_hparams_for(cell.method, cell.model, config.profile)
    reason = incompatibility(cell)
    device = resolve_device(config.device)
    status, detail, failed_step = "ok", "", None
    state = weights = None
    metering = EpochMetering(device=device, settings=config.meters)
    memory: dict = {}
    evaluations: list[Evaluation] = []
    try:
        if reason is not None:
            status, detail = "skipped", reason
        else:
            weights = starting_weights(cell.model, config.profile, config.seed, local=dict(config.weights),
                                       cache_dir=config.cache_dir, device=str(device))
            # A one-off pretraining is the cache's cost (recorded in ``weights``), not this cell's.
            started = time.time()
            state = prepare_state(cell, config, hp, device, weights=weights, method_hp=method_hp)
            _warm_up_within_budget(state, cell.optimizer, config.memory_budget)
            heldout = state.dataset.heldout
            classification = TASKS[cell.dataset].kind == "image_classification"

            def evaluate_heldout():
                if heldout is not None:
                    evaluations.append(evaluate(state.model, heldout, batch_size=_EVAL_BATCHES * hp.batch_size,
                                                device=device, accuracy=classification))

            with metering:
                timer(lambda: metering.run(lambda: train_epoch(state)), hp.epochs, evaluate_heldout)
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
    epochs = tuple(EpochRecord(**asdict(e), meters=m, **_heldout_fields(ev))
                   for e, m, ev in zip(history, metering.epochs, [*evaluations, *[None] * len(history)]))
    meters = aggregate(metering.epochs, config.meters.grid_gco2_per_kwh)
    if memory:
        meters["memory"] = memory
    finished = time.time()
    record = CellRecord(
        cell=cell.id, grid=cell.grid, model=cell.model, optimizer=cell.optimizer, strategy=cell.strategy,
        method=cell.method, dataset=cell.dataset,
        profile=config.profile, seed=config.seed, device=str(device), status=status, detail=detail,
        failed_step=failed_step, epochs=epochs, summary=Summary.of(list(epochs), finished - started),
        loss_floor=state.dataset.loss_floor if state is not None else None,
        task=_task_record(cell, state.dataset) if state is not None else {},
        parameters=parameter_counts(state.model) if state is not None else {},
        weights=weights.to_record() if weights is not None else {},
        hparams=asdict(hp) | {"method": asdict(method_hp)}, environment=environment(str(device)), meters=meters,
        session=config.session, code_version=code_version(),
        started_at=started, finished_at=finished,
    )
    state = None  # the cell's model and optimizer are released before the next cell
    _release(device)
    return record
