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

A benchmark's record is a cell of the ``custom`` grid whose strategy is the test's name (``my_step``
for ``test_my_step``): id ``llm-adam-my_step``, a column of its own beside the memory strategies.
Unparametrized, the optimizer is AdamW and the data is the model's own task. Datasets are built once
per session (per task, sizes and seed); the model and optimizer are fresh for every test.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

__all__ = ["BenchData", "BenchMeters", "EpochLog", "gradeff_data", "gradeff_meters", "gradeff_model",
           "gradeff_optimizer"]

CUSTOM_GRID = "custom"


def _param(request: pytest.FixtureRequest, name: str, default: str | None = None) -> str | None:
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and name in callspec.params:
        return callspec.params[name]
    return default


def _bench_name(test_name: str) -> str:
    """A benchmark's strategy key: its test's name without ``test_`` (``test_my_step`` → ``my_step``)."""
    return re.sub(r"[^a-z0-9_]", "_", test_name.lower().removeprefix("test_")) or "bench"


def bench_cell_id(item) -> str | None:
    """The cell id a collected test of the public fixtures records (``llm-adam-my_step``), or ``None``.

    Known at collection, so the gate counts a benchmark among the cells a session selected.
    """
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    if "gradeff_meters" not in getattr(item, "fixturenames", ()) or params.get("gradeff_model") is None:
        return None
    return f"{params['gradeff_model']}-{params.get('gradeff_optimizer', 'adamw')}-{_bench_name(item.originalname)}"


@dataclass(kw_only=True)
class _Setup:
    """One benchmark's cell, settings and sizes, shared by the public fixtures of a test.

    Data, model and optimizer are built by the runner's own functions (``_cell_data``, ``prepare_state``),
    as a grid cell's are: one path from the registries to the tensors.
    """

    cell: Any
    config: Any
    hp: Any
    device: Any
    settings: Any
    bench: str
    weights: Any = None
    state: Any = None
    dataset: Any = None

    def data(self):
        if self.dataset is None:
            from gradeff.runner import _cell_data

            # Real data sets its own sizes (rows, classes): the hyper-parameters follow, as in a cell.
            self.dataset, self.hp = _cell_data(self.cell, self.config, self.hp)
        return self.dataset

    def train_state(self):
        if self.state is None:
            from gradeff.pretrain import starting_weights
            from gradeff.runner import prepare_state

            self.data()
            self.weights = starting_weights(self.cell.model, self.config.profile, self.config.seed,
                                            local=dict(self.config.weights), cache_dir=self.config.cache_dir,
                                            device=str(self.device))
            self.state = prepare_state(self.cell, self.config, self.hp, self.device, weights=self.weights)
        return self.state


@pytest.fixture
def _gradeff_setup(request: pytest.FixtureRequest, gradeff_seed: int) -> _Setup:
    from gradeff.data import TASKS
    from gradeff.devices import resolve_device
    from gradeff.grid import Cell
    from gradeff.hparams import hparams_for
    from gradeff.models import MODELS
    from gradeff.optim import OPTIMIZERS
    from gradeff.pytest_plugin import _CONFIG, run_config
    from gradeff.registry import UnknownKeyError

    settings = request.config.stash[_CONFIG]
    model = _param(request, "gradeff_model")
    if model is None:
        pytest.fail("gradeff_model needs a model key: @pytest.mark.parametrize('gradeff_model', ['llm'], "
                    f"indirect=True); models: {', '.join(MODELS)}", pytrace=False)
    try:
        spec = MODELS[model]
        optimizer = OPTIMIZERS[_param(request, "gradeff_optimizer", "adamw")].key
        dataset = TASKS[_param(request, "gradeff_data", spec.task)].key
    except UnknownKeyError as exc:
        pytest.fail(str(exc), pytrace=False)
    bench = _bench_name(request.node.originalname)
    # Built as the main study's cell of these keys with the standard strategy: the user's loop is the strategy.
    cell = Cell(model, optimizer, "standard", dataset=dataset)
    return _Setup(cell=cell, config=run_config(request.config, gradeff_seed),
                  hp=hparams_for(model, settings.profile, epochs=settings.epochs, dataset=dataset),
                  device=resolve_device(settings.device), settings=settings, bench=bench)


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

    @property
    def heldout(self):
        return self.dataset.heldout

    def __len__(self) -> int:
        return len(self.dataset)

    def batches(self, epoch: int) -> Iterator[dict]:
        """The epoch's batches, as model inputs on the device (the order the grid's cells see)."""
        from gradeff.data.dataset import epoch_order
        from gradeff.loop import move_batch

        for indices in epoch_order(len(self.dataset), self.seed, epoch).split(self.batch_size):
            yield move_batch(self.dataset.batch(indices), self.device)


@pytest.fixture
def gradeff_data(_gradeff_setup: _Setup) -> BenchData:
    """The data of the benchmark's task (``indirect`` parameter: a dataset key; default: the model's own task).

    Built once per session for each task, sizes and seed, and shared with the grid's cells.
    """
    setup = _gradeff_setup
    dataset = setup.data()
    return BenchData(dataset=dataset, batch_size=setup.hp.batch_size, epochs=setup.hp.epochs,
                     seed=setup.config.seed, device=setup.device)


@pytest.fixture
def gradeff_model(_gradeff_setup: _Setup):
    """A fresh model of the registry key it is parametrized with (``indirect=True``), on the session's device.

    Built as a grid cell builds it: the same seed, the profile's size, the task's classes, and the same
    starting weights (random, the suite's pretraining, or ``--gradeff-weights`` / ``--gradeff-model-path``).
    """
    return _gradeff_setup.train_state().model


@pytest.fixture
def gradeff_optimizer(_gradeff_setup: _Setup, gradeff_model):
    """The optimizer of the key it is parametrized with (default AdamW) over the model's trainable parameters,
    at the model's learning rate, as a grid cell builds it."""
    return _gradeff_setup.train_state().optimizer


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
    """

    def __init__(self, setup: _Setup):
        self._setup = setup
        self._metering = None
        self._epochs: list = []
        self._started = 0.0
        self.record = None
        self.meters: dict = {}
        self.memory: dict = {}

    @property
    def epochs_meters(self) -> list[dict]:
        return list(self._metering.epochs) if self._metering is not None else []

    def __enter__(self) -> BenchMeters:
        from gradeff.metering import EpochMetering

        self._metering = EpochMetering(self._setup.device, self._setup.config.meters)
        self._started = time.time()
        self._metering.__enter__()
        return self

    @contextmanager
    def epoch(self) -> Iterator[EpochLog]:
        """One epoch, timed and metered as one segment; ``step()`` the log once per optimizer step."""
        from gradeff.loop import sync

        log = EpochLog()
        started = time.perf_counter()
        with self._metering.segment():
            yield log
            sync(self._setup.device)
        self._epochs.append((log, time.perf_counter() - started))

    def measure_step(self, step) -> dict:
        """Parameter, gradient, optimizer-state and activation bytes of one call of ``step`` (a training step),
        recorded under ``meters.memory`` as the grid's cells record theirs."""
        from gradeff.metering import memory_breakdown

        state = self._setup.train_state()
        self.memory = memory_breakdown(state.model, state.optimizer, step)
        return self.memory

    def __exit__(self, exc_type, exc, tb) -> None:
        self._metering.__exit__(exc_type, exc, tb)
        if exc_type is None:
            status, detail = "ok", ""
        elif issubclass(exc_type, KeyboardInterrupt):
            status, detail = "interrupted", "interrupted by the user (Ctrl-C)"
        else:
            status, detail = "error", f"{exc_type.__name__}: {exc}"
        self.record = self._record(status, detail)
        from gradeff.results import append_record

        append_record(self._setup.settings.results, self.record)

    def _record(self, status: str, detail: str):
        from gradeff.environment import code_version, environment
        from gradeff.hparams import method_hparams_for
        from gradeff.metering import aggregate
        from gradeff.meters import parameter_counts
        from gradeff.results import CellRecord, EpochRecord, Summary
        from gradeff.runner import _task_record

        setup, config, cell = self._setup, self._setup.config, self._setup.cell
        epochs = tuple(
            EpochRecord(epoch=index, loss=log.loss_sum / log.targets if log.targets else float("nan"),
                        seconds=seconds, optimizer_steps=log.optimizer_steps, closure_calls=log.closure_calls,
                        samples=log.samples, targets=log.targets, meters=meters, **log.heldout)
            for index, ((log, seconds), meters) in enumerate(zip(self._epochs, self._metering.epochs)))
        self.meters = aggregate(self._metering.epochs, config.meters.grid_gco2_per_kwh)
        if self.memory:
            self.meters["memory"] = self.memory
        dataset = setup.data()
        heldout = dataset.heldout
        finished = time.time()
        model = setup.state.model if setup.state is not None else None
        return CellRecord(
            cell=f"{cell.model}-{cell.optimizer}-{setup.bench}", grid=CUSTOM_GRID, model=cell.model,
            optimizer=cell.optimizer, strategy=setup.bench, method=cell.method, dataset=cell.dataset,
            profile=config.profile, seed=config.seed, device=str(setup.device), status=status, detail=detail,
            epochs=epochs, summary=Summary.of(list(epochs), finished - self._started, untrained=None,
                                              floor=heldout.loss_floor if heldout is not None else None),
            loss_floor=dataset.loss_floor, task=_task_record(cell, dataset),
            parameters=parameter_counts(model) if model is not None else {},
            weights=setup.weights.to_record() if setup.weights is not None else {},
            hparams=asdict(setup.hp) | {"method": asdict(method_hparams_for(cell.method, cell.model, config.profile))},
            environment=environment(str(setup.device)) | {"process": config.process}, meters=self.meters,
            session=config.session, code_version=code_version(), started_at=self._started, finished_at=finished,
        )


@pytest.fixture
def gradeff_meters(_gradeff_setup: _Setup) -> BenchMeters:
    """RAM, GPU and energy meters around a benchmark of your own; its record goes to the results file."""
    return BenchMeters(_gradeff_setup)
