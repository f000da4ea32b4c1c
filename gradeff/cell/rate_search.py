"""The search behind the tuned-rate table: each cell's rate on a log grid, over seeds, on the validation split.

``scripts/tune_rates.py`` is its command line. For each cell (each model × optimizer × method × dataset of a grid,
on the ``standard`` strategy and on each strategy that changes the effective batch, which has rates of its own:
:func:`gradeff.axes.strategies.rate_strategy`) every rate of a log grid around the optimizer's centre is trained once
per seed as a tuning trial (:attr:`gradeff.cell.config.RunConfig.trial`: the validation split is evaluated, the test
split is never read), scored by its final validation loss averaged over the seeds (a rate at which any seed
diverged or failed scores nothing), and the best rate kept. A best rate at the grid's edge widens the grid past
that edge (:func:`gradeff.cell.tuning.search`) until it is inside or the widening is spent; the row records what is
left at an edge. An optimizer whose spec says it has nothing to tune gets a row that says so, without trials.
"""

from __future__ import annotations

import datetime as _dt
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

import torch

from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import rate_strategy
from gradeff.cell.config import RunConfig
from gradeff.cell.environment import code_version
from gradeff.cell.protocols import TunedRate
from gradeff.cell.run import run_cell
from gradeff.cell.tuning import log_grid, search
from gradeff.studies.grid import Cell, incompatibility
from gradeff.studies.hparams import hparams_for, lr_centre, method_hparams_for

__all__ = ["SearchSettings", "search_cell", "search_cells", "tunable_cells"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSettings:
    """What a search costs and where it looks.

    Attributes:
        profile: the profile searched (the table's rows are per profile).
        seeds: every rate is trained once per seed; its score is the mean.
        points / spread: the first grid: ``points`` rates over ``spread`` decades around the optimizer's centre
            (``OptimizerSpec.lr_centre``).
        widen: at most this many rates added beyond the grid's edges (one at a time, past the edge the best sits on).
        epochs: epochs per trial (``None``: the profile's).
        train_samples: training samples per epoch of a trial, at most (``None``: the profile's): with ``epochs``,
            what bounds a search at a profile whose cells cost minutes.
        cache_dir: the pretrained-backbone cache the trials read.
    """

    profile: str
    seeds: tuple[int, ...] = (0, 1)
    points: int = 5
    spread: float = 2.0
    widen: int = 4
    epochs: int | None = None
    train_samples: int | None = None
    cache_dir: str | None = None

    def __post_init__(self):
        if len(self.seeds) < 1 or self.points < 1 or self.widen < 0:
            raise ValueError("a search needs at least one seed and one rate, and widen >= 0")


def tunable_cells(cells: Iterable[Cell]) -> list[Cell]:
    """One cell per model × optimizer × method × dataset × rate strategy (:func:`gradeff.axes.strategies.rate_strategy`:
    ``standard`` stands for every strategy that trains the same steps, accumulation for itself), that can run; the
    cell searched has the rate strategy itself as its strategy."""
    found: dict[tuple, Cell] = {}
    for cell in cells:
        own = rate_strategy(cell.strategy)
        key = (cell.model, cell.optimizer, cell.method, cell.dataset, own)
        if key not in found and incompatibility(cell) is None:
            found[key] = replace(cell, strategy=own)
    return list(found.values())


def _trial_loss(cell: Cell, settings: SearchSettings, lr: float, seed: int) -> float | None:
    record = run_cell(cell, RunConfig(profile=settings.profile, seed=seed, epochs=settings.epochs, device="cpu",
                                      cache_dir=settings.cache_dir, lr=lr, trial=True,
                                      train_samples=settings.train_samples,
                                      lr_source="a tuning trial's rate (scripts/tune_rates.py)"))
    return record.summary.final_validation_loss if record.status == "ok" else None


def search_cell(cell: Cell, settings: SearchSettings, search_id: str,
                trial: Callable[[Cell, SearchSettings, float, int], float | None] = _trial_loss) -> TunedRate:
    """Search one cell's rate (see the module); ``trial(cell, settings, lr, seed)`` → final validation loss."""
    hp = hparams_for(cell.model, settings.profile, dataset=cell.dataset)
    shared = hp.lr * method_hparams_for(cell.method, cell.model, settings.profile).lr_scale
    base = dict(profile=settings.profile, model=cell.model, optimizer=cell.optimizer, method=cell.method,
                dataset=cell.dataset, search=search_id, strategy=rate_strategy(cell.strategy))
    free = OPTIMIZERS[cell.optimizer].tuning_free
    if free:
        return TunedRate(**base, lr=shared, tuning_free=free)

    def score(lr: float) -> float | None:
        losses = [trial(cell, settings, lr, seed) for seed in settings.seeds]
        return None if any(loss is None or loss != loss for loss in losses) else sum(losses) / len(losses)

    found = search(score, log_grid(lr_centre(cell.optimizer, shared), settings.points, settings.spread),
                   widen=settings.widen)
    if found.chosen is None:
        raise RuntimeError(f"{cell.id}: no rate of {[t.lr for t in found.trials]} ended ok for every seed")
    return TunedRate(**base, lr=found.chosen, grid=tuple(t.lr for t in found.trials),
                     scores=tuple(t.score for t in found.trials), seeds=settings.seeds, at_edge=found.at_edge)


def _worker(cell: Cell, settings: SearchSettings, search_id: str) -> tuple[TunedRate, float]:
    # One core per worker, as the grid's pytest-xdist workers do.
    torch.set_num_threads(1)
    started = time.process_time()
    row = search_cell(cell, settings, search_id)
    return row, time.process_time() - started


def search_cells(cells: Sequence[Cell], settings: SearchSettings, *, workers: int = 2,
                 command: str = "") -> tuple[list[TunedRate], str, dict]:
    """Search every cell (in ``workers`` processes); returns the rows, the search's key and its provenance."""
    now = _dt.datetime.now(_dt.UTC)
    search_id = f"{settings.profile}-{now:%Y%m%dT%H%M%SZ}"
    started = time.perf_counter()
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_worker, cells, [settings] * len(cells), [search_id] * len(cells)))
    else:
        results = [_worker(cell, settings, search_id) for cell in cells]
    rows = [row for row, _ in results]
    trials = sum(len(row.grid) * len(row.seeds) for row in rows)
    provenance = {
        "command": command, "date": now.strftime("%Y-%m-%d %H:%M UTC"), "code_version": code_version(),
        "profile": settings.profile, "seeds": list(settings.seeds), "points": settings.points,
        "spread_decades": settings.spread, "widen": settings.widen,
        "epochs": settings.epochs if settings.epochs is not None else "the profile's",
        "train_samples": settings.train_samples if settings.train_samples is not None else "the profile's",
        "scored_on": "final validation loss, mean over the seeds (the test split is never read)",
        "budget": {"cells": len(rows), "trials": trials, "cpu_seconds": round(sum(cpu for _, cpu in results), 1),
                   "wall_seconds": round(time.perf_counter() - started, 1), "workers": workers,
                   "cpus": os.cpu_count()},
    }
    return rows, search_id, provenance
