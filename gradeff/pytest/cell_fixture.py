"""The plugin's cell fixtures: ``gradeff_cell`` (run a cell, its epochs timed by pytest-benchmark, and record it), the
seed a cell runs with (``gradeff_seed``) and the session's torch threads for a test that trains outside a cell
(``gradeff_threads``). Registered by :mod:`gradeff.pytest.plugin` (``pytest_plugins``).
"""

from __future__ import annotations

import dataclasses

import pytest

from gradeff.analysis.sequential import SeedPlan
from gradeff.pytest.fixture_setup import cell_setup
from gradeff.pytest.options import SETTINGS
from gradeff.pytest.progress import PRETRAINED, STATUS
from gradeff.pytest.seeding import SEED_WHY
from gradeff.records.results import record_field
from gradeff.studies.grid import GRIDS, Cell

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

# The modules gradeff.pytest.plugin's pytest_plugins registers are imported inside functions: pytest marks each for
# assertion rewriting as it registers it, and warns about one imported before (noqa: PLC0415 - registered plugin).

__all__ = ["gradeff_cell", "gradeff_seed", "gradeff_threads"]


@pytest.fixture
def gradeff_seed(request: pytest.FixtureRequest) -> int:
    """The seed a cell runs with: ``--gradeff-seed``, or one of ``--gradeff-seeds`` (grid tests are parametrized)."""
    return request.config.stash[SETTINGS].seed


@pytest.fixture
def gradeff_threads(request: pytest.FixtureRequest):
    """torch's intra-op threads set to the session's ``--gradeff-threads`` for a test that trains outside a cell.

    A cell sets its own count; a benchmark that runs torch itself (the measurement overhead, CG's test problems)
    would otherwise take torch's default, one thread per core: under ``-n 2`` that is three busy threads on two
    cores, and torch's workers spin waiting for the core the other worker holds. Yields the count.
    """
    from gradeff.cell.arithmetic import intra_op_threads  # noqa: PLC0415 - torch, see the imports

    threads = request.config.stash[SETTINGS].threads
    with intra_op_threads(threads):
        yield threads


@pytest.fixture
def gradeff_cell(request: pytest.FixtureRequest, gradeff_seed: int):
    """Run a cell (a :class:`~gradeff.studies.grid.Cell`, or its keys: ``gradeff_cell(model, optimizer, strategy,
    method=, dataset=, grid=)``): time each epoch with ``benchmark``, append the record, return it.

    The record goes to the results file the moment the cell ends (also under pytest-xdist, where
    pytest-benchmark switches itself off and the epochs are then timed by the loop alone).

    The test's own cell is trained from its public fixtures (``gradeff_model``, ``gradeff_optimizer``,
    ``gradeff_data``: the objects the test received, built at its setup) and recorded with its
    ``gradeff_meters``; another cell from a build of its own, the same way.
    """
    from gradeff.cell.run import run_plan  # noqa: PLC0415 - torch, see the imports
    from gradeff.pytest.session_records import keep  # noqa: PLC0415 - registered plugin, see the imports

    settings = request.config.stash[SETTINGS]
    callspec = getattr(request.node, "callspec", None)
    own = callspec.params.get("cell") if callspec is not None else None

    used: dict[str, object] = {}

    def timer(epoch_fn, rounds, after_epoch):
        # pytest-benchmark's fixture is requested here, when a cell times its epochs: a cell that ends before
        # training (a budget out of reach, a failed build) would leave it unused, which it warns about.
        benchmark = used["benchmark"] = request.getfixturevalue("benchmark")
        benchmark.group = used["group"]
        if benchmark.disabled:
            # Disabled (--benchmark-disable, or under xdist) pedantic runs its target once:
            # hand it all epochs, timed by the loop.
            benchmark.pedantic(lambda: [(epoch_fn(), after_epoch()) for _ in range(rounds)])
        else:
            # One round per epoch: --benchmark-json then holds every epoch's time; the held-out
            # evaluation runs in the round's teardown, outside its timing.
            benchmark.pedantic(epoch_fn, rounds=rounds, iterations=1, warmup_rounds=0,
                               teardown=lambda: after_epoch())

    def run(cell: Cell | str, optimizer: str | None = None, strategy: str | None = None, method: str | None = None,
            dataset: str | None = None, grid: str = "main"):
        if not isinstance(cell, Cell):
            given = {"optimizer": optimizer, "strategy": strategy, "method": method, "dataset": dataset}
            # An axis the test does not pass is the one value its grid holds it at.
            axes = {axis: value if value is not None else GRIDS[grid].fixed_value(axis, cell)
                    for axis, value in given.items()}
            cell = Cell(cell, **axes, grid=grid)
        from gradeff.pytest.resume import judge, note  # noqa: PLC0415 - registered plugin, see the imports

        judgement = judge(request.config, cell, gradeff_seed)
        if judgement is not None:
            note(request.node, cell.id, gradeff_seed, judgement)
            if judgement.reuse:
                pytest.skip(f"--gradeff-resume: already recorded as {judgement.status} in {settings.results} (the "
                            f"same experiment: {judgement.fingerprint})")
        used["group"] = cell.model
        if cell == own:
            setup = request.getfixturevalue("_gradeff_setup")
            meters = request.getfixturevalue("gradeff_meters") if "gradeff_meters" in request.fixturenames else None
        else:
            setup, meters = cell_setup(request.config, cell, gradeff_seed), None
        built = setup.build()
        metering = meters._new_metering() if meters is not None and not setup.config.isolate else None
        record = run_plan(setup.plan, timer=timer, built=built, metering=metering)
        del built, setup  # a hand-run cell's objects go with it; the test's own stay its fixtures'
        plan = settings.seed_plan or SeedPlan(first=len(settings.seeds), most=len(settings.seeds), adaptive=False)
        record = dataclasses.replace(record, seeding=plan.to_record(request.node.stash.get(SEED_WHY, "")))
        if meters is not None:
            meters._recorded(record)
        # On disk the moment the cell ends, and in memory: a full disk still gets the summary and the verdict.
        keep(request.config, settings.results, record)
        _tell_progress(request.node, record)
        if record.status == "interrupted":
            # The running cell is on file; now stop the session the way Ctrl-C always does.
            raise KeyboardInterrupt
        if "benchmark" in used:
            used["benchmark"].extra_info.update(cell=record.cell, status=record.status, record=record.to_json())
        return record

    return run


def _tell_progress(node: pytest.Item, record) -> None:
    """The record's status, and a pretraining it ran, for the progress lines (user_properties reach the
    controller under pytest-xdist too)."""
    node.user_properties.append((STATUS, record.status))
    info = record_field(record, "weights", "pretraining")
    if isinstance(info, dict) and info.get("reused") is False and isinstance(info.get("seconds"), (int, float)):
        node.user_properties.append((PRETRAINED, {"model": record.model, "seconds": float(info["seconds"])}))
