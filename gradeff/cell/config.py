"""What a run of cells is configured with: the session-wide :class:`RunConfig` every cell of it shares, the timer that
runs its epochs, and the refusal of a cell over the memory budget.

Its own module, below everything else of :mod:`gradeff.cell`, because every stage of a cell reads it (plan, build,
train, record, the isolated and sharded runs) and none of them may import the runner that drives them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gradeff.cell.metering import MeterSettings
from gradeff.studies.hparams import MEMORY_MARGIN

__all__ = ["EpochTimer", "MemoryBudgetExceeded", "RunConfig"]

# Runs ``epoch_fn`` ``rounds`` times, and ``after_epoch`` after each round outside its timing
# (pytest-benchmark's pedantic mode with a teardown, or a plain loop).
EpochTimer = Callable[[Callable[[], object], int, Callable[[], object]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Session-wide settings of a run.

    Attributes:
        epochs: ``None`` uses the profile's epochs.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        memory_budget: bytes a training step must fit in: the target of the budget strategies (their
            profile's default when ``None``), and for the others a limit a cell is refused over.
        memory_margin: the fraction of the budget the budget strategies keep free.
        weights: model key → a local source to start from (a state-dict file or a folder, resolved and checked
            when the session started; see :mod:`gradeff.axes.models.weights`).
        cache_dir: where the suite's pretrained backbones and drawn data are cached (``None``: the default cache).
        tune: ``"lr"``: search each cell's learning rate (see :func:`run_cell`); ``None``: the protocol's rate.
        tune_points: how many rates the search tries.
        protocol: where a cell's rate comes from (:mod:`gradeff.cell.protocols`): ``tuned`` (the committed table) or
            ``shared`` (one rate per model, the papers' protocol).
        precision: ``fp32``, ``bf16`` or ``fp16`` (autocast mixed precision; see :mod:`gradeff.cell.precision`).
        lr: a learning rate that replaces the protocol's (what a tuning trial sets): the rate the optimizer gets.
        lr_source: where ``lr`` came from, for the record.
        trial: a tuning trial: the cell trains and evaluates its validation split only; the test split is never
            read, and nothing else is measured (no memory step, no inference cost).
        self_tuned: the reported run of a self-tuned cell (:mod:`gradeff.cell.self_tune`): ``lr`` is the rate its
            search chose, and its record's protocol says ``self-tuned``.
        train_samples: at most this many training samples an epoch (whole steps under every strategy): a search
            that bounds its budget (``scripts/tune_rates.py --train-samples``); ``None``: the profile's.
        isolate: train each cell in a fresh process of its own, so its RSS peak is its own.
        process: ``isolated`` in such a process, ``shared`` otherwise (recorded with the environment).
        data: local real datasets (``--gradeff-data KEY=PATH``) that replace or fill the tasks they name.
        world_size: how many processes a sharded strategy's cell trains across (``--gradeff-world-size``).
        rank: this process's rank inside a sharded cell (set by :mod:`gradeff.cell.distributed`); ``None`` elsewhere.
        threads: torch's intra-op threads while the cell is built and trained (``None``: the process's own).
        fused: the optimizer's fused (else multi-tensor) kernel where torch has one (``--gradeff-fused``; see
            :func:`gradeff.axes.optim.build_optimizer`).
        compile: train the model through torch.compile with this backend (``--gradeff-compile``); ``None``: eager.
        workers: DataLoader worker processes gathering the micro-batches ahead (``--gradeff-workers``; see
            :class:`gradeff.cell.loop.TrainState`).
        named_strategies: the strategies the session named (``--gradeff-strategies``): one a CPU leaves out
            (:attr:`~gradeff.axes.strategies.StrategySpec.cpu_limitation`) runs there when named.
    """

    profile: str = "tiny"
    seed: int = 0
    epochs: int | None = None
    device: str = "auto"
    session: str = ""
    meters: MeterSettings = MeterSettings()
    memory_budget: int | None = None
    memory_margin: float = MEMORY_MARGIN
    weights: tuple[tuple[str, str], ...] = ()
    cache_dir: str | None = None
    tune: str | None = None
    tune_points: int = 5
    protocol: str = "tuned"
    precision: str = "fp32"
    lr: float | None = None
    lr_source: str = ""
    trial: bool = False
    self_tuned: bool = False
    train_samples: int | None = None
    isolate: bool = False
    process: str = "shared"
    data: tuple = ()
    world_size: int = 2
    rank: int | None = None
    threads: int | None = None
    fused: bool = False
    compile: str | None = None
    workers: int = 0
    named_strategies: tuple[str, ...] = ()


class MemoryBudgetExceeded(RuntimeError):
    """A cell needs more memory than ``--gradeff-memory-budget`` allows: recorded as ``oom``."""


