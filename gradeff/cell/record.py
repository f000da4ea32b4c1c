"""The one builder of a cell's record: what every :class:`~gradeff.records.results.CellRecord` carries besides its
results.

Whoever trained the cell (the runner, the public fixtures, a sharded run's coordinator) passes what it measured; the
fields every record shares (the cell's axes, profile, seed and device; the data it trained on; its parameter counts
and where its weights came from; the machine, session and code version; the experiment's fingerprint) are filled
here, one way for all of them.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from gradeff.axes.data import TASKS
from gradeff.axes.data.trivial_cache import cached_trivial_baselines
from gradeff.axes.optim import optimizer_kernel
from gradeff.cell.environment import code_version, environment
from gradeff.cell.experiment import experiment
from gradeff.cell.inference import deployed_parameter_counts
from gradeff.cell.pretrain import cache_root
from gradeff.cell.protocols import SELF_TUNED
from gradeff.records.results import CellRecord

if TYPE_CHECKING:
    import torch

    from gradeff.axes.data import Dataset
    from gradeff.cell.config import RunConfig
    from gradeff.cell.plan import CellSettings
    from gradeff.cell.pretrain import StartingWeights
    from gradeff.studies.grid import Cell

__all__ = ["cell_record", "hparams_record", "task_record"]


def hparams_record(settings: CellSettings, config: RunConfig, optimizer: torch.optim.Optimizer | None) -> dict:
    """A record's ``hparams``: the sizes the cell ran with, its method's settings, its precision, the rate and
    where it came from (protocol and source), and the optimizer's kernel (``None`` where none was built).

    ``settings`` are those the cell's optimizer was built with (its plan's, :func:`gradeff.cell.plan.plan_cell`), so
    the rate a record names is the rate it trained at, whoever trained it.
    """
    hp, method_hp, rate = settings
    # A rate the cell searched itself is not the table's: the record never says ``tuned`` for it.
    protocol = SELF_TUNED if config.self_tuned else config.protocol
    return asdict(hp) | {"method": asdict(method_hp), "precision": config.precision, "protocol": protocol,
                         "lr_source": rate.source, "optimizer_kernel": optimizer_kernel(optimizer)}


def task_record(cell: Cell, dataset: Dataset, *, trivial_baselines: dict | None = None) -> dict:
    """The data a cell trained on, with the floors, Bayes accuracy and trivial baselines its numbers are read
    against (``trivial_baselines``: :func:`gradeff.axes.data.trivial_cache.cached_trivial_baselines` of its splits, or
    ``None`` where they are not known)."""
    heldout = dataset.heldout
    return {
        "key": cell.dataset, "name": TASKS[cell.dataset].name, "train_samples": len(dataset),
        "loss_floor": dataset.loss_floor, "heldout_samples": len(heldout) if heldout is not None else 0,
        "heldout_loss_floor": heldout.loss_floor if heldout is not None else None,
        "bayes_accuracy": heldout.info.get("bayes_accuracy") if heldout is not None else None,
        # The sanity baseline on the same split (gradeff.axes.data.sanity), a raw-pixel 1-NN classifier, read by the
        # Answer and the claims (gradeff.analysis.answer.sanity_accuracy).
        "sanity_accuracy": heldout.info.get("sanity_accuracy") if heldout is not None else None,
        # What no learning gives on the same test split (gradeff.axes.data.trivial): the Answer flags a model whose best
        # cell does not beat the strongest of them (gradeff.analysis.trivial).
        "trivial_baselines": trivial_baselines,
        "info": dataset.info,
    }


def _trivial_baselines(cell: Cell, config: RunConfig, dataset: Dataset) -> dict | None:
    """The task's trivial baselines on the cell's splits, computed once per machine for them; none for a tuning
    trial (its record is read for its validation loss alone, and the test split is not its to read)."""
    if config.trial:
        return None
    return cached_trivial_baselines(dataset, TASKS[cell.dataset].kind, root=cache_root(config.cache_dir))


def cell_record(cell: Cell, config: RunConfig, /, *, device: str, started: float, finished: float,
                dataset: Dataset | None = None, model: torch.nn.Module | None = None,
                weights: StartingWeights | None = None, process: str | None = None, **results: Any) -> CellRecord:
    """``cell``'s record: its axes under ``config`` (profile, seed, session, process) on ``device``, the
    ``dataset`` it trained on (its floor and task), the ``model`` as trained (its parameter counts), where its
    ``weights`` came from, and ``results``: the :class:`CellRecord` fields of what was measured (``status``,
    ``epochs``, ``summary``, ``meters``, ``hparams`` ...).

    Args:
        process: the process kind recorded with the environment; ``None``: ``config.process``.
        results: may also replace an axis field (a benchmark of the user's own names its cell and grid itself).
    """
    fields = dict(
        cell=cell.id, grid=cell.grid, model=cell.model, optimizer=cell.optimizer, strategy=cell.strategy,
        method=cell.method, dataset=cell.dataset, profile=config.profile, seed=config.seed, device=device,
        loss_floor=dataset.loss_floor if dataset is not None else None,
        task=task_record(cell, dataset, trivial_baselines=_trivial_baselines(cell, config, dataset))
        if dataset is not None else {},
        parameters=deployed_parameter_counts(model) if model is not None else {},
        weights=weights.to_record() if weights is not None else {},
        environment=environment(device) | {"process": process or config.process},
        # Every input that can change the record's numbers, hashed (what --gradeff-resume compares): the data's and
        # the weights' checksums as the cell knows them.
        experiment=experiment(cell, config, data_info=dataset.info if dataset is not None else None, weights=weights),
        session=config.session, code_version=code_version(), started_at=started, finished_at=finished,
    )
    return CellRecord(**fields | results)
