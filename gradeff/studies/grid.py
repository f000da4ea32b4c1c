"""The grids: each study's product of axes, its cells, their ids, and which cells cannot run and why.

A cell is one value on each axis: model, optimizer, strategy, fine-tuning method and dataset. A
grid (one study) varies some axes and holds the others at one value. A cell's id names the axes
its grid varies, in the grid's order (``llm-adam-accum`` in the main study,
``vit_s-lora-checkpoint-cifar100`` in the PEFT study); an axis the grid holds fixed is named
only where a cell departs from the grid's value, so the main study's 72 ids never change.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES
from gradeff.specs.registry import Registry
from gradeff.studies.study import STUDIES

__all__ = ["AXES", "GRIDS", "PLURALS", "Cell", "GridSpec", "axis_registry", "cell_id", "cells", "incompatibility"]

# Every axis of a cell, in the order a suffix of fixed axes is written.
AXES = ("model", "optimizer", "strategy", "method", "dataset")
# The plural of each axis: GridSpec fields, ``cells()`` selections and ``--gradeff-<plural>`` options.
PLURALS = {"model": "models", "optimizer": "optimizers", "strategy": "strategies", "method": "methods",
           "dataset": "datasets"}


def axis_registry(axis: str) -> Registry:
    """The registry of an axis's keys (``dataset`` → the task registry)."""
    return {"model": MODELS, "optimizer": OPTIMIZERS, "strategy": STRATEGIES, "method": METHODS,
            "dataset": TASKS}[axis]


@dataclass(frozen=True, slots=True, kw_only=True)
class GridSpec:
    """One study's grid.

    Attributes:
        key: registry key; also a pytest marker (``-m peft``).
        name: human-readable name.
        study: the study its records belong to (:data:`gradeff.studies.study.STUDIES`); required, and checked
            where the grid is declared, so that no grid is read as another study's by default.
        models / optimizers / strategies / methods: the axis values, in order.
        datasets: the dataset axis; empty means each model's own task.
        id_axes: the axes a cell id names, in order.
        focus: what its cells are read by: ``loss`` (training loss against the task's floor),
            ``accuracy`` (held-out accuracy of a fine-tuned model) or ``memory`` (peak memory against
            time per epoch).
        standard_twins_once: run a strategy that trains the standard cell's model bit for bit
            (:attr:`~gradeff.axes.strategies.StrategySpec.trains_as_standard`: checkpointing, offload, the adaptive
            budget) on the grid's first dataset only, unless the datasets are chosen explicitly. Such a cell's
            accuracy is the standard cell's on every dataset, and what it measures, time and memory per step,
            depends on the batch's shapes, which the grid's datasets share: a second dataset repeats the
            measurement.
    """

    key: str
    name: str
    study: str
    models: tuple[str, ...]
    optimizers: tuple[str, ...]
    strategies: tuple[str, ...]
    methods: tuple[str, ...] = ("full",)
    datasets: tuple[str, ...] = ()
    id_axes: tuple[str, ...]
    focus: str = "loss"
    standard_twins_once: bool = False

    def __post_init__(self):
        STUDIES[self.study]  # an unknown study raises here, naming the valid ones

    def values(self, axis: str, model: str) -> tuple[str, ...]:
        """The values of ``axis`` for a cell of ``model``.

        The dataset axis depends on the model: the grid's datasets of the model's kind, or else the
        model's own task (an LLM in the PEFT grid fine-tunes on text, not on CIFAR-100).
        """
        if axis == "model":
            return self.models
        if axis == "method" and MODELS[model].methods:
            # A model evaluated only in its own way (a zero-shot baseline) is offered only that.
            return tuple(m for m in self.methods if m in MODELS[model].methods) or MODELS[model].methods
        if axis == "dataset":
            kind = TASKS[MODELS[model].task].kind
            return tuple(d for d in self.datasets if TASKS[d].kind == kind) or (MODELS[model].task,)
        return getattr(self, PLURALS[axis])

    def fixed_value(self, axis: str, model: str) -> str | None:
        """The one value of an axis the grid holds fixed, or ``None`` if it varies."""
        values = self.values(axis, model)
        return values[0] if len(values) == 1 else None


GRIDS: Registry[GridSpec] = Registry(
    "grid",
    (
        GridSpec(key="main", study="main", name="Optimizers × memory strategies (main study)",
                 models=("vit", "modernbert", "llm", "vlm"),
                 optimizers=("sgd", "adam", "adamw", "adagrad", "adadelta", "cgd"),
                 strategies=("standard", "checkpoint", "accum"), id_axes=("model", "optimizer", "strategy")),
        GridSpec(key="peft", study="peft", name="Fine-tuning methods × checkpointing (PEFT study)",
                 models=("vit_s", "tinyvit", "vim_s", "mambavision_t"), optimizers=("adamw",),
                 strategies=("standard", "checkpoint", "budget"),
                 methods=("full", "lora", "adalora", "qlora", "bitfit"),
                 datasets=("cifar100", "dtd"), id_axes=("model", "method", "strategy", "dataset"),
                 focus="accuracy", standard_twins_once=True),
        # The PEFT study's foundation-model baselines, used without fine-tuning: zero-shot contrastive models,
        # a frozen self-supervised backbone with a linear probe, autoregressive VLMs prompted to classify.
        GridSpec(key="baselines", study="baselines", name="Foundation-model baselines (PEFT study)",
                 models=("clip", "siglip", "dinov2", "smolvlm", "vlm_prompt", "paligemma", "mobilevlm"),
                 optimizers=("adamw",),
                 strategies=("standard",), methods=("zero_shot", "linear_probe"), datasets=("cifar100", "dtd"),
                 id_axes=("model", "method", "dataset"), focus="accuracy"),
        # Peak memory against time per epoch for every way to trade one for the other, in one run: static
        # checkpointing, host offload, and the adaptive budget and the compiler's budget at the same four
        # budgets (a fraction of each cell's own unconstrained peak), with the compiler's cell that recomputes
        # nothing: the compiled cells' own reference, as standard is the eager cells'.
        GridSpec(key="memory", study="memory", name="Memory strategies side by side", models=("llm", "vit_s"),
                 optimizers=("adamw",),
                 strategies=("standard", "checkpoint", "offload", *(f"budget{percent}" for percent in (80, 60, 40, 20)),
                             "compile_budget100", *(f"compile_budget{percent}" for percent in (80, 60, 40, 20))),
                 id_axes=("model", "strategy"), focus="memory"),
        # Real data every machine has (scikit-learn's digits, Python's help text) through the same datasets path as
        # a local CIFAR-100 or MM-IMDb copy (--gradeff-data): adaptive against plain gradient descent.
        GridSpec(key="real", study="real", name="Real data (digits, Python help text)", models=("vit", "llm"),
                 optimizers=("adamw", "sgd"), strategies=("standard",), datasets=("digits", "pydoc"),
                 id_axes=("model", "optimizer", "dataset")),
    ),
)


def cell_id(grid: str, *, model: str, optimizer: str, strategy: str, method: str = "full",
            dataset: str | None = None) -> str:
    """The public id of a cell of ``grid``, e.g. ``llm-adam-accum`` or ``vit_s-lora-checkpoint-cifar100``.

    Args:
        dataset: ``None`` means the model's own task.

    Raises:
        KeyError: an unknown grid, or a model whose default values the id needs is unknown.
    """
    spec = GRIDS[grid]
    values = {"model": model, "optimizer": optimizer, "strategy": strategy, "method": method, "dataset": dataset}
    if "dataset" in spec.id_axes and dataset is None:
        values["dataset"] = MODELS[model].task
    parts = [values[axis] for axis in spec.id_axes]
    parts += [values[axis] for axis in AXES
              if axis not in spec.id_axes and values[axis] is not None
              and values[axis] != spec.fixed_value(axis, model)]
    return "-".join(parts)


@dataclass(frozen=True, slots=True)
class Cell:
    """One combination of the axes, in one grid."""

    model: str
    optimizer: str
    strategy: str
    method: str = "full"
    dataset: str = ""
    grid: str = "main"

    def __post_init__(self):
        if not self.dataset:
            # The model's own task: stored resolved, so every record names its dataset.
            object.__setattr__(self, "dataset", MODELS[self.model].task)

    @property
    def id(self) -> str:
        return cell_id(self.grid, model=self.model, optimizer=self.optimizer, strategy=self.strategy,
                       method=self.method, dataset=self.dataset)

    def axes(self) -> dict[str, str]:
        """Axis name → key (the exact ``cell(...)`` marker's keyword arguments)."""
        return {axis: getattr(self, axis) for axis in AXES}


def incompatibility(cell: Cell) -> str | None:
    """Why a cell cannot run, as a sentence for ``pytest.skip``; ``None`` if it can.

    Capabilities are data on the specs, so a new model, optimizer, strategy, method or dataset
    states what it supports and this one function decides; no cell is ever dropped without a reason.
    """
    model, strategy, method = MODELS[cell.model], STRATEGIES[cell.strategy], METHODS[cell.method]
    task, own = TASKS[cell.dataset], TASKS[model.task]
    if strategy.checkpointing and not model.supports_checkpointing:
        return f"{model.name} does not support activation checkpointing"
    if task.kind != own.kind:
        return f"{model.name} takes {own.kind} data; {task.name} is {task.kind} data"
    if model.methods and cell.method not in model.methods:
        return f"{model.name} is evaluated with {', '.join(model.methods)} only, not {method.name}"
    if method.needs_biases and not model.has_biases:
        return f"{method.name} trains only bias terms and {model.name} has none"
    for name, requires in ((model.name, model.requires), (method.name, method.requires)):
        for module, extra in requires:
            # find_spec looks the module up without importing it: collection stays light.
            if importlib.util.find_spec(module) is None:
                return f"{name} needs the {module!r} package: pip install 'gradeff[{extra}]'"
    return None


def cells(grid: str = "main", **axes) -> Iterator[Cell]:
    """The cells of a grid, model-major in the grid's order, optionally with other keys on some axes.

    Args:
        grid: grid key.
        **axes: ``<plural>=[keys]`` (``models=``, ``optimizers=``, ``strategies=``, ``methods=``,
            ``datasets=``): run exactly these keys on that axis instead of the grid's own values
            (in registry order). A key the grid has keeps its place; a key it has not extends it:
            ``methods=["lora"]`` runs the main study with LoRA, ``optimizers=["sgd"]`` the PEFT study
            with SGD. Cells a model cannot run are still produced, for the runner to skip with the reason.
            Naming the datasets runs every strategy on each (see :attr:`GridSpec.standard_twins_once`).

    Raises:
        KeyError: an unknown grid or key; the message lists the valid ones.
        TypeError: an unknown axis.
    """
    spec = GRIDS[grid]
    unknown = set(axes) - set(PLURALS.values())
    if unknown:
        raise TypeError(f"unknown axes {sorted(unknown)}; axes: {', '.join(PLURALS.values())}")
    # Looking every key up before the first cell makes a typo fail at once, not half-way.
    chosen = {axis: [key for key in axis_registry(axis) if key in {axis_registry(axis)[k].key for k in keys}]
              for axis, keys in ((a, axes.get(PLURALS[a])) for a in AXES) if keys is not None}
    # The id's axes vary slowest first, so cells come in the order their ids read.
    order = (*spec.id_axes, *(axis for axis in AXES if axis not in spec.id_axes))
    for model in chosen.get("model", spec.models):
        values = [chosen.get(axis, spec.values(axis, model)) for axis in order[1:]]
        datasets = chosen.get("dataset", spec.values("dataset", model))
        for combination in itertools.product(*values):
            cell = Cell(**dict(zip(order, (model, *combination))), grid=grid)
            if (spec.standard_twins_once and "dataset" not in chosen and cell.dataset != datasets[0]
                    and cell.strategy in STRATEGIES and STRATEGIES[cell.strategy].trains_as_standard):
                continue
            yield cell
