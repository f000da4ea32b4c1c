"""The self-tuning protocol: a cell the tuned table has no rate for searches its own, within a stated budget.

Under ``--gradeff-protocol tuned`` a cell reads its rate from the committed table
(:mod:`gradeff.cell.protocols`). A user's model, optimizer or dataset, the real-data grid and any data given with
``--gradeff-data`` have no row there (a row tuned on the built-in stand-in says nothing about the user's data), and
a shared rate under a ``tuned`` label would claim a tuning that was never done. Such a cell tunes itself, as
AlgoPerf's self-tuning ruleset has it: the search is part of the run and its cost is recorded beside it.

The search is successive halving over a log grid (Jamieson & Talwalkar 2016; Li et al. 2018, "Hyperband"): every
rate of the grid trains for a third of the cell's epochs (at least one), the best third (at least two) go on to
the full epochs, and the rate with the lowest final validation loss is kept; a best rate at the grid's edge widens
the grid past it by one point at a time, at the full epochs (:func:`gradeff.cell.tuning.search`). Every trial reads
the validation split only (:attr:`gradeff.cell.config.RunConfig.trial`); the reported run is a fresh training at
the chosen rate, so its test figures are read once.

The choice is cached by a fingerprint of everything it is a function of — the model's, optimizer's and method's
specs, the strategy's rate strategy, the profile's sizes, the precision, the content of the data's splits, the
search's own settings and torch's version — so the next session, and every other seed of a multi-seed run, trains
at it without searching again; its record says the choice was read from the cache and what the search cost then.
The cache file is JSON with its sha256 beside it (:mod:`gradeff.axes.data.checksums`); processes share it through a
lock, so two cells of one choice (a checkpointed and a standard cell) search once.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from filelock import FileLock

from gradeff.axes.data.checksums import read_checked, write_checked
from gradeff.axes.data.trivial_cache import splits_digest
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import rate_strategy
from gradeff.cell.plan import CellPlan, cell_data
from gradeff.cell.pretrain import cache_root
from gradeff.cell.tuning import at_edge, log_grid
from gradeff.records.fields import SELF_TUNED
from gradeff.records.results import CellRecord, meter_field
from gradeff.studies.grid import incompatibility
from gradeff.studies.hparams import lr_centre

if TYPE_CHECKING:
    from gradeff.cell.config import RunConfig
    from gradeff.studies.grid import Cell

__all__ = ["SearchBudget", "SelfTuned", "fingerprint", "needs_self_tuning", "run_self_tuned"]

# Bump when the search's procedure changes: every cached choice is then searched afresh.
_PROCEDURE = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchBudget:
    """What a self-tuning search may spend.

    Attributes:
        points: rates of the first grid, evenly spaced in log10 over ``spread`` decades around the optimizer's centre
            (:attr:`gradeff.axes.optim.OptimizerSpec.lr_centre`, else the cell's shared rate).
        spread: decades the first grid spans.
        eta: successive halving's ratio: the first rung trains ``1/eta`` of the epochs, ``1/eta`` of its rates go on.
        widen: at most this many rates added past the grid's edge the best rate sits on, at the full epochs.
    """

    points: int = 6
    spread: float = 3.0
    eta: int = 3
    widen: int = 2

    def __post_init__(self):
        if self.points < 2 or self.eta < 2 or self.widen < 0 or not self.spread > 0:
            raise ValueError("a self-tuning search needs points >= 2, eta >= 2, widen >= 0 and a positive spread")

    def first_epochs(self, epochs: int) -> int:
        """The first rung's epochs: a third (``1/eta``) of the cell's, at least one."""
        return max(1, math.ceil(epochs / self.eta))

    def survivors(self, points: int) -> int:
        """How many rates of the first rung go on to the full epochs: ``1/eta`` of them, at least two."""
        return min(points, max(2, math.ceil(points / self.eta)))


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfTuned:
    """A self-tuning search's choice and what it cost (a cache file's content; a record's ``tuning``).

    Attributes:
        fingerprint: the key of what the choice is a function of (:func:`fingerprint`).
        chosen: the rate kept (the optimizer's whole rate); ``None`` when no trial ended ok (the cell then trains
            at the shared rate, and nothing is cached).
        trials: every trial: its rate, epochs, status, final validation loss, seconds and joules.
        at_edge: ``"low"`` / ``"high"`` when the chosen rate is still the smallest / largest tried, else ``None``.
        seconds / joules: the search's cost (the trials' wall time and their energy; ``None``: not measured).
        searched_at: when the search ran (UTC).
        budget: the :class:`SearchBudget` it ran under, and the epochs of each rung.
        seed: the seed the trials trained with (the first cell that needed the choice; the others read it).
    """

    fingerprint: str
    chosen: float | None
    trials: tuple[dict, ...]
    at_edge: str | None
    seconds: float
    joules: float | None
    searched_at: str
    budget: dict
    seed: int

    def tuning(self, *, cached: bool) -> dict:
        """The record's ``tuning`` section (``cached``: read from an earlier search rather than run now)."""
        return {"param": "lr", "protocol": SELF_TUNED, "chosen": self.chosen, "fingerprint": self.fingerprint,
                "cached": cached, "trials": [dict(t) for t in self.trials], "at_edge": self.at_edge,
                "picked_on": "final validation loss" if self.chosen is not None else "nothing ended ok",
                "budget": dict(self.budget), "searched_at": self.searched_at,
                "seed": self.seed,
                # What this run spent on the search: nothing when the choice was read from the cache.
                "seconds": 0.0 if cached else self.seconds, "joules": 0.0 if cached else self.joules,
                "search_seconds": self.seconds, "search_joules": self.joules}

    def source(self, *, cached: bool) -> str:
        """The record's ``lr_source``."""
        if self.chosen is None:
            return f"{SELF_TUNED}: no trial of {len(self.trials)} ended ok; the shared rate"
        full = [t for t in self.trials if t["rung"] == "full"]
        how = (f"{SELF_TUNED}: successive halving over {len(self.trials) - len(full)} rates, "
               f"{len(full)} to the full epochs, best final validation loss")
        edge = f" (at the rates' {self.at_edge} edge)" if self.at_edge else ""
        where = f"; read from the cache (searched {self.searched_at}, {self.seconds:.1f} s)" if cached else ""
        return how + edge + where + f"; fingerprint {self.fingerprint[:12]}"


def needs_self_tuning(plan: CellPlan) -> bool:
    """Whether the planned cell tunes itself: the tuned protocol, no rate given or searched otherwise, a method that
    trains, an optimizer with a rate to tune, a cell that runs, and no row of the table for it."""
    cell, config = plan.cell, plan.config
    if config.protocol != "tuned" or config.tune is not None or config.lr is not None or config.trial:
        return False
    if cell.optimizer not in OPTIMIZERS or OPTIMIZERS[cell.optimizer].tuning_free:
        return False
    if cell.method not in METHODS or not METHODS[cell.method].trains or incompatibility(cell) is not None:
        return False
    if plan.skip is not None:
        return False
    return plan.rate.row is None


def _stable(value: Any) -> Any:
    """``value`` as plain JSON that is the same in every process: a callable by its qualified name, a dataclass by
    its fields (a registered spec holds builders and configs; their default repr carries a memory address)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _stable(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _stable(item) for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_stable(item) for item in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    return repr(value)


def fingerprint(cell: Cell, config: RunConfig, budget: SearchBudget, *, hparams: Mapping, data_digest: str) -> str:
    """The key of a self-tuned choice: sha256 over everything the search's outcome is a function of.

    Args:
        hparams: the cell's sizes (without its rate, which is what is searched).
        data_digest: :func:`gradeff.axes.data.trivial_cache.splits_digest` of the cell's data: real data, a user's file
            and a registered dataset are keyed by their content.
    """
    inputs = {
        "procedure": _PROCEDURE, "budget": asdict(budget), "profile": config.profile, "precision": config.precision,
        "model": _stable(MODELS[cell.model]), "optimizer": _stable(OPTIMIZERS[cell.optimizer]),
        "method": _stable(METHODS[cell.method]), "rate_strategy": rate_strategy(cell.strategy),
        "hparams": _stable({key: value for key, value in hparams.items() if key != "lr"}),
        "data": data_digest, "weights": sorted(map(list, config.weights)), "torch": torch.__version__,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _cache_path(config: RunConfig, key: str) -> Path:
    return cache_root(config.cache_dir) / "self-tuned" / f"{key[:32]}.json"


def _read(path: Path, key: str) -> SelfTuned | None:
    def load(file: Path) -> SelfTuned:
        payload = json.loads(file.read_text(encoding="utf-8"))
        found = SelfTuned(**payload | {"trials": tuple(payload["trials"])})
        if found.fingerprint != key:
            raise ValueError(f"fingerprint {found.fingerprint[:12]}, not {key[:12]}")
        return found

    return read_checked(path, load, errors=(OSError, ValueError, KeyError, TypeError))


def _write(path: Path, found: SelfTuned) -> None:
    text = json.dumps(asdict(found), indent=1, allow_nan=False) + "\n"
    # A disk that refuses costs the next session a search (said in a warning), never this cell its rate.
    write_checked(path, lambda temporary: temporary.write_text(text, encoding="utf-8"), best_effort=True)


def _search(plan: CellPlan, budget: SearchBudget, key: str, epochs: int, centre: float,
            train: Callable[..., CellRecord]) -> SelfTuned | CellRecord:
    """Run the search; a trial interrupted by Ctrl-C is returned as it is (the cell's record, and the session stops)."""
    started = time.perf_counter()
    trials: list[dict] = []

    def trial(lr: float, trial_epochs: int, rung: str) -> float | None:
        record = train(plan.under(lr=lr, trial=True, epochs=trial_epochs, lr_source=f"a {SELF_TUNED} trial's rate"))
        if record.status == "interrupted":
            raise _Interrupted(record)
        loss = record.summary.final_validation_loss if record.status == "ok" else None
        trials.append({"lr": lr, "epochs": trial_epochs, "rung": rung, "status": record.status,
                       "validation_loss": loss, "seconds": record.finished_at - record.started_at,
                       "joules": meter_field(record, "energy", "joules")})
        return None if loss is None or loss != loss else loss

    grid = log_grid(centre, budget.points, budget.spread)
    first = budget.first_epochs(epochs)
    try:
        if first < epochs:
            scores = {lr: trial(lr, first, "first") for lr in grid}
            ranked = sorted((lr for lr in grid if scores[lr] is not None), key=scores.get)
            going_on = ranked[:budget.survivors(len(grid))] or list(grid[:1])
        else:
            going_on = list(grid)  # one epoch: no cheaper rung to halve on
        full = {lr: trial(lr, epochs, "full") for lr in going_on}
        chosen = _best(full)
        # A best rate at the edge of every rate tried may only be the best of those: one more rate past that edge,
        # at the full epochs, until it sits inside or the widening is spent.
        step = grid[1] / grid[0]
        for _ in range(budget.widen):
            edge = at_edge(chosen, [*grid, *full])
            if chosen is None or edge is None:
                break
            lr = min([*grid, *full]) / step if edge == "low" else max([*grid, *full]) * step
            full[lr] = trial(lr, epochs, "full")
            chosen = _best(full)
    except _Interrupted as interrupted:
        return interrupted.record
    joules = [t["joules"] for t in trials]
    return SelfTuned(
        fingerprint=key, chosen=chosen, trials=tuple(sorted(trials, key=lambda t: (t["rung"] != "first", t["lr"]))),
        at_edge=at_edge(chosen, [*grid, *full]), seconds=time.perf_counter() - started,
        joules=None if any(j is None for j in joules) else sum(joules),
        searched_at=f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M UTC}",
        budget=asdict(budget) | {"epochs": {"first": first if first < epochs else None, "full": epochs}},
        seed=plan.config.seed)


def _best(scores: Mapping[float, float | None]) -> float | None:
    usable = {lr: score for lr, score in scores.items() if score is not None}
    return min(usable, key=usable.get) if usable else None


class _Interrupted(Exception):
    def __init__(self, record: CellRecord):
        super().__init__(record.detail)
        self.record = record


def run_self_tuned(plan: CellPlan, *, train: Callable[..., CellRecord], warm: Callable[[CellPlan], None],
                   budget: SearchBudget = SearchBudget(), **reported) -> CellRecord:
    """The cell at its self-tuned rate: read from the cache, else searched (and cached), then trained once. Never
    raises for the cell's own failures: data that cannot be built fails the cell's training, which records why.

    Args:
        train: one training of a planned cell, ``train(plan, **reported) -> CellRecord``.
        warm: an untimed build and step before the first trial.
        budget: what the search may spend.
        reported: what only the reported run is trained with (its epoch timer, its meters).
    """
    cell, config = plan.cell, plan.config
    shared = plan.hp.lr * plan.method_hp.lr_scale
    try:
        dataset, sized = cell_data(plan)
        key = fingerprint(cell, config, budget, hparams=asdict(sized.hp), data_digest=splits_digest(dataset))
    except Exception:  # noqa: BLE001 - the same failure in the cell's own build becomes its record
        return train(plan, **reported)
    path = _cache_path(config, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError:  # a read-only cache folder: searched as if there were no cache
        lock = None
    try:
        found = _read(path, key)
        cached = found is not None
        if found is None:
            warm(plan.under(lr=shared, trial=True))
            outcome = _search(plan, budget, key, sized.hp.epochs, lr_centre(cell.optimizer, shared), train)
            if isinstance(outcome, CellRecord):
                return outcome  # interrupted in a trial
            found = outcome
            if found.chosen is not None:  # a search no rate survived is not kept: the next session tries again
                _write(path, found)
    finally:
        if lock is not None:
            lock.release()
    lr = found.chosen if found.chosen is not None else shared
    record = train(plan.under(lr=lr, lr_source=found.source(cached=cached), self_tuned=True), **reported)
    return replace(record, tuning=found.tuning(cached=cached))
