"""The grid: every (model, optimizer, strategy) cell, and which cells cannot run and why."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from gradeff.models import MODELS, ModelSpec
from gradeff.optim import OPTIMIZERS, OptimizerSpec
from gradeff.results import cell_id
from gradeff.strategies import STRATEGIES, StrategySpec

__all__ = ["Cell", "cells", "incompatibility"]


@dataclass(frozen=True, slots=True)
class Cell:
    """One combination of the three axes."""

    model: str
    optimizer: str
    strategy: str

    @property
    def id(self) -> str:
        return cell_id(self.model, self.optimizer, self.strategy)


def incompatibility(model: ModelSpec, optimizer: OptimizerSpec, strategy: StrategySpec) -> str | None:
    """Why a cell cannot run, as a sentence for ``pytest.skip``; ``None`` if it can.

    Capabilities are data on the specs, so a new model, optimizer or strategy states what it
    supports and this one function decides; no cell is ever dropped without a reason.
    """
    if strategy.checkpointing and not model.supports_checkpointing:
        return f"{model.name} does not support activation checkpointing"
    for module, extra in model.requires:
        # find_spec looks the module up without importing it: collection stays light.
        if importlib.util.find_spec(module) is None:
            return f"{model.name} needs the {module!r} package: pip install 'gradeff[{extra}]'"
    return None


def cells(models=None, optimizers=None, strategies=None) -> Iterator[Cell]:
    """All cells of the grid (or of the given keys), model-major, in registry order.

    Raises:
        KeyError: an unknown key; the message lists the valid ones.
    """
    # Looking every key up before the first cell makes a typo fail at once, not half-way.
    axes = [[registry[key].key for key in (keys or registry)]
            for registry, keys in ((MODELS, models), (OPTIMIZERS, optimizers), (STRATEGIES, strategies))]
    for model, optimizer, strategy in itertools.product(*axes):
        yield Cell(model, optimizer, strategy)
