"""How a cell runs besides one training in this process: in a fresh process of its own (``--gradeff-isolate``), or as
a learning-rate search whose chosen rate is then trained and reported (``--gradeff-tune lr``). A sharded cell's ranks
are :mod:`gradeff.cell.distributed`'s.

:func:`gradeff.cell.run.run_plan` dispatches each planned cell once and hands these the training they repeat (its own
one-training function, its process entry), so this module never imports the runner back.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from gradeff.axes.optim import OPTIMIZERS
from gradeff.cell.tuning import search
from gradeff.records.results import CellRecord, meter_field
from gradeff.studies.hparams import lr_centre, lr_grid

if TYPE_CHECKING:
    from gradeff.cell.config import RunConfig
    from gradeff.cell.plan import CellPlan
    from gradeff.studies.grid import Cell

__all__ = ["run_isolated", "run_tuned"]


def run_isolated(plan: CellPlan, entry: Callable[[Cell, RunConfig, bytes], str]) -> CellRecord:
    """The cell in a fresh, spawned process: nothing of earlier cells in its address space, so the process's
    RSS high-water mark is the cell's own. Costs the process's start (importing torch: seconds). Its epochs are
    timed by the loop in that process; Ctrl-C reaches it too and it records ``interrupted`` as usual. That process
    plans the cell itself, under its own configuration (not isolated again, its thread count set).

    Args:
        entry: a module-level function (the spawned process imports it by name) that runs the cell and returns
            its record as a JSON line, the form every reader already trusts; it gets the session's registered
            entries to register there first.
    """
    # pytest (studies.extend): a spawned process imports this
    from gradeff.studies.extend import dump_registered  # noqa: PLC0415

    cell, config = plan.cell, plan.config
    # A spawned process starts with torch's default thread count; it trains on the caller's, as the cell would here.
    threads = config.threads if config.threads is not None else torch.get_num_threads()
    child = replace(config, isolate=False, process="isolated", threads=threads)
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        # The session's own entries (a conftest's, an entry point's, a model path) are registered there too.
        line = pool.submit(entry, cell, child, dump_registered()).result()
    return CellRecord.from_dict(json.loads(line))


def run_tuned(plan: CellPlan, *, train: Callable[..., CellRecord], warm: Callable[[CellPlan], None],
              **reported) -> CellRecord:
    """Search the cell's rate on its validation split, then train it once at the best rate and report that run.

    The trials never read the test split (:attr:`gradeff.cell.config.RunConfig.trial`); the reported run is a fresh
    training at the chosen rate. An optimizer with nothing to tune is trained once at the protocol's rate, and its
    record says why.

    Args:
        train: one training of a planned cell, ``train(plan, **reported) -> CellRecord``.
        warm: an untimed build and step before the first trial.
        reported: what only the reported run is trained with (its epoch timer, its meters).
    """
    cell, hp, rate = plan.cell, plan.hp, plan.rate
    reference = hp.lr * plan.method_hp.lr_scale
    free = OPTIMIZERS[cell.optimizer].tuning_free
    if free:
        record = train(plan, **reported)
        return replace(record, tuning={"param": None, "tuning_free": free, "trials": [], "seconds": 0.0,
                                       "joules": 0.0})
    # One untimed build and step first: the first trial of a session would otherwise carry the process's
    # one-off costs (imports, lazy kernels, the dataset's build) into the search's seconds.
    warm(plan.under(lr=reference, trial=True))
    started = time.perf_counter()
    trials = []
    interrupted: list[CellRecord] = []

    def score(lr: float) -> float | None:
        trial = train(plan.under(lr=lr, trial=True, lr_source="a tuning trial's rate"))
        if trial.status == "interrupted":
            interrupted.append(trial)
            raise KeyboardInterrupt
        trials.append({"lr": lr, "status": trial.status, "validation_loss": trial.summary.final_validation_loss,
                       "final_loss": trial.summary.final_loss, "seconds": trial.finished_at - trial.started_at,
                       "joules": meter_field(trial, "energy", "joules")})
        return trial.summary.final_validation_loss if trial.status == "ok" else None

    try:
        found = search(score, {*lr_grid(lr_centre(cell.optimizer, reference), plan.config.tune_points), reference})
    except KeyboardInterrupt:
        return interrupted[0]  # Ctrl-C in a trial: recorded as the cell's, and the session stops
    seconds = time.perf_counter() - started
    chosen = found.chosen if found.chosen is not None else reference
    record = train(plan.under(lr=chosen, lr_source=(
        "live search (--gradeff-tune lr): best final validation loss" if found.chosen is not None
        else f"no trial ended ok: the protocol's rate ({rate.source})")), **reported)
    joules = [t["joules"] for t in trials]
    tuning = {"param": "lr", "chosen": chosen, "reference": reference, "reference_source": rate.source,
              "trials": sorted(trials, key=lambda t: t["lr"]), "at_edge": found.at_edge,
              "picked_on": "final validation loss" if found.chosen is not None else "nothing ended ok",
              "budget": {"trials": len(trials), "epochs": hp.epochs, "seeds": [plan.config.seed]},
              "seconds": seconds, "joules": None if any(j is None for j in joules) else sum(joules)}
    return replace(record, tuning=tuning)
