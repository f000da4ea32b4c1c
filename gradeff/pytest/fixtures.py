"""Public fixtures: a benchmark of your own, from gradeff's parts, recorded like a grid cell.

``gradeff_model``, ``gradeff_data`` and ``gradeff_optimizer`` are parametrized by registry keys, the
pytest way (indirect parametrization); ``gradeff_meters`` opens the RAM, GPU and energy meters around
your own training and, when the block ends, appends a record with the grid cells' schema to the
results file, so it is in the session's summary, the report and the gate::

    @pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
    @pytest.mark.parametrize("gradeff_optimizer", ["adam"], indirect=True)
    def test_my_step(gradeff_model, gradeff_data, gradeff_optimizer, gradeff_meters):
        with gradeff_meters as meters:
            for epoch in range(gradeff_data.epochs):
                with meters.epoch() as log:
                    for batch in gradeff_data.batches(epoch):
                        loss = gradeff_model(**batch).loss
                        loss.backward()
                        gradeff_optimizer.step()
                        gradeff_optimizer.zero_grad()
                        log.step(loss.item(), samples=len(batch["labels"]))
        assert gradeff_meters.record.status == "ok"

That is a complete record: around the epochs, outside their clocks and meters, the test split is evaluated as a
grid cell's is (before training, where time to target starts, and after each epoch), and after the last epoch one
standard step is measured under the memory meters, unless the benchmark reports its own (``log.evaluated``,
``meters.measure_step``).

A benchmark's record is a cell of the ``custom`` grid whose strategy is the test's name (``my_step``
for ``test_my_step``): id ``llm-adam-my_step``, a column of its own beside the memory strategies.
Unparametrized, the optimizer is AdamW, the method ``full`` and the data the model's own task;
``gradeff_method`` (a method key, ``indirect=True``) fine-tunes with LoRA, BitFit, ... as a grid cell does
(``llm-adam-my_step-lora``), and a method the model cannot take skips the benchmark with the reason, recorded.
Datasets are built once per session (per task, sizes and seed); the model and optimizer are fresh for every test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.cell import stop
from gradeff.pytest.fixture_setup import CUSTOM_GRID, FixtureSetup, bench_id, bench_name, cell_setup
from gradeff.pytest.options import SETTINGS, run_config
from gradeff.records.results import EpochRecord, Summary
from gradeff.specs.registry import UnknownKeyError
from gradeff.studies.grid import Cell, incompatibility

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

# The modules gradeff.pytest.plugin's pytest_plugins registers are imported inside functions: pytest marks each for
# assertion rewriting as it registers it, and warns about one imported before (noqa: PLC0415 - registered plugin).

__all__ = ["BenchData", "BenchMeters", "EpochLog", "gradeff_data", "gradeff_meters", "gradeff_method",
           "gradeff_model", "gradeff_optimizer"]


def _param(request: pytest.FixtureRequest, name: str, default: str | None = None) -> str | None:
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and name in callspec.params:
        return callspec.params[name]
    return default


@pytest.fixture
def gradeff_method(request: pytest.FixtureRequest) -> str:
    """The fine-tuning method of the benchmark's model (``indirect`` parameter: a method key such as ``lora`` or
    ``bitfit``; default ``full``), applied as a grid cell applies it: ``gradeff_model`` is the adapted model and
    ``gradeff_optimizer`` trains its trainable parameters at the method's learning-rate scale. Recorded as the
    record's ``method``, and in its id where it is not ``full`` (``llm-adam-my_step-lora``). In a grid test, the
    cell's method. Every public fixture depends on it, so it need not be among the test's arguments.
    """
    cell = _param(request, "cell")
    if isinstance(cell, Cell):
        return cell.method
    try:
        return METHODS[getattr(request, "param", "full")].key
    except UnknownKeyError as exc:
        message = f"{request.node.nodeid}: gradeff_method: {exc}"
    pytest.fail(message, pytrace=False)  # outside the handler: the usage error alone, no chained KeyError


@pytest.fixture
def _gradeff_setup(request: pytest.FixtureRequest, gradeff_seed: int, gradeff_method: str) -> FixtureSetup:
    cell = _param(request, "cell")
    if isinstance(cell, Cell):
        # A grid test: the fixtures are its cell's, built as the runner trains them.
        return cell_setup(request.config, cell, gradeff_seed)
    settings = request.config.stash[SETTINGS]
    model = _param(request, "gradeff_model")
    if model is None:
        pytest.fail("gradeff_model needs a model key: @pytest.mark.parametrize('gradeff_model', ['llm'], "
                    f"indirect=True); models: {', '.join(MODELS)}", pytrace=False)
    try:
        spec = MODELS[model]
        optimizer = OPTIMIZERS[_param(request, "gradeff_optimizer", "adamw")].key
        dataset = TASKS[_param(request, "gradeff_data", spec.task)].key
    except UnknownKeyError as exc:
        pytest.fail(f"{request.node.nodeid}: {exc}", pytrace=False)
    bench = bench_name(request.node.originalname)
    # Built as the main study's cell of these keys with the standard strategy: the user's loop is the strategy.
    cell = Cell(model, optimizer, "standard", method=gradeff_method, dataset=dataset)
    setup = FixtureSetup.of(cell, run_config(request.config, gradeff_seed), settings, bench=bench,
                      pytest_config=request.config)
    reason = incompatibility(cell)
    if reason is not None:
        # As a grid cell is: skipped with its reason before anything is built, and recorded so.
        BenchMeters(setup).skipped(reason)
        pytest.skip(reason)
    return setup


@dataclass(frozen=True, kw_only=True)
class BenchData:
    """A task's data at the session's profile: training batches in the grid's order, the held-out split.

    Attributes:
        dataset: the training split (``heldout``: the held-out split, or ``None``).
        batch_size: the model's micro-batch size at this profile.
        epochs: epochs at this profile (or ``--gradeff-epochs``).
    """

    dataset: Any
    batch_size: int
    epochs: int
    seed: int
    device: Any
    kind: str = ""

    @property
    def heldout(self):
        return self.dataset.heldout

    def __len__(self) -> int:
        return len(self.dataset)

    def batches(self, epoch: int) -> Iterator[dict]:
        """The epoch's batches, as model inputs on the device (the order the grid's cells see): a dict of the
        task kind's :data:`gradeff.axes.data.BATCH_KEYS`, for ``model(**batch)``."""
        from gradeff.axes.data.dataset import epoch_order  # noqa: PLC0415 - torch, see the imports

        yield from self._moved(self.dataset, epoch_order(len(self.dataset), self.seed, epoch))

    def heldout_batches(self) -> Iterator[dict]:
        """The test split's batches in order, as model inputs on the device (none without a test split)."""
        import torch

        if self.heldout is not None:
            yield from self._moved(self.heldout, torch.arange(len(self.heldout)))

    def _moved(self, dataset, order) -> Iterator[dict]:
        from gradeff.cell.loop import move_batch  # noqa: PLC0415 - torch, see the imports

        for indices in order.split(self.batch_size):
            yield move_batch(dataset.batch(indices), self.device)

    def evaluate(self, model):
        """``model`` on the test split as a grid cell evaluates it (no gradients, evaluation mode, then back):
        a :class:`gradeff.cell.evaluation.Evaluation` with the mean loss per target, the accuracy where the task
        scores one, the samples and the seconds; ``None`` without a test split."""
        from gradeff.cell.evaluation import EVAL_BATCHES, evaluate, scoring  # noqa: PLC0415 - torch, see the imports

        if self.heldout is None:
            return None
        return evaluate(model, self.heldout, batch_size=EVAL_BATCHES * self.batch_size, device=self.device,
                        accuracy=scoring(self.kind, self.dataset.info))


@pytest.fixture
def gradeff_data(_gradeff_setup: FixtureSetup) -> BenchData:
    """The data of the benchmark's task (``indirect`` parameter: a dataset key; default: the model's own task).

    Built once per session for each task, sizes and seed, and shared with the grid's cells. In a grid test, the
    cell's data (``None`` where the runner builds its own: see ``gradeff_model``).
    """
    setup = _gradeff_setup
    if setup.grid:
        state = setup.train_state()
        if state is None:
            return None
        dataset = state.dataset
    else:
        dataset = setup.data()
    return BenchData(dataset=dataset, batch_size=setup.hp.batch_size, epochs=setup.hp.epochs,
                     seed=setup.config.seed, device=setup.device, kind=TASKS[setup.cell.dataset].kind)


@pytest.fixture
def gradeff_model(_gradeff_setup: FixtureSetup):
    """A fresh model of the registry key it is parametrized with (``indirect=True``), on the session's device.

    Built as a grid cell builds it: the same seed, the profile's size, the task's classes, and the same
    starting weights (random, the suite's pretraining, or ``--gradeff-weights`` / ``--gradeff-model-path``).

    In a grid test (one parametrized with ``cell``) it is the cell's model, the very object ``gradeff_cell``
    then trains, with its strategy and method. ``None`` where the runner builds its own: a skipped or
    already recorded cell (nothing is built), ``--gradeff-tune`` (a fresh model per trial), ``--gradeff-isolate``
    (built in the cell's own process), a sharded strategy (built in each rank's process), or a build that
    failed (the cell's record says how).
    """
    state = _gradeff_setup.train_state()
    return state.model if state is not None else None


@pytest.fixture
def gradeff_optimizer(_gradeff_setup: FixtureSetup, gradeff_model):
    """The optimizer of the key it is parametrized with (default AdamW) over the model's trainable parameters,
    at the model's learning rate, as a grid cell builds it; in a grid test the cell's (see ``gradeff_model``)."""
    state = _gradeff_setup.train_state()
    return state.optimizer if state is not None else None


@dataclass(kw_only=True)
class EpochLog:
    """What one epoch of a benchmark did: ``step()`` once per optimizer step."""

    loss_sum: float = 0.0
    optimizer_steps: int = 0
    closure_calls: int = 0
    samples: int = 0
    targets: int = 0
    heldout: dict = field(default_factory=dict)

    def step(self, loss: float, *, samples: int, targets: int | None = None, closure_calls: int = 1) -> None:
        """One optimizer step: its mean loss per target over ``samples`` samples (``targets``: default one each)."""
        targets = samples if targets is None else targets
        self.loss_sum += float(loss) * targets
        self.optimizer_steps += 1
        self.closure_calls += closure_calls
        self.samples += samples
        self.targets += targets

    def evaluated(self, *, loss: float, accuracy: float | None = None, seconds: float | None = None) -> None:
        """The held-out result after this epoch, if the benchmark evaluates."""
        self.heldout = {"heldout_loss": float(loss), "heldout_accuracy": accuracy, "eval_seconds": seconds}


class BenchMeters:
    """The meters of a benchmark: ``with gradeff_meters as meters:`` around the training, ``meters.epoch()`` per epoch.

    When the ``with`` block ends, ``record`` is the benchmark's record (also appended to the results
    file); ``epochs_meters`` are each epoch's frozen meter records as dicts, ``meters`` the cell's aggregate,
    as a grid cell records them. A block that raises is recorded as ``error`` (``interrupted`` on Ctrl-C),
    and the exception goes on.

    In a grid test the runner records the cell's epochs with these meters: after ``gradeff_cell(cell)``,
    ``record`` is the cell's record and ``epochs_meters`` its epochs' meter records.
    """

    def __init__(self, setup: FixtureSetup):
        self._setup = setup
        self._metering = None
        self._epochs: list = []
        self._started = 0.0
        self._untrained = None
        self.record = None
        self.meters: dict = {}
        self.memory: dict = {}

    @property
    def epochs_meters(self) -> list[dict]:
        return list(self._metering.epochs) if self._metering is not None else []

    def _new_metering(self):
        from gradeff.cell.metering import EpochMetering  # noqa: PLC0415 - torch, see the imports

        self._metering = EpochMetering(self._setup.device, self._setup.config.meters)
        return self._metering

    def _recorded(self, record) -> None:
        """A grid cell's record, from the runner that recorded its epochs with these meters."""
        self.record, self.meters = record, record.meters
        self.memory = record.meters.get("memory", {})

    def __enter__(self) -> BenchMeters:
        self._new_metering()
        self._started = time.time()
        # The untrained model's test evaluation, before the meters open: where time to target starts.
        self._untrained = self._evaluate()
        self._metering.__enter__()
        return self

    def _evaluate(self):
        """The test split's evaluation of ``gradeff_model`` as a grid cell's (``None`` where the benchmark trains
        no ``gradeff_model`` or its data has no test split)."""
        setup = self._setup
        if setup.grid or setup.state is None or setup.dataset is None:
            return None
        data = BenchData(dataset=setup.dataset, batch_size=setup.hp.batch_size, epochs=setup.hp.epochs,
                         seed=setup.config.seed, device=setup.device, kind=TASKS[setup.cell.dataset].kind)
        return data.evaluate(setup.state.model)

    @contextmanager
    def epoch(self, *, evaluate: bool = True) -> Iterator[EpochLog]:
        """One epoch, timed and metered as one segment; ``step()`` the log once per optimizer step.

        After the segment, outside its clock and meters, the test split is evaluated as a grid cell's is, unless
        the epoch reported its own (``log.evaluated``) or ``evaluate=False``: the record's test quality and time to
        target (at the epochs' ends) come from these evaluations.
        """
        from gradeff.cell.loop import sync  # noqa: PLC0415 - torch, see the imports

        log = EpochLog()
        started = time.perf_counter()
        with self._metering.segment():
            yield log
            sync(self._setup.device)
        self._epochs.append((log, time.perf_counter() - started))
        if evaluate and not log.heldout:
            found = self._evaluate()
            if found is not None:
                log.evaluated(loss=found.loss, accuracy=found.accuracy, seconds=found.seconds)

    def measure_step(self, step) -> dict:
        """Parameter, gradient, optimizer-state and activation bytes of one call of ``step`` (a training step),
        recorded under ``meters.memory`` as the grid's cells record theirs."""
        self.memory = self._breakdown(step, "the benchmark's own")
        return self.memory

    def _breakdown(self, step, which: str) -> dict:
        from gradeff.cell.metering import memory_breakdown  # noqa: PLC0415 - torch, see the imports

        state = self._setup.train_state()
        # The record says which step was measured: the benchmark's own, or the standard one gradeff ran.
        return memory_breakdown(state.model, state.optimizer, step) | {"step": which}

    def _standard_step_memory(self) -> None:
        """Where the benchmark measured no step of its own, one standard step of ``gradeff_model`` and
        ``gradeff_optimizer`` after the epochs, under the memory meters, as a grid cell measures its own."""
        from gradeff.cell.loop import optimizer_step  # noqa: PLC0415 - torch, see the imports

        state = self._setup.state
        if self.memory or self._setup.grid or state is None or state.optimizer is None or not self._epochs:
            return
        self.memory = self._breakdown(lambda: optimizer_step(state, state.step_groups(0)[0]),
                                      "a standard step after the epochs")

    def __exit__(self, exc_type, exc, tb) -> None:
        self._metering.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self._standard_step_memory()
            status, detail = "ok", ""
        elif issubclass(exc_type, KeyboardInterrupt):
            status, detail = "interrupted", stop.interruption()
        else:
            status, detail = "error", f"{exc_type.__name__}: {exc}"
        self._finish(status, detail)

    def skipped(self, reason: str) -> None:
        """Record the benchmark as ``skipped`` with its reason, nothing built (a cell its model cannot run)."""
        self._started = time.time()
        self._finish("skipped", reason)

    def _finish(self, status: str, detail: str) -> None:
        from gradeff.pytest.session_records import keep  # noqa: PLC0415 - registered plugin, see the imports

        self.record = self._record(status, detail)
        keep(self._setup.pytest_config, self._setup.settings.results, self.record)

    def _compute(self, epochs) -> dict:
        """Model FLOPs, FLOP/s and MFU of the epochs, counted on the benchmark's model as a grid cell's are."""
        import torch

        # torch, see the imports
        from gradeff.cell.run import model_flops  # noqa: PLC0415
        from gradeff.meters.flops import compute_record  # noqa: PLC0415

        setup = self._setup
        if setup.state is None:
            return {"not_measured": "the benchmark used no gradeff_model"}
        try:
            flops = model_flops(setup.cell, setup.config, setup.state)
        except Exception as exc:  # noqa: BLE001 - an op the counter cannot follow costs the figure, never the record
            return {"not_measured": f"{type(exc).__name__}: {exc}"}
        device = setup.device
        return compute_record(flops, list(epochs), precision=setup.config.precision,
                              override_tflops=setup.config.meters.peak_tflops,
                              device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None)

    def _record(self, status: str, detail: str):
        # torch, see the imports
        from gradeff.cell.metering import aggregate  # noqa: PLC0415
        from gradeff.cell.record import cell_record, hparams_record  # noqa: PLC0415

        setup, config, cell = self._setup, self._setup.config, self._setup.cell
        epochs = tuple(
            EpochRecord(epoch=index, loss=log.loss_sum / log.targets if log.targets else float("nan"),
                        seconds=seconds, optimizer_steps=log.optimizer_steps, closure_calls=log.closure_calls,
                        samples=log.samples, targets=log.targets, meters=meters, **log.heldout)
            for index, ((log, seconds), meters) in enumerate(zip(self._epochs, self.epochs_meters)))
        self.meters = aggregate(self.epochs_meters, config.meters.grid_gco2_per_kwh)
        if self.memory:
            self.meters["memory"] = self.memory
        if epochs:
            self.meters["compute"] = self._compute(epochs)
        dataset = setup.data() if status != "skipped" else None
        heldout = dataset.heldout if dataset is not None else None
        finished = time.time()
        return cell_record(
            cell, config, device=str(setup.device), started=self._started, finished=finished, dataset=dataset,
            model=setup.state.model if setup.state is not None else None, weights=setup.weights,
            cell=bench_id(cell.model, cell.optimizer, setup.bench, cell.method, cell.dataset), grid=CUSTOM_GRID,
            strategy=setup.bench, status=status, detail=detail, epochs=epochs,
            summary=Summary.of(list(epochs), finished - self._started, untrained=self._untrained,
                               floor=heldout.loss_floor if heldout is not None else None),
            hparams=hparams_record(setup.plan.settings, config,
                                   setup.state.optimizer if setup.state is not None else None),
            meters=self.meters,
        )


@pytest.fixture
def gradeff_meters(_gradeff_setup: FixtureSetup) -> BenchMeters:
    """RAM, GPU and energy meters around a benchmark of your own; its record goes to the results file."""
    return BenchMeters(_gradeff_setup)
