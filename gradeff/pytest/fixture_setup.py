"""What the public fixtures of one test share (:mod:`gradeff.pytest.fixtures`): its cell, settings and sizes, and
its data, model and optimizer built once, as the runner builds them; and the cell id a benchmark of one's own
records under.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from gradeff.axes.models import MODELS
from gradeff.cell.devices import resolve_device
from gradeff.pytest.options import SETTINGS, run_config

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

# The modules gradeff.pytest.plugin's pytest_plugins registers are imported inside functions: pytest marks each for
# assertion rewriting as it registers it, and warns about one imported before (noqa: PLC0415 - registered plugin).

__all__ = ["CUSTOM_GRID", "FixtureSetup", "bench_cell_id", "bench_id", "bench_name", "cell_setup"]

CUSTOM_GRID = "custom"


def bench_name(test_name: str) -> str:
    """A benchmark's strategy key: its test's name without ``test_`` (``test_my_step`` → ``my_step``)."""
    return re.sub(r"[^a-z0-9_]", "_", test_name.lower().removeprefix("test_")) or "bench"


def bench_id(model: str, optimizer: str, bench: str, method: str, dataset: str | None) -> str:
    """``model-optimizer-bench``, then the method and the dataset where they depart from the full model on its own
    task: the main study's ids with the benchmark as the strategy (``llm-adam-my_step-lora``)."""
    own_task = MODELS[model].task if model in MODELS else None
    return "-".join([model, optimizer, bench, *([method] if method != "full" else []),
                     *([dataset] if dataset is not None and dataset != own_task else [])])


def bench_cell_id(item) -> str | None:
    """The cell id a collected test of the public fixtures records (``llm-adam-my_step``), or ``None``.

    Known at collection, so the gate counts a benchmark among the cells a session selected.
    """
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    if "gradeff_meters" not in getattr(item, "fixturenames", ()) or params.get("gradeff_model") is None:
        return None
    return bench_id(params["gradeff_model"], params.get("gradeff_optimizer", "adamw"), bench_name(item.originalname),
                     params.get("gradeff_method", "full"), params.get("gradeff_data"))


@dataclass(kw_only=True)
class FixtureSetup:
    """One benchmark's or grid cell's cell, settings and sizes, shared by the public fixtures of a test.

    The cell is planned once, here (:func:`gradeff.cell.plan.plan_cell`); data, model and optimizer are built from
    that plan as the runner builds them (``cell_data``, ``build_cell``), and a grid cell's plan and build are the
    ones :func:`gradeff.cell.run.run_plan` trains: one path from the registries to the tensors.

    Attributes:
        grid: the test is a grid cell (parametrized with ``cell``): the fixtures are what the runner trains,
            and a failing build is kept for the cell's record instead of raised.
    """

    # The cell's plan (its settings, its rate as the protocol sets it, its skip reason): what the data is sized by,
    # what the runner trains and what a benchmark's record names.
    plan: Any
    device: Any
    settings: Any
    bench: str = ""
    grid: bool = False
    weights: Any = None
    state: Any = None
    dataset: Any = None
    built: Any = None
    # The pytest session's configuration: where the session keeps its records, and for a grid cell whether
    # --gradeff-resume keeps its earlier one.
    pytest_config: Any = None

    @classmethod
    def of(cls, cell, config, settings, **fields) -> FixtureSetup:
        from gradeff.cell.plan import plan_cell  # noqa: PLC0415 - torch, see the imports

        return cls(settings=settings, device=resolve_device(settings.device), plan=plan_cell(cell, config), **fields)

    @property
    def cell(self):
        return self.plan.cell

    @property
    def config(self):
        """The cell's run configuration (its plan's)."""
        return self.plan.config

    @property
    def hp(self):
        return self.plan.hp

    def builds(self) -> bool:
        """Whether the fixtures build anything: a grid cell's only where the runner trains one build in this
        process (not a skipped, already recorded, tuned, isolated or sharded cell)."""
        from gradeff.cell.run import trains_prebuilt  # noqa: PLC0415 - torch, see the imports

        if not self.grid:
            return True
        from gradeff.pytest.resume import judge  # noqa: PLC0415 - registered plugin, see the imports

        judgement = judge(self.pytest_config, self.cell, self.config.seed) if self.pytest_config else None
        return not (judgement is not None and judgement.reuse) and trains_prebuilt(self.plan)

    def build(self):
        """The cell's :class:`gradeff.cell.build.Built`, built once (``None`` where the runner builds its own)."""
        if self.built is None and self.builds():
            from gradeff.cell.build import build_cell, release  # noqa: PLC0415 - torch, see the imports

            # The previous test has let go of its model by now: free it before this one's peak is measured.
            release(self.device)
            self.built = build_cell(self.plan)
            if self.built.error is not None and not self.grid:
                raise self.built.error
            self.weights, self.state = self.built.weights, self.built.state
            if self.state is not None:
                self.dataset, self.plan = self.state.dataset, self.built.plan
        return self.built

    def data(self):
        if self.dataset is None:
            from gradeff.cell.plan import cell_data  # noqa: PLC0415 - torch, see the imports

            # Real data sets its own sizes (rows, classes): the plan follows, as in a cell.
            self.dataset, self.plan = cell_data(self.plan)
        return self.dataset

    def train_state(self):
        """The built state (``None`` for a grid cell the fixtures do not build, or whose build failed)."""
        if self.state is None:
            if not self.grid:
                self.data()
            self.build()
        return self.state


def cell_setup(config: pytest.Config, cell, seed: int) -> FixtureSetup:
    """The setup of a grid cell (what ``gradeff_cell`` runs): the public fixtures' source in a grid test."""
    return FixtureSetup.of(cell, run_config(config, seed), config.stash[SETTINGS], grid=True, pytest_config=config)
