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
import uuid
from pathlib import Path

import pytest

from gradeff.axes.models import MODELS
from gradeff.cell import stop
from gradeff.cell.devices import pin_worker_device, resolve_device
from gradeff.cell.distributed import add_options as add_world_size_option
from gradeff.cell.distributed import read_world_size
from gradeff.cell.environment import environment
from gradeff.cell.precision import add_options as add_precision_options
from gradeff.cell.precision import read_precision
from gradeff.cell.stop import raise_if_requested
from gradeff.gate.compare import EXIT_REGRESSION, EXIT_UNUSABLE, arguments, headline, run
from gradeff.pytest.benchmark_table import quiet_benchmark_table
from gradeff.pytest.dryrun import add_options as add_dry_run_options
from gradeff.pytest.dryrun import dry_run_lines, forecast_cell, plan_document, pretraining_seconds, target_for
from gradeff.pytest.fitting import terminal_width
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
from gradeff.pytest.pretraining import pretrain_selected
from gradeff.pytest.progress import CellProgress
from gradeff.pytest.schedule import fine_tuned_backbone, interleave_backbones, to_front, tunes_itself
from gradeff.pytest.seeding import SEED_WHY, Seeding, by_round
from gradeff.pytest.stop_signals import stop_like_ctrl_c
from gradeff.pytest.summary import answer_lines, summary_lines
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, write_text
from gradeff.records.safe_text import one_line
from gradeff.scale.shard import ShardPlan, read_shard, shard_items
from gradeff.scale.shard import add_options as add_shard_options
from gradeff.specs import hookspecs
from gradeff.studies.extend import add_options as add_extension_options
from gradeff.studies.extend import register_all, reset
from gradeff.studies.grid import GRIDS, PLURALS, cells

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s): the plugin loads this module in every pytest session, so it imports none of them; the modules it imports
# import them inside the functions that need them.

# The modules pytest_plugins (below) registers are imported inside functions: pytest marks each for assertion
# rewriting as it registers it, and warns about one imported before (noqa: PLC0415 - registered plugin).

__all__ = ["DEFAULT_RESULTS", "grid_params"]
# --gradeff-list (`gradeff list`): the registries after this session's registrations; the cell fixtures (gradeff_cell,
# gradeff_seed, gradeff_threads); the public fixtures of a benchmark of one's own (gradeff_model, gradeff_data,
# gradeff_optimizer, gradeff_meters, gradeff_method); the file pytest-benchmark's --benchmark-save will write, checked
# once its storage is open; what --gradeff-resume kept and re-ran; the session's records kept in memory as well as
# on disk; the selected cells side by side with another revision (--gradeff-ab); the session's figures into a history
# store (--gradeff-history).
pytest_plugins = ["gradeff.pytest.listing", "gradeff.pytest.fixtures", "gradeff.pytest.cell_fixture",
                  "gradeff.pytest.plugin_outputs", "gradeff.pytest.resume", "gradeff.pytest.session_records",
                  "gradeff.pytest.ab", "gradeff.pytest.history"]
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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A stop requested while its KeyboardInterrupt was swallowed: no further test starts. Under --gradeff-seeds
    auto, a cell's further seed runs only while the cell is in contention (decided here, before its fixtures)."""
    raise_if_requested()
    seeding = item.config.stash.get(_SEEDING, None)
    if seeding is not None:
        item.stash[SEED_WHY] = seeding.decide(item)


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
    stop_like_ctrl_c(controller=workerinput is None and config.getoption("dist", "no") != "no",
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
# --gradeff-seeds auto: the session's plan at work.
_SEEDING = pytest.StashKey["Seeding"]()


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
        items[:] = to_front(items, lambda item: tunes_itself(config, item))
    seeding = config.stash.get(_SEEDING, None)
    if seeding is not None:
        # Round by round: every cell's first seeds, then every cell's next one; a further seed's decision waits only
        # for earlier rounds, which xdist hands out first.
        items[:] = by_round(items, seeding.seeds)
        seeding.collected(items)


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
        pretrain_selected(session)
        return None
    settings = config.stash[SETTINGS]
    target = target_for(named, settings.device, precision=config.stash[PRECISION],
                        peak_tflops=config.getoption("gradeff_peak_tflops"), mfu=config.getoption("gradeff_mfu"))
    run = run_config(config, settings.seed)
    cells = [item.callspec.params["cell"] for item in session.items
             if hasattr(item, "callspec") and "cell" in item.callspec.params]
    forecasts = [forecast_cell(cell, run, target) for cell in dict.fromkeys(cells)]
    pretraining = {model: pretraining_seconds(model, run, target)
                   for model in dict.fromkeys(cell.model for cell, forecast in zip(dict.fromkeys(cells), forecasts)
                                              if forecast.pretrains)}
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in dry_run_lines(forecasts, target, profile=settings.profile, pretraining=pretraining):
        reporter.write_line(line)
    if config.getoption("gradeff_dry_run_json") is not None:
        _write_plan_json(session, forecasts, target, pretraining)
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
    from gradeff.pytest.session_records import lost_writes, of_session  # noqa: PLC0415 - registered plugin, see the imports

    # Records the disk refused (here or in a worker): each said in one line, and the session exits 74.
    config.stash[_UNWRITTEN].extend(lost_writes(config))

    records, _ = of_session(config)
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
    from gradeff.pytest.session_records import of_session  # noqa: PLC0415 - registered plugin, see the imports

    records, errors = of_session(config)
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
