"""Run one cell end to end and turn whatever happened into a record.

The harness, not the code under test, owns measurement: it seeds, builds, warms up, times each
epoch (through pytest-benchmark when given a timer), and classifies failures. A failing cell —
divergence, out of memory, any exception — becomes a record with its status; it never takes the
session or other cells down.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from gradeff.axes.data import TASKS, Dataset
from gradeff.axes.methods import METHODS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.optim.cg import cg_stats
from gradeff.axes.strategies import STRATEGIES
from gradeff.axes.strategies.budget import profile_step
from gradeff.axes.strategies.prepare import BudgetUnreachable, CompiledUnderBudget, prepare
from gradeff.cell import stop
from gradeff.cell.arithmetic import cell_arithmetic, intra_op_threads
from gradeff.cell.build import Built, build_cell, build_into, release, use_device
from gradeff.cell.config import EpochTimer, MemoryBudgetExceeded, RunConfig
from gradeff.cell.devices import resolve_device
from gradeff.cell.distributed import run_sharded
from gradeff.cell.evaluation import EVAL_BATCHES, CellEvaluation, Evaluation, scoring
from gradeff.cell.execute import run_isolated, run_tuned
from gradeff.cell.inference import InferenceCost, measure_inference
from gradeff.cell.loop import Diverged, TrainState, move_batch, optimizer_step, train_epoch, warm_up
from gradeff.cell.metering import EpochMetering, aggregate, memory_breakdown
from gradeff.cell.plan import CellPlan, cell_data, plan_cell
from gradeff.cell.precision import autocast
from gradeff.cell.pretrain import StartingWeights
from gradeff.cell.record import cell_record, hparams_record
from gradeff.cell.self_tune import needs_self_tuning, run_self_tuned
from gradeff.meters.flops import StepFlops, compute_record, count_step_flops
from gradeff.records.results import CellRecord, EpochRecord, Summary
from gradeff.studies.grid import Cell, incompatibility
from gradeff.studies.hparams import MEMORY_BUDGET_LEVELS, MEMORY_BUDGETS, HParams

__all__ = ["model_flops", "run_cell", "run_plan", "trains_prebuilt"]

# A cell ends ``oom`` on any of these: the device ran out, or the budget says it would.
_OUT_OF_MEMORY = (torch.cuda.OutOfMemoryError, MemoryBudgetExceeded, BudgetUnreachable)


def _loop_timer(epoch_fn: Callable[[], object], rounds: int, after_epoch: Callable[[], object]) -> None:
    for _ in range(rounds):
        epoch_fn()
        after_epoch()


def trains_prebuilt(plan: CellPlan) -> bool:
    """Whether :func:`run_plan` trains this planned cell once, in this process, from one build: the path that takes
    a :class:`~gradeff.cell.build.Built`. Not a cell it skips (with its reason), tunes or that tunes itself (a fresh
    model per trial), isolates (built in its own process) or shards (built in each rank's process)."""
    cell, config = plan.cell, plan.config
    return (not config.isolate and plan.skip is None
            and not (config.tune is not None and METHODS[cell.method].trains)
            and not needs_self_tuning(plan)
            and not STRATEGIES[cell.strategy].shards)


def _state_bytes(optimizer_key: str, model: torch.nn.Module) -> int:
    """The optimizer state of the model's trainable parameters, by the optimizer's state law."""
    return OPTIMIZERS[optimizer_key].state_bytes(p for p in model.parameters() if p.requires_grad)


# Model FLOPs of a forward and backward pass depend on the architecture and the batch's shapes, not on the
# optimizer or the strategy: the cells of one model, method and data share one count per process.
_FLOPS_SEEN: dict[tuple, StepFlops] = {}


def model_flops(cell: Cell, config: RunConfig, state: TrainState) -> StepFlops:
    batch = state.dataset.batch(state.step_groups(0)[0][0])  # on the host: only a count moves it to the device
    key = (cell.model, cell.method, cell.dataset, config.profile, config.weights, repr(config.data), config.precision,
           state.device.type, tuple((name, tuple(t.shape)) for name, t in sorted(batch.items())))
    if key not in _FLOPS_SEEN:
        _FLOPS_SEEN[key] = count_step_flops(state.model, move_batch(batch, state.device))
    return _FLOPS_SEEN[key]


def _first_micro_batch(state: TrainState) -> dict[str, torch.Tensor]:
    return move_batch(state.dataset.batch(state.step_groups(0)[0][0]), state.device)


def _refuse_over_budget(state: TrainState, optimizer_key: str, budget: int) -> dict:
    """Measure a strategy without a budget of its own against ``--gradeff-memory-budget``; refuse it if over.

    The prediction is the budget strategies' (one measured forward + backward, the optimizer state by
    its law, the optimizer step's phase), so every strategy is held to the same figure.

    Raises:
        MemoryBudgetExceeded: the predicted peak is above the budget.
    """
    profile = profile_step(state.model, _first_micro_batch(state), state_bytes=_state_bytes(optimizer_key, state.model),
                           device=state.device)
    predicted = profile.predicted_peak()
    if predicted > budget:
        raise MemoryBudgetExceeded(f"predicted peak {predicted} B (forward + backward "
                                   f"{profile.forward_backward_peak} B "
                                   f"+ optimizer state {profile.optimizer_state_bytes} B) exceeds the memory budget "
                                   f"of {budget} B")
    return {"budget_bytes": budget, "predicted_peak_bytes": predicted}


def _heldout_fields(evaluation: Evaluation | None) -> dict:
    if evaluation is None:
        return {}
    f1 = {"heldout_f1_micro": evaluation.f1_micro, "heldout_f1_macro": evaluation.f1_macro} \
        if evaluation.f1_micro is not None else {}
    return {"heldout_loss": evaluation.loss, "heldout_accuracy": evaluation.accuracy,
            "eval_seconds": evaluation.seconds} | f1


def _validation_fields(evaluation: Evaluation | None) -> dict:
    if evaluation is None:
        return {}
    return {"validation_loss": evaluation.loss, "validation_accuracy": evaluation.accuracy}


def _inference_record(cost: InferenceCost | None, accuracy: float | None) -> dict:
    """The inference cost and the NetScore family at the final held-out accuracy (``{}`` if not measured)."""
    if cost is None:
        return {}
    return cost.as_dict() | {"scores": {key: score.as_dict() for key, score in cost.scores(accuracy).items()}}


def run_cell(cell: Cell, config: RunConfig, **options) -> CellRecord:
    """Plan ``cell`` under ``config`` (:func:`~gradeff.cell.plan.plan_cell`) and run it: :func:`run_plan`."""
    return run_plan(plan_cell(cell, config), **options)


def run_plan(plan: CellPlan, *, timer: EpochTimer = _loop_timer, built: Built | None = None,
             metering: EpochMetering | None = None) -> CellRecord:
    """Train one planned cell and return its record, whatever happens.

    With ``config.tune == "lr"`` the cell is first trained at every rate of its optimizer's grid
    (:func:`gradeff.studies.hparams.lr_grid`) plus the profile's shared rate, under the same budget (epochs,
    samples), and the rate with the lowest final held-out loss is kept (AlgoPerf's external tuning);
    the record is then a full run at that rate, with the trials, the shared rate's result and the
    search's cost under ``tuning``.

    Args:
        plan: the cell under the session's configuration (profile, seed, epochs, device, starting weights,
            tuning), planned once: every step below reads it.
        timer: runs the epoch function ``epochs`` times and the held-out evaluation after each,
            untimed; pass pytest-benchmark's pedantic wrapper to time each epoch as a benchmark round.
        built: the cell's state from :func:`~gradeff.cell.build.build_cell` of this plan, trained instead of a
            build of the runner's own: only where :func:`trains_prebuilt` holds (tuning and isolation build their
            own models). The caller keeps the objects and releases them (:func:`~gradeff.cell.build.release`)
            before the next cell's build.
        metering: the meters to record the epochs with (default: new ones).

    Returns:
        A record with status ``ok``, ``diverged``, ``oom``, ``error``, ``skipped`` or
        ``interrupted`` (Ctrl-C during the cell: the caller records it, then stops the run).
    """
    cell, config = plan.cell, plan.config
    if built is not None and not trains_prebuilt(plan):
        raise ValueError(f"{cell.id}: a prebuilt state is trained only where the runner trains one build in this "
                         "process (not a skipped, tuned, isolated or sharded cell)")
    if built is not None and built.plan is not None and built.plan.sized(plan.hp) != plan:
        raise ValueError(f"{cell.id}: the prebuilt state was built from another plan than this one")
    # Dispatched once: in a process of its own, as a rate search, or one training here (which shards a sharded
    # strategy's cell over its ranks).
    if config.isolate:
        return run_isolated(plan, _isolated_entry)
    if needs_self_tuning(plan):
        return run_self_tuned(plan, train=_run_once, warm=_warm_search, timer=timer, metering=metering)
    if config.tune is None or not METHODS[cell.method].trains or incompatibility(cell) is not None:
        return _run_once(plan, timer=timer, built=built, metering=metering)
    return run_tuned(plan, train=_run_once, warm=_warm_search, timer=timer, metering=metering)


def _isolated_entry(cell: Cell, config: RunConfig, registered: bytes = b"") -> str:
    """A cell's run in an isolated process (:func:`gradeff.cell.execute.run_isolated`): the session's entries
    registered, the cell run, its record as a JSON line."""
    if registered:
        # pytest (studies.extend): a spawned process imports this
        from gradeff.studies.extend import load_registered  # noqa: PLC0415

        load_registered(registered)
    return run_cell(cell, config).to_json()


def _warm_search(plan: CellPlan) -> None:
    built = build_cell(plan)
    if built.state is not None:
        warm_up(built.state)
    built = None  # the model and optimizer go before the trials' builds
    release(plan.config.device)


def _run_once(plan: CellPlan, *, timer: EpochTimer = _loop_timer, built: Built | None = None,
              metering: EpochMetering | None = None) -> CellRecord:
    """One training of a planned cell (the body of :func:`run_plan`)."""
    cell, config = plan.cell, plan.config
    if STRATEGIES[cell.strategy].shards and config.rank is None and plan.skip is None:
        # The cell's W processes each come back here with their rank set (each plans it under its rank); this one
        # gathers their records.
        with intra_op_threads(config.threads):
            return run_sharded(cell, config, run_cell)
    with cell_arithmetic(cell, config):
        return _train_once(plan, timer=timer, built=built, metering=metering)


def _train_once(plan: CellPlan, *, timer: EpochTimer, built: Built | None,
                metering: EpochMetering | None) -> CellRecord:
    config = plan.config
    progress = _Progress(started=built.started if built is not None else time.time())
    device = resolve_device(config.device)
    use_device(device)
    status, detail, failed_step = "ok", "", None
    if metering is None:
        metering = EpochMetering(device=device, settings=config.meters)
    try:
        if plan.skip is not None:
            status, detail = "skipped", plan.skip
        else:
            # A prebuilt cell's data was resolved by its build; the data are then its state's.
            if built is not None and built.plan is not None:
                dataset, plan = None, built.plan
            else:
                dataset, plan = cell_data(plan)
            _train(plan, device, metering, timer, progress, dataset, built)
    except Diverged as exc:
        status, detail, failed_step = "diverged", str(exc), exc.step
    except _OUT_OF_MEMORY as exc:
        status, detail = "oom", str(exc).splitlines()[0]
        failed_step = progress.next_step()
        progress.plan = getattr(exc, "plan", progress.plan)
    except KeyboardInterrupt:
        status, detail = "interrupted", stop.interruption()
        failed_step = progress.next_step()
    except Exception as exc:  # noqa: BLE001 - any other failure is a finding about this cell, not the session's end
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        status, detail = "error", f"{type(exc).__name__}: {exc} ({frame.filename}:{frame.lineno})"
    record = _record(plan, device, metering, progress, status=status, detail=detail, failed_step=failed_step)
    progress = None  # the cell's model and optimizer are released before the next cell
    if built is None:
        # A prebuilt state is its owner's: released (see release) before the next cell's build.
        release(device)
    return record


@dataclass(kw_only=True)
class _Progress:
    """How far a cell got, whatever ended it: what its record is made of."""

    started: float
    state: TrainState | None = None
    weights: StartingWeights | None = None
    plan: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    evaluation: CellEvaluation | None = None
    inference: InferenceCost | None = None
    # Conjugate gradient's counters over the timed epochs (restarts and why, closure calls, line-search
    # trials): whether CG ran as CG or as restarted steepest descent. None for other optimizers.
    cg: dict | None = None
    # The counted step, or why it could not be counted.
    flops: StepFlops | str | None = None

    def next_step(self) -> int | None:
        return self.state.global_step + 1 if self.state is not None else None


def _budget_for(strategy: str, config: RunConfig) -> int | None:
    """The absolute budget a strategy works to: the option, else (budget strategies only) the profile's default;
    ``None`` at a profile whose default is a level between the cell's own extremes (``MEMORY_BUDGET_LEVELS``)."""
    if config.memory_budget is not None or STRATEGIES[strategy].budget is None:
        return config.memory_budget
    return MEMORY_BUDGETS.get(config.profile)


def _train(plan: CellPlan, device: torch.device, metering: EpochMetering, timer: EpochTimer, progress: _Progress,
           dataset: Dataset | None, built: Built | None = None) -> None:
    """Weights, model, strategy, warm-up, the timed epochs with held-out evaluation, the memory step.

    A method that trains nothing (``zero_shot``) is evaluated as it is: one held-out pass and its
    inference cost, no strategy, no epochs.
    """
    cell, config, hp = plan.cell, plan.config, plan.hp
    if built is None:
        build_into(progress, plan, device, dataset)
    else:
        progress.weights, progress.started, progress.state = built.weights, built.started, built.state
        if built.error is not None:
            error, built.error = built.error, None  # raised once, as the cell's own build would have
            raise error
    state = progress.state
    # A tuning trial is scored on the validation split: the test split is not handed to it at all.
    test = None if config.trial else state.dataset.heldout
    classification = TASKS[cell.dataset].kind == "image_classification"
    progress.evaluation = CellEvaluation(state=state, test=test, validation=state.dataset.validation,
                                         batch_size=EVAL_BATCHES * hp.batch_size,
                                         accuracy=scoring(TASKS[cell.dataset].kind, state.dataset.info),
                                         every=hp.eval_every, total_epochs=hp.epochs)
    progress.evaluation.untrained()
    if METHODS[cell.method].trains:
        with autocast(device, config.precision):
            _train_epochs(cell, config, hp, device, metering, timer, progress)
    if test is not None and classification and not STRATEGIES[cell.strategy].trains_as_standard:
        # What the classifier costs to use, on the test split: outside the epochs, like the rest. A strategy
        # that trains the standard cell's model bit for bit deploys that model: it is measured once, there.
        progress.inference = measure_inference(state.model, test, batch_size=hp.batch_size, device=device,
                                               meter_settings=config.meters)


def _train_epochs(cell: Cell, config: RunConfig, hp: HParams, device: torch.device, metering: EpochMetering,
                  timer: EpochTimer, progress: _Progress) -> None:
    state = progress.state
    # Model FLOPs, counted once on the model as the method left it: no strategy's recomputation in them.
    try:
        progress.flops = model_flops(cell, config, state)
    except _OUT_OF_MEMORY:
        raise  # the step itself does not fit: the cell's outcome
    except Exception as exc:  # noqa: BLE001 - an op the counter cannot follow costs the MFU figure, never the cell
        progress.flops = f"{type(exc).__name__}: {exc}"
    budget = _budget_for(cell.strategy, config)
    state.model, progress.plan = prepare(cell.strategy, state.model, _first_micro_batch(state), device=device,
                                         state_bytes=_state_bytes(cell.optimizer, state.model), budget=budget,
                                         margin=config.memory_margin, level=MEMORY_BUDGET_LEVELS.get(config.profile))
    if budget is not None and STRATEGIES[cell.strategy].budget is None:
        progress.plan |= _refuse_over_budget(state, cell.optimizer, budget)
    compiling = config.compile is not None and STRATEGIES[cell.strategy].budget != "compiler"
    if compiling:
        # At the full activation budget, torch.compile's own default: the model as the strategy and method left
        # it (checkpointed blocks, adapters) is compiled by the warm-up's forward and backward, outside the epochs;
        # no graph of an earlier cell's model is reused.
        torch._dynamo.reset()
        state.model = CompiledUnderBudget(state.model, 1.0, config.compile)
    started = time.perf_counter()
    warm_up(state)
    if compiling:
        progress.plan |= {"compile_backend": config.compile, "compile_seconds": time.perf_counter() - started}
    evaluation = progress.evaluation
    with metering:
        state.pause = evaluation.pause(metering)
        timer(lambda: metering.run(lambda: train_epoch(state)), hp.epochs, lambda: evaluation.after_epoch(metering))
    state.pause = None
    progress.cg = cg_stats(state.optimizer)  # before the breakdown's extra step below
    if config.trial:
        return  # a trial's one figure is its validation loss
    # One more step, after the timed epochs, under the memory meters: the breakdown and the live peak
    # cost the measured epochs nothing.
    progress.memory = memory_breakdown(state.model, state.optimizer,
                                       lambda: optimizer_step(state, state.step_groups(0)[0]))
    if hasattr(state.model, "offloaded_bytes"):
        # What host offload moved out of the device in that step (its saved tensors never reach the counter).
        progress.plan["offloaded_bytes_per_step"] = state.model.offloaded_bytes


def _record(plan: CellPlan, device: torch.device, metering: EpochMetering, progress: _Progress,
            **outcome) -> CellRecord:
    """The cell's one record: its plan (the settings its data sized), its outcome and what its meters saw."""
    cell, config = plan.cell, plan.config
    state = progress.state
    history = state.history if state is not None else []
    evaluation = progress.evaluation
    evaluations = [*(evaluation.epochs if evaluation is not None else []), *[(None, None)] * len(history)]
    epochs = tuple(EpochRecord(**asdict(e), meters=m, **_heldout_fields(test), **_validation_fields(validation))
                   for e, m, (test, validation) in zip(history, metering.epochs, evaluations))
    meters = aggregate(metering.epochs, config.meters.grid_gco2_per_kwh)
    if progress.memory:
        meters["memory"] = progress.memory
    if progress.cg is not None:
        meters["cg"] = progress.cg
    if isinstance(progress.flops, str):
        meters["compute"] = {"not_measured": progress.flops}
    elif progress.flops is not None and history:
        meters["compute"] = compute_record(
            progress.flops, history, precision=config.precision, override_tflops=config.meters.peak_tflops,
            device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    finished = time.time()
    test = evaluation.test if evaluation is not None else None
    curve = evaluation.curve if evaluation is not None else []
    summary = Summary.of(list(epochs), finished - progress.started,
                         untrained=evaluation.initial if evaluation is not None else None,
                         floor=test.loss_floor if test is not None else None, curve=curve if test is not None else None)
    return cell_record(
        cell, config, device=str(device), started=progress.started, finished=finished,
        dataset=state.dataset if state is not None else None, model=state.model if state is not None else None,
        weights=progress.weights, **outcome, epochs=epochs, summary=summary, plan=progress.plan,
        inference=_inference_record(progress.inference, summary.final_heldout_accuracy),
        curve=tuple(point.as_dict() for point in curve),
        evaluation=evaluation.record(finished - progress.started) if evaluation is not None else {},
        hparams=hparams_record(plan.settings, config, state.optimizer if state is not None else None),
        meters=meters,
    )
