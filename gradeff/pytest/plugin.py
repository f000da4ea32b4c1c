"""The gradeff pytest plugin: options, markers, the cell fixture and the terminal summary.

Loaded in every pytest session of an environment gradeff is installed in, by its ``pytest11`` entry point.
The plugin's name is ``gradeff.pytest_plugin``: the entry point's name, and a module that is this one under that
name, so ``-p gradeff.pytest_plugin`` and ``pytest_plugins = ["gradeff.pytest_plugin"]`` name the same plugin
(``-p no:gradeff.pytest_plugin`` turns it off). Importing it must stay light: collecting the grid never imports
transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import uuid
from pathlib import Path

import pytest

from gradeff.analysis.sequential import SeedPlan
from gradeff.cell import stop
from gradeff.cell.devices import pin_worker_device, resolve_device
from gradeff.cell.distributed import add_options as add_world_size_option
from gradeff.cell.distributed import read_world_size
from gradeff.cell.environment import environment
from gradeff.cell.precision import add_options as add_precision_options
from gradeff.cell.precision import read_precision
from gradeff.cell.pretrain import pretrain_ahead
from gradeff.cell.stop import raise_if_requested
from gradeff.gate.compare import EXIT_REGRESSION, EXIT_UNUSABLE, arguments, headline, run
from gradeff.models import MODELS
from gradeff.pytest.benchmark_table import quiet_benchmark_table
from gradeff.pytest.dryrun import add_options as add_dry_run_options
from gradeff.pytest.dryrun import dry_run_lines, plan_cell, plan_document, pretraining_seconds, target_for
from gradeff.pytest.fitting import terminal_width
from gradeff.pytest.fixture_setup import cell_setup
from gradeff.pytest.gate import cell_of_nodeid, cells_of_items, current_records, path_conflicts, session_files
from gradeff.pytest.gate_verdict import HEADLINE, LastWord
from gradeff.pytest.option_checks import benchmark_storage_given
from gradeff.pytest.options import (
    DEFAULT_RESULTS,
    PRECISION,
    SETTINGS,
    WORLD_SIZE,
    add_options,
    read_settings,
    run_config,
)
from gradeff.pytest.progress import PRETRAINED, STATUS, CellProgress
from gradeff.pytest.schedule import fine_tuned_backbone, interleave_backbones, to_front
from gradeff.pytest.seeding import Seeding, by_round
from gradeff.pytest.summary import answer_lines, summary_lines
from gradeff.pytest.workers import forward_to_workers
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, write_text
from gradeff.records.results import read_records, record_field
from gradeff.records.safe_text import one_line
from gradeff.scale.shard import ShardPlan, read_shard, shard_items
from gradeff.scale.shard import add_options as add_shard_options
from gradeff.specs import hookspecs
from gradeff.studies.extend import add_options as add_extension_options
from gradeff.studies.extend import register_all, reset
from gradeff.studies.grid import GRIDS, PLURALS, Cell, cells

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

# The modules pytest_plugins (below) registers are imported inside functions: pytest marks each for assertion
# rewriting as it registers it, and warns about one imported before (noqa: PLC0415 - registered plugin).

__all__ = ["DEFAULT_RESULTS", "grid_params"]
# --gradeff-list (`gradeff list`): the registries after this session's registrations; the public fixtures of a
# benchmark of one's own (gradeff_model, gradeff_data, gradeff_optimizer, gradeff_meters, gradeff_method); the file
# pytest-benchmark's --benchmark-save will write, checked once its storage is open; what --gradeff-resume kept and
# re-ran; the session's records kept in memory as well as on disk; the selected cells side by side with another
# revision (--gradeff-ab); the session's figures into a history store (--gradeff-history).
pytest_plugins = ["gradeff.pytest.listing", "gradeff.pytest.fixtures", "gradeff.pytest.plugin_outputs",
                  "gradeff.pytest.resume", "gradeff.pytest.session_records", "gradeff.pytest.ab",
                  "gradeff.pytest.history"]
_SESSION_KEY = "gradeff_session"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_shard_options(parser)
    add_precision_options(parser)
    add_world_size_option(parser)
    add_dry_run_options(parser)
    add_options(parser)
    add_extension_options(parser)


def pytest_addhooks(pluginmanager) -> None:
    """``pytest_gradeff_register``: a conftest or plugin adds its own models, optimizers, strategies, ..."""
    pluginmanager.add_hookspecs(hookspecs)


def _stop_like_ctrl_c(*, controller: bool = False, worker: bool = False) -> None:
    """SIGTERM (what CI timeouts and schedulers send) stops the run as Ctrl-C does; a second signal ends it at once.

    The first SIGINT or SIGTERM raises KeyboardInterrupt in the main thread: the running cell is recorded
    ``interrupted`` (by that signal), the summary is printed and the results file stays whole. A second one, while
    that is happening, exits without a traceback (status 128 + signal number, the shell's convention). A pytest-xdist
    ``controller`` passes the first on to its workers (:mod:`gradeff.pytest.workers`); a ``worker`` takes no later
    interrupt for a second signal (xdist's shutdown interrupts it too), so it is never cut off writing its record.
    """
    received: list[int] = []
    stop.clear()

    def handler(signum, frame):
        received.append(signum)
        if len(received) == 1:
            why = f"signal {signal.Signals(signum).name}"
            stop.request(why)
            if controller:
                forward_to_workers(signum)
            if _safe_to_raise_in(frame):
                raise KeyboardInterrupt(why)
            # Raised inside a __del__, Python would print it as ignored and go on; raised at an instruction without a
            # line number, pytest's report of it fails and the session ends in an internal error (status 1). The next
            # optimizer step, test setup or the session's end raises it instead (gradeff.cell.stop).
            return
        if worker:
            return  # the controller ends its workers (and kills one that does not end)
        sys.stderr.write(f"\ngradeff: second {signal.Signals(signum).name}, stopping now\n")
        sys.stderr.flush()
        os._exit(128 + signum)

    # Only the main thread may install handlers (an embedding program may configure pytest elsewhere).
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, handler)


def _safe_to_raise_in(frame) -> bool:
    """Whether a KeyboardInterrupt raised in the interrupted code reaches pytest whole.

    Not inside an object's ``__del__``, where Python drops an exception; not where a frame of the interrupted stack
    sits at an instruction without a line number (Python 3.11 has them in a ``with`` statement's set-up), where the
    traceback entry's line is None and pytest's rendering of the interruption raises TypeError.
    """
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_lineno is None:
            return False
        frame = frame.f_back
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A stop requested while its KeyboardInterrupt was swallowed: no further test starts. Under --gradeff-seeds
    auto, a cell's further seed runs only while the cell is in contention (decided here, before its fixtures)."""
    raise_if_requested()
    seeding = item.config.stash.get(_SEEDING, None)
    if seeding is not None:
        item.stash[_SEED_WHY] = seeding.decide(item)


def pytest_configure(config: pytest.Config) -> None:
    if (hasattr(config.option, "benchmark_disable") and not benchmark_storage_given(config)
            and (config.getoption("dist", "no") != "no" or os.environ.get("PYTEST_XDIST_WORKER"))):
        # pytest-benchmark cannot time under xdist and warns so at the end of every run; the loop times every
        # epoch itself, so it is switched off here, before its own configure (--benchmark-enable still wins).
        # Asked to store its timings, it is left on, so that the settings refuse that request with the reason.
        config.option.benchmark_disable = True
    if not config.getoption("gradeff_allow_hub"):
        # Models are built from configs or local folders; nothing may reach for a hub mid-run.
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            os.environ.setdefault(variable, "1")
    # The user's entries first: markers, option checks and the grids below all see them.
    model_paths = register_all(config)
    for key, spec in MODELS.items():
        config.addinivalue_line("markers", f"{key}: cells of the {spec.name} model")
    for family in sorted({spec.family for spec in MODELS.values()}):
        config.addinivalue_line("markers", f"{family}: cells of {family} models")
    for key, spec in GRIDS.items():
        config.addinivalue_line("markers", f"{key}: cells of the {spec.name} grid")
    config.addinivalue_line("markers", "grid: every grid's cells, none of the suite's own benchmarks (the harness's "
                            "overhead, CG on its test problems): the README's main job is `pytest benchmarks -m grid`")
    config.addinivalue_line("markers", "cell(model, optimizer, strategy, method, dataset): exact cell selection, "
                            "e.g. -m \"cell(optimizer='adam')\" (unlike -k adam, does not match adamw)")
    config.addinivalue_line("markers", "gradeff_grid(key): parametrize the test's `cell` argument with the grid's "
                            "cells (after --gradeff-<axis> options)")
    settings = read_settings(config)
    from gradeff.pytest.plugin_outputs import plugin_outputs  # noqa: PLC0415 - registered plugin, see the imports

    # Every output (gradeff's, pytest's and other plugins': --junitxml, --benchmark-json, --log-file...) against every
    # other, before pytest's logging plugin (trylast) opens its file.
    conflicts = path_conflicts(results=settings.results, report=settings.report, baseline=settings.baseline,
                               compare_args=settings.compare_args, others=plugin_outputs(config))
    if conflicts:
        raise pytest.UsageError("; ".join(conflicts))
    if config.getoption("gradeff_dry_run_json") is not None and config.getoption("gradeff_dry_run") is None:
        raise pytest.UsageError("--gradeff-dry-run-json: given without --gradeff-dry-run, whose plans it writes")
    if model_paths:
        # A model-path model starts from its folder's weights, recorded as --gradeff-weights would be.
        settings = dataclasses.replace(settings, weights=(*settings.weights, *model_paths))
    # The controller names the session; xdist workers inherit the name so the summary can find
    # exactly this session's records in an append-only file that may hold earlier runs.
    workerinput = getattr(config, "workerinput", None)
    _stop_like_ctrl_c(controller=workerinput is None and config.getoption("dist", "no") != "no",
                      worker=workerinput is not None)
    session = workerinput[_SESSION_KEY] if workerinput and _SESSION_KEY in workerinput else uuid.uuid4().hex[:12]
    if workerinput is not None:
        # xdist worker gwI trains on GPU I mod count (auto or cuda only; a CPU run is left alone).
        settings = dataclasses.replace(settings, device=pin_worker_device(settings.device))
    from gradeff.pytest.resume import candidates  # noqa: PLC0415 - registered plugin, see the imports

    # The records --gradeff-resume may keep; each cell keeps its own only for an equal experiment fingerprint.
    settled = candidates(settings.results, profile=settings.profile, seeds=settings.seeds) if settings.resume else {}
    config.stash[SETTINGS] = settings = dataclasses.replace(settings, session=session, settled=settled)
    if settings.seed_plan is not None:
        config.stash[_SEEDING] = Seeding(plan=settings.seed_plan, seeds=settings.seeds, results=settings.results,
                                         session=session, options=settings.answer, budget=settings.seed_budget,
                                         settled=frozenset(settled))
    config.stash[_SHARD] = read_shard(config, settings.profile)
    config.stash[PRECISION] = read_precision(config, settings.device)
    config.stash[WORLD_SIZE] = read_world_size(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    # Registered entries belong to this session; another session in this process (pytester) starts clean.
    reset()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist: hand the session name to each worker."""
    node.workerinput[_SESSION_KEY] = node.config.stash[SETTINGS].session


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """pytest-benchmark: add the stack's versions and the device to the JSON's machine info."""
    machine_info["gradeff"] = environment(str(resolve_device(config.stash[SETTINGS].device)))


def grid_params(grid: str = "main", **axes) -> list:
    """``pytest.param`` of every cell of a grid (a :class:`~gradeff.studies.grid.Cell`), with its id and markers.

    Each cell carries its model key, model family and grid as markers (``-m llm``, ``-m decoder``,
    ``-m peft``), ``grid`` (every grid's cells), and an exact
    ``cell(model=..., optimizer=..., strategy=..., method=..., dataset=...)`` marker.

    Args:
        axes: ``<plural>=[keys]`` per axis, as :func:`gradeff.studies.grid.cells` takes.
    """
    params = []
    for cell in cells(grid, **axes):
        marks = [
            getattr(pytest.mark, cell.model),
            getattr(pytest.mark, MODELS[cell.model].family),
            getattr(pytest.mark, grid),
            pytest.mark.grid,
            pytest.mark.cell(**cell.axes()),
        ]
        params.append(pytest.param(cell, id=cell.id, marks=marks))
    return params


_SHARD = pytest.StashKey[ShardPlan | None]()
_SHARD_LINE = pytest.StashKey[str]()
# --gradeff-seeds auto: the session's plan at work, and why an item's further seed runs.
_SEEDING = pytest.StashKey["Seeding"]()
_SEED_WHY = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """--gradeff-shard I/N: keep shard I's cells of what -k, -m and the axis options selected; deselect the rest.
    Then the fine-tuned backbones' cells are interleaved and the cells that search their own rate go first
    (:mod:`gradeff.pytest.schedule`)."""
    _keep_shard(config, items)
    items[:] = interleave_backbones(items, fine_tuned_backbone)
    if SETTINGS in config.stash and not config.option.collectonly:
        # Only for a run: deciding it builds the cells' settings (torch and the registries' modules), which a listing
        # of the cells does without.
        items[:] = to_front(items, lambda item: _tunes_itself(config, item))
    seeding = config.stash.get(_SEEDING, None)
    if seeding is not None:
        # Round by round: every cell's first seeds, then every cell's next one; a further seed's decision waits only
        # for earlier rounds, which xdist hands out first.
        items[:] = by_round(items, seeding.seeds)
        seeding.collected(items)


def _tunes_itself(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether a collected grid test's cell searches its own rate in this session (:mod:`gradeff.cell.self_tune`)."""
    from gradeff.cell.self_tune import needs_self_tuning  # noqa: PLC0415 - torch, see the imports

    cell = getattr(getattr(item, "callspec", None), "params", {}).get("cell")
    if not isinstance(cell, Cell):
        return False
    try:
        return needs_self_tuning(cell, run_config(config, config.stash[SETTINGS].seeds[0]))
    except Exception:  # noqa: BLE001 - a cell that cannot be planned says why when it runs; here it keeps its place
        return False


def _keep_shard(config: pytest.Config, items: list) -> None:
    plan = config.stash.get(_SHARD, None)
    if plan is None:
        return
    kept, deselected = shard_items(items, plan.shard, plan.costs)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
    balance = f"balanced by recorded wall time from {plan.costs_path}" if plan.costs else "balanced by cell count"
    config.stash[_SHARD_LINE] = (f"gradeff shard {plan.shard}: {len(kept)} of {len(kept) + len(deselected)} selected "
                                 f"tests, {len(deselected)} deselected ({balance})")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """--gradeff-dry-run: plan the selected grid cells (on meta), print the table, and run none of them."""
    config = session.config
    named = config.getoption("gradeff_dry_run")
    if named is None:
        _pretrain_ahead(session)
        return None
    settings = config.stash[SETTINGS]
    target = target_for(named, settings.device, precision=config.stash[PRECISION],
                        peak_tflops=config.getoption("gradeff_peak_tflops"), mfu=config.getoption("gradeff_mfu"))
    run = run_config(config, settings.seed)
    cells = [item.callspec.params["cell"] for item in session.items
             if hasattr(item, "callspec") and "cell" in item.callspec.params]
    plans = [plan_cell(cell, run, target) for cell in dict.fromkeys(cells)]
    pretraining = {model: pretraining_seconds(model, run, target)
                   for model in dict.fromkeys(cell.model for cell, plan in zip(dict.fromkeys(cells), plans)
                                              if plan.pretrains)}
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in dry_run_lines(plans, target, profile=settings.profile, pretraining=pretraining):
        reporter.write_line(line)
    if config.getoption("gradeff_dry_run_json") is not None:
        _write_plan_json(session, plans, target, pretraining)
    return True


def _write_plan_json(session: pytest.Session, plans: list, target, pretraining: dict) -> None:
    """--gradeff-dry-run-json: the plans as data, with every selected test's cell and seed (``gradeff launch``)."""
    config = session.config
    settings = config.stash[SETTINGS]
    tests = []
    for item in session.items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        tests.append((item.nodeid, params.get("cell"), params.get("gradeff_seed", settings.seed)))
    document = plan_document(tests, plans, target, profile=settings.profile, pretraining=pretraining)
    _write_session_file(config, Path(config.getoption("gradeff_dry_run_json")), json.dumps(document, indent=1) + "\n")


def _pretrain_ahead(session: pytest.Session) -> None:
    """Pretrain the selected cells' backbones before the first cell, each by the process that claims it first
    (:func:`gradeff.cell.pretrain.pretrain_ahead`): under pytest-xdist the workers pretrain side by side. Not on
    xdist's controller (it runs no cell), nor in a session that runs none."""
    config = session.config
    if config.option.collectonly or config.pluginmanager.get_plugin("dsession") is not None or not session.items:
        return
    from gradeff.cell.arithmetic import intra_op_threads  # noqa: PLC0415 - torch, see the imports

    settings = config.stash[SETTINGS]
    needed = [(model, item.callspec.params.get("gradeff_seed", settings.seed)) for item in session.items
              if (model := fine_tuned_backbone(item)) is not None]
    if not needed:
        return
    # The cells' thread count: it is part of a pretraining's recipe (see gradeff.cell.pretrain).
    with intra_op_threads(settings.threads):
        pretrain_ahead(needed, settings.profile, local=dict(settings.weights), cache_dir=settings.cache_dir,
                       device=str(resolve_device(settings.device)))


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    line = config.stash.get(_SHARD_LINE, None)
    return [line] if line else []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``@pytest.mark.gradeff_grid("peft")`` with a ``cell`` argument gets one call per cell.

    Parametrizing here rather than in the test module lets ``--gradeff-<axis>`` options decide the
    cells: the keys they name replace the grid's own on that axis.
    """
    marker = metafunc.definition.get_closest_marker("gradeff_grid")
    if marker is None or "cell" not in metafunc.fixturenames:
        return
    settings = metafunc.config.stash[SETTINGS]
    selection = settings.selection
    metafunc.parametrize("cell", grid_params(*marker.args, **{PLURALS[axis]: keys for axis, keys in selection.items()}))
    if len(settings.seeds) > 1:
        # Repeats: one call per cell and seed (llm-adam-accum-seed1). With one seed the ids stay the cells' own,
        # so -k selections and baselines keep working.
        metafunc.parametrize("gradeff_seed", settings.seeds, ids=[f"seed{seed}" for seed in settings.seeds])


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
    from gradeff.cell.run import run_cell  # noqa: PLC0415 - torch, see the imports
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
        record = run_cell(cell, setup.config, timer=timer, built=built, metering=metering)
        del built, setup  # a hand-run cell's objects go with it; the test's own stay its fixtures'
        plan = settings.seed_plan or SeedPlan(first=len(settings.seeds), most=len(settings.seeds), adaptive=False)
        record = dataclasses.replace(record, seeding=plan.to_record(request.node.stash.get(_SEED_WHY, "")))
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


_SESSION_RECORDS = pytest.StashKey[tuple[list, list[str]]]()


def _session_records(config: pytest.Config) -> tuple[list, list[str]]:
    """This session's records and the results file's unreadable lines, read once at session end: the file's records
    of the session, and those the disk refused, kept in memory (:mod:`gradeff.pytest.session_records`)."""
    if _SESSION_RECORDS not in config.stash:
        from gradeff.pytest.session_records import merged  # noqa: PLC0415 - registered plugin, see the imports

        settings = config.stash[SETTINGS]
        records: list = []
        errors: list[str] = []
        try:
            if settings.results.exists():
                records = [r for r in read_records(settings.results, errors=errors) if r.session == settings.session]
        except OSError as exc:  # gone or unreadable now: the records kept in memory are the session's
            errors.append(f"{settings.results}: cannot be read back ({exc.strerror or exc})")
        config.stash[_SESSION_RECORDS] = (merged(config, records), errors)
    return config.stash[_SESSION_RECORDS]


_GATE = pytest.StashKey[tuple[int, str]]()
# The cells this session selected (grid tests left after -k, -m and sharding), for the gate.
_SELECTED = pytest.StashKey[list[str]]()
# Where an xdist worker hands its selection back to the controller (config.workeroutput).
_SELECTED_OUTPUT = "gradeff_selected"


def pytest_collection_finish(session: pytest.Session) -> None:
    selected = session.config.stash[_SELECTED] = cells_of_items(session.items)
    if selected:
        quiet_benchmark_table(session.config)  # the summary shows the cells' epochs; --benchmark-json stays
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        # pytest-xdist: the whole selection goes back to the controller when this worker finishes, benchmarks
        # written with the public fixtures included (their cell ids are not in their node ids).
        workeroutput[_SELECTED_OUTPUT] = selected


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """pytest-xdist: the controller collects nothing; it learns the selection from a worker's node ids."""
    config = node.config
    if _SELECTED in config.stash and config.stash[_SELECTED]:
        return  # every worker collects the same items
    selection = config.stash[SETTINGS].selection
    known = {cell.id for grid in GRIDS for cell in cells(grid, **{PLURALS[a]: keys for a, keys in selection.items()})}
    config.stash[_SELECTED] = list(dict.fromkeys(c for c in (cell_of_nodeid(i, known) for i in ids) if c))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist: a finished worker's own selection joins the controller's (every worker collects the same items;
    one that crashed hands nothing back, a replacement or another worker does)."""
    output = getattr(node, "workeroutput", None) or {}
    if output.get(_SELECTED_OUTPUT):
        config = node.config
        config.stash[_SELECTED] = list(dict.fromkeys([*config.stash.get(_SELECTED, []), *output[_SELECTED_OUTPUT]]))


_SESSION = pytest.StashKey[pytest.Session]()
# Files of this session that could not be written ("cannot write PATH: No space left on device (ENOSPC)").
_UNWRITTEN = pytest.StashKey[list[str]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_SESSION] = session
    session.config.stash[_UNWRITTEN] = []
    settings = session.config.stash.get(SETTINGS, None)
    if settings is not None and settings.baseline is not None and getattr(session.config, "workerinput", None) is None:
        session.config.pluginmanager.register(LastWord(session.config), "gradeff-gate-verdict")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if (reporter is not None and reporter.isatty() and getattr(session.config, "workerinput", None) is None
            and session.config.getoption("gradeff_dry_run") is None):
        # A line per finished cell on a terminal (one rewritten line under xdist); a log keeps pytest's own.
        compact = bool(getattr(session.config.option, "numprocesses", None))
        session.config.pluginmanager.register(CellProgress(reporter, compact=compact), "gradeff-progress")


def _write_session_file(config: pytest.Config, path: Path, text: str) -> None:
    """Write one of the session's files atomically; a failure is noted (one line) and ends the session 74."""
    try:
        write_text(path, text)
    except OutputError as exc:
        config.stash[_UNWRITTEN].append(str(exc))


def _incomplete_output(config: pytest.Config) -> None:
    """Exit 74 (incomplete output) unless the session already fails for a test or a regression: its verdict stands."""
    session = config.stash.get(_SESSION, None)
    if session is not None and config.stash[_UNWRITTEN] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = EXIT_INCOMPLETE_OUTPUT


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """Write the session's own records and selection (``last-session.*``); with --gradeff-baseline, run the regression
    gate on them: a regression fails the session."""
    if stop.reason is not None:
        # Asked to stop, the session says so even where every KeyboardInterrupt was swallowed (gradeff.cell.stop).
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    config = session.config
    settings = config.stash.get(SETTINGS, None)
    if settings is None or getattr(config, "workerinput", None) is not None:
        return
    seeding = config.stash.get(_SEEDING, None)
    if seeding is not None:
        # The skipped seeds' ledger served the workers' decisions; each skip is in the session's test report.
        seeding.ledger.unlink(missing_ok=True)
    from gradeff.pytest.session_records import lost_writes  # noqa: PLC0415 - registered plugin, see the imports

    # Records the disk refused (here or in a worker): each said in one line, and the session exits 74.
    config.stash[_UNWRITTEN].extend(lost_writes(config))

    records, _ = _session_records(config)
    from gradeff.pytest.resume import kept_runs  # noqa: PLC0415 - registered plugin, see the imports

    records = current_records(records, settings.results, kept_runs(config))
    selection = config.stash.get(_SELECTED, [])
    if config.option.collectonly or config.getoption("gradeff_dry_run") is not None or settings.ab is not None:
        # No cell was meant to run here (an A/B runs them in workers): nothing to judge, and the last session's
        # files stay. A dry run's plans (--gradeff-dry-run-json) that could not be written still end the session 74.
        _incomplete_output(config)
        return
    if settings.baseline is None and (not (records or selection) or config.stash.get(_SHARD, None) is not None):
        # No cell selected (a project's own unit tests): nothing of gradeff's to leave behind. A shard is one part of
        # a run, whose records are its own results file: the shards of `gradeff launch` share a folder, and one
        # shard's last-session files would replace another's.
        return
    current, selected = session_files(settings.results)
    # This session's records and the cells it was asked to run, as files of their own: what `gradeff compare
    # BASELINE results/last-session.jsonl` reads. The gate below judges them in memory, so a disk too full to keep
    # them still gets a verdict. (No grid test selected, e.g. only hand-written cells: every baseline cell is
    # expected.)
    _write_session_file(config, current, "".join(r.to_json() + "\n" for r in records))
    _write_session_file(config, selected, "".join(f"{cell}\n" for cell in selection))
    if settings.baseline is None:
        _incomplete_output(config)
        return
    # The options were checked at configure time (parse_compare_args), before any cell ran.
    gate_args = arguments(settings.baseline, current, settings.compare_args)
    verdict = run(gate_args, current_records=records, selected_cells=selection or None)
    code, error = verdict.code, verdict.error
    # Printed after pytest's own last line (gradeff.pytest.gate_verdict).
    config.stash[HEADLINE] = (headline(verdict, output=gate_args.output), code in (EXIT_REGRESSION, EXIT_UNUSABLE))
    if code == EXIT_INCOMPLETE_OUTPUT:
        # The gate's own --output could not be written: said once, with the session's other unwritten files.
        config.stash[_UNWRITTEN].append(error)
        error = None
    config.stash[_GATE] = (code, verdict.text + (f"gradeff compare: error: {error}\n" if error else ""))
    if code in (EXIT_REGRESSION, EXIT_UNUSABLE):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _incomplete_output(config)


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's tables: the Answer is the last thing printed
def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """One table per grid of the cells this session ran (see :mod:`gradeff.pytest.summary`), then report and gate."""
    if getattr(config, "workerinput", None) is not None:
        return
    settings = config.stash.get(SETTINGS, None)
    if settings is None:
        return
    records, errors = _session_records(config)
    if not records:
        return
    def write(line: str) -> None:
        # Cell ids, failure messages and paths come from records: one line each, control characters visible.
        terminalreporter.write_line(one_line(line))

    terminalreporter.section(one_line(f"gradeff: {len(records)} cells, profile {settings.profile}, "
                                      f"results in {settings.results}"))
    width = terminal_width(config.get_terminal_writer())
    for line in summary_lines(records, width=width, answer=False):
        write(line)
    for message in errors:
        write(f"unreadable line skipped: {message}")
    if settings.report is not None:
        from gradeff.report import write_report  # noqa: PLC0415 - the report: jinja2 and its modules, 0.07 s

        try:
            path = write_report(records, settings.report, skipped_lines=errors, sources=[str(settings.results)],
                                answer_options=settings.answer)
            write(f"report: {path.resolve()}")
        except OutputError as exc:
            config.stash[_UNWRITTEN].append(str(exc))
    for problem in config.stash.get(_UNWRITTEN, []):
        write(f"gradeff: error: {problem}")
    gate = config.stash.get(_GATE, None)
    if gate is not None:
        code, text = gate
        verdict = {0: "no regression", 1: "REGRESSION", 2: "unusable input"}.get(code, "no regression")
        terminalreporter.section(one_line(f"gradeff compare with {settings.baseline}: {verdict}"))
        for line in text.rstrip().splitlines():
            write(line)
    # The verdicts last: what a reader of the terminal sees without scrolling back.
    verdicts = answer_lines(records, settings.answer, width=width)
    if verdicts:
        terminalreporter.section("gradeff: the answer")
        for line in verdicts:
            write(line)
    if config.stash.get(_UNWRITTEN, []):
        write(f"gradeff: incomplete output: {len(config.stash[_UNWRITTEN])} write(s) lost (exit 74)")
    _incomplete_output(config)
