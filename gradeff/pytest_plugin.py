"""The gradeff pytest plugin: options, markers, the cell fixture and the terminal summary.

Loaded by the root ``conftest.py`` (``pytest_plugins``) or with ``-p gradeff.pytest_plugin``.
Importing it must stay light: collecting the grid never imports transformers.
"""

from __future__ import annotations

import argparse
import os
import uuid
from pathlib import Path

import pytest

from gradeff.devices import DEVICES, resolve_device, validate_device
from gradeff.grid import AXES, GRIDS, PLURALS, axis_registry, cells
from gradeff.hparams import MEMORY_MARGIN
from gradeff.models import MODELS
from gradeff.profiles import DEFAULT_PROFILE, PROFILES
from gradeff.results import FINAL_STATUSES, append_record, read_records

__all__ = ["DEFAULT_RESULTS", "grid_params"]

DEFAULT_RESULTS = "results/results.jsonl"
_SESSION_KEY = "gradeff_session"
_CONFIG = pytest.StashKey[dict]()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


_BYTE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def _byte_size(text: str) -> int:
    """A positive size in bytes: ``2147483648``, ``2GiB``, ``160 MiB``, ``512MB``."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if unit not in _BYTE_UNITS:
        raise argparse.ArgumentTypeError(f"expected a size like 8MiB, 2GiB or a number of bytes, got {text!r}; "
                                         f"units: B, KiB, MiB, GiB, KB, MB, GB")
    value = int(float(match.group(1)) * _BYTE_UNITS[unit])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradeff", "gradeff benchmark grid")
    group.addoption("--gradeff-profile", choices=PROFILES, default=DEFAULT_PROFILE,
                    help=f"size of models, data and training (default {DEFAULT_PROFILE})")
    for axis in AXES:
        plural = PLURALS[axis]
        group.addoption(f"--gradeff-{plural}", default=None, metavar="KEYS",
                        help=f"comma-separated {plural} to run in every grid instead of the grid's own (valid: "
                             f"{','.join(axis_registry(axis))}); unlike -k, an unknown key is an error")
    group.addoption("--gradeff-epochs", type=_positive_int, default=None,
                    help="epochs per cell (default: the profile's)")
    group.addoption("--gradeff-seed", type=_int, default=0, help="seed of weights, data and order (default 0)")
    group.addoption("--gradeff-device", default="auto",
                    help=f"device to train on: {', '.join(DEVICES)} or cuda:N (default auto)")
    group.addoption("--gradeff-sample-hz", type=_positive_float, default=10.0, metavar="HZ",
                    help="sampling rate of the RAM and GPU meters (default 10)")
    group.addoption("--gradeff-grid-intensity", type=_positive_float, default=400.0, metavar="GCO2_PER_KWH",
                    help="grid carbon intensity for CO2-equivalent figures (default 400 g/kWh)")
    group.addoption("--gradeff-resume", action="store_true",
                    help="skip cells that already have a final record (ok, diverged, oom, skipped) in the results "
                         "file for the same profile, seed, epochs and code version")
    group.addoption("--gradeff-memory-budget", type=_byte_size, default=None, metavar="SIZE",
                    help="bytes a training step must fit in (e.g. 2GiB): the budget strategies' target (default: "
                         "the profile's, 10MiB at tiny, 2GiB at paper); any other cell is ended as oom when its "
                         "predicted peak exceeds it (an out-of-memory test on any device)")
    group.addoption("--gradeff-memory-margin", type=_fraction, default=MEMORY_MARGIN, metavar="FRACTION",
                    help=f"share of the memory budget the budget strategies keep free (default {MEMORY_MARGIN})")
    group.addoption("--gradeff-weights", action="append", default=[], metavar="MODEL=PATH",
                    help="start MODEL's cells from a local save_pretrained folder (repeatable); without it the "
                         "fine-tuning study's backbones start from the suite's own cached pretraining")
    group.addoption("--gradeff-cache", default=None, metavar="DIR",
                    help="folder of the pretrained-backbone cache (default $GRADEFF_CACHE, else ~/.cache/gradeff)")
    group.addoption("--gradeff-allow-hub", action="store_true",
                    help="allow Hugging Face hub access (off by default: runs never download anything)")
    group.addoption("--gradeff-baseline", default=None, metavar="PATH",
                    help="compare this session's cells with a baseline results file after the summary and fail "
                         "the session on a regression (see `gradeff compare`)")
    group.addoption("--gradeff-compare-args", default="", metavar="ARGS",
                    help="extra `gradeff compare` options for --gradeff-baseline, e.g. \"--time-ratio 3\"")
    group.addoption("--gradeff-report", default=None, metavar="PATH",
                    help="write the HTML report of this session's cells to PATH at the end (a .csv PATH writes the "
                         "flat table); templates in the folder $GRADEFF_TEMPLATES replace the packaged ones")
    group.addoption("--gradeff-results", default=DEFAULT_RESULTS, metavar="PATH",
                    help=f"JSON-lines file each cell's record is appended to (default {DEFAULT_RESULTS})")


def _validate_device(device: str) -> None:
    try:
        validate_device(device)
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-device: {exc}") from None


def _validate_results_path(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(f"--gradeff-results {path}: cannot create its folder ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise pytest.UsageError(f"--gradeff-results {path}: not writable")


def _validate_report_templates(report: str | None) -> None:
    # A template folder that is not there is refused now, not after the session's cells have run.
    if report is None or report.lower().endswith(".csv"):
        return
    from gradeff.report.render import resolve_template_folder

    try:
        resolve_template_folder()
    except NotADirectoryError as exc:
        raise pytest.UsageError(f"--gradeff-report: {exc}") from None


def _settled_cells(path: Path, *, profile: str, seed: int, epochs: int | None) -> dict[str, str]:
    """Cells with a final record for this profile, seed, epoch count and code version → status."""
    from gradeff.environment import code_version
    from gradeff.hparams import hparams_for

    if not path.exists():
        return {}
    version = code_version()
    settled = {}
    for record in read_records(path, errors=[]):
        # Cheap tests first: hparams_for is only asked about records that could settle a cell.
        if (record.model in MODELS and record.status in FINAL_STATUSES and record.profile == profile
                and record.seed == seed and record.code_version == version
                and record.hparams.get("epochs")
                == hparams_for(record.model, profile, epochs=epochs, dataset=record.dataset or None).epochs):
            settled[record.cell] = record.status
    return settled


def _axis_selection(config: pytest.Config) -> dict[str, set[str]]:
    """The keys each ``--gradeff-<axis>`` option selects; a usage error names unknown keys and the valid ones."""
    selection = {}
    for field in AXES:
        axis, registry = PLURALS[field], axis_registry(field)
        value = config.getoption(f"gradeff_{axis}")
        if value is None:
            continue
        keys = {key.strip() for key in value.split(",") if key.strip()}
        unknown = sorted(keys - set(registry))
        if unknown or not keys:
            raise pytest.UsageError(f"--gradeff-{axis}: unknown {field} {', '.join(map(repr, unknown)) or '(none)'}; "
                                    f"valid {axis}: {', '.join(registry)}")
        selection[field] = keys
    return selection


def _local_weights(config: pytest.Config) -> tuple[tuple[str, str], ...]:
    """``--gradeff-weights MODEL=PATH`` pairs, checked: a known model and an existing folder."""
    pairs = []
    for item in config.getoption("gradeff_weights"):
        model, sep, path = item.partition("=")
        if not sep or not path:
            raise pytest.UsageError(f"--gradeff-weights {item!r}: expected MODEL=PATH")
        if model not in MODELS:
            raise pytest.UsageError(f"--gradeff-weights: unknown model {model!r}; valid models: {', '.join(MODELS)}")
        if not Path(path).is_dir():
            raise pytest.UsageError(f"--gradeff-weights {model}={path}: no such folder")
        pairs.append((model, path))
    return tuple(pairs)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("gradeff_allow_hub"):
        # Models are built from configs or local folders; nothing may reach for a hub mid-run.
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            os.environ.setdefault(variable, "1")
    for key, spec in MODELS.items():
        config.addinivalue_line("markers", f"{key}: cells of the {spec.name} model")
    for family in sorted({spec.family for spec in MODELS.values()}):
        config.addinivalue_line("markers", f"{family}: cells of {family} models")
    for key, spec in GRIDS.items():
        config.addinivalue_line("markers", f"{key}: cells of the {spec.name} grid")
    config.addinivalue_line("markers", "cell(model, optimizer, strategy, method, dataset): exact cell selection, "
                            "e.g. -m \"cell(optimizer='adam')\" (unlike -k adam, does not match adamw)")
    config.addinivalue_line("markers", "gradeff_grid(key): parametrize the test's `cell` argument with the grid's "
                            "cells (after --gradeff-<axis> options)")
    device = config.getoption("gradeff_device")
    _validate_device(device)
    results = Path(config.getoption("gradeff_results"))
    _validate_results_path(results)
    _validate_report_templates(config.getoption("gradeff_report"))
    # The controller names the session; xdist workers inherit the name so the summary can find
    # exactly this session's records in an append-only file that may hold earlier runs.
    workerinput = getattr(config, "workerinput", None)
    session = workerinput[_SESSION_KEY] if workerinput and _SESSION_KEY in workerinput else uuid.uuid4().hex[:12]
    if workerinput is not None:
        _share_cores_between_workers()
    config.stash[_CONFIG] = {
        "profile": config.getoption("gradeff_profile"), "epochs": config.getoption("gradeff_epochs"),
        "seed": config.getoption("gradeff_seed"), "device": device, "results": results, "session": session,
        "sample_hz": config.getoption("gradeff_sample_hz"),
        "grid_intensity": config.getoption("gradeff_grid_intensity"),
        "memory_budget": config.getoption("gradeff_memory_budget"),
        "memory_margin": config.getoption("gradeff_memory_margin"),
        "selection": _axis_selection(config), "weights": _local_weights(config),
        "cache_dir": config.getoption("gradeff_cache"),
        "settled": _settled_cells(results, profile=config.getoption("gradeff_profile"),
                                  seed=config.getoption("gradeff_seed"), epochs=config.getoption("gradeff_epochs"))
        if config.getoption("gradeff_resume") else {},
    }


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist: hand the session name to each worker."""
    node.workerinput[_SESSION_KEY] = node.config.stash[_CONFIG]["session"]


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """pytest-benchmark: add the stack's versions and the device to the JSON's machine info."""
    from gradeff.environment import environment

    machine_info["gradeff"] = environment(str(resolve_device(config.stash[_CONFIG]["device"])))


def grid_params(grid: str = "main", **axes) -> list:
    """``pytest.param`` of every cell of a grid (a :class:`~gradeff.grid.Cell`), with its id and markers.

    Each cell carries its model key, model family and grid as markers (``-m llm``, ``-m decoder``,
    ``-m peft``) and an exact ``cell(model=..., optimizer=..., strategy=..., method=..., dataset=...)``
    marker.

    Args:
        axes: ``<plural>=[keys]`` per axis, as :func:`gradeff.grid.cells` takes.
    """
    params = []
    for cell in cells(grid, **axes):
        marks = [
            getattr(pytest.mark, cell.model),
            getattr(pytest.mark, MODELS[cell.model].family),
            getattr(pytest.mark, grid),
            pytest.mark.cell(**cell.axes()),
        ]
        params.append(pytest.param(cell, id=cell.id, marks=marks))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``@pytest.mark.gradeff_grid("peft")`` with a ``cell`` argument gets one call per cell.

    Parametrizing here rather than in the test module lets ``--gradeff-<axis>`` options decide the
    cells: the keys they name replace the grid's own on that axis.
    """
    marker = metafunc.definition.get_closest_marker("gradeff_grid")
    if marker is None or "cell" not in metafunc.fixturenames:
        return
    selection = metafunc.config.stash[_CONFIG]["selection"]
    metafunc.parametrize("cell", grid_params(*marker.args, **{PLURALS[axis]: keys for axis, keys in selection.items()}))


def _share_cores_between_workers() -> None:
    # Under pytest-xdist every worker would start one intra-op thread per core; oversubscribed
    # OpenMP threads spin-wait on each other and epochs get many times slower. Give each worker
    # its share of the cores instead.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture
def gradeff_cell(request: pytest.FixtureRequest, benchmark):
    """Run a cell (a :class:`~gradeff.grid.Cell`, or its keys: ``gradeff_cell(model, optimizer, strategy,
    method=, dataset=, grid=)``): time each epoch with ``benchmark``, append the record, return it.

    The record goes to the results file the moment the cell ends (also under pytest-xdist, where
    pytest-benchmark switches itself off and the epochs are then timed by the loop alone).
    """
    from gradeff.grid import Cell
    from gradeff.metering import MeterSettings
    from gradeff.runner import RunConfig, run_cell

    settings = request.config.stash[_CONFIG]
    config = RunConfig(profile=settings["profile"], seed=settings["seed"], epochs=settings["epochs"],
                       device=settings["device"], session=settings["session"],
                       meters=MeterSettings(hz=settings["sample_hz"], grid_gco2_per_kwh=settings["grid_intensity"]),
                       memory_budget=settings["memory_budget"], memory_margin=settings["memory_margin"],
                       weights=settings["weights"],
                       cache_dir=settings["cache_dir"])

    def timer(epoch_fn, rounds, after_epoch):
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
        if cell.id in settings["settled"]:
            pytest.skip(f"--gradeff-resume: already recorded as {settings['settled'][cell.id]} "
                        f"in {settings['results']}")
        benchmark.group = cell.model
        record = run_cell(cell, config, timer=timer)
        append_record(settings["results"], record)
        if record.status == "interrupted":
            # The running cell is on file; now stop the session the way Ctrl-C always does.
            raise KeyboardInterrupt
        benchmark.extra_info.update(cell=record.cell, status=record.status, record=record.to_json())
        return record

    return run


_SESSION_RECORDS = pytest.StashKey[tuple[list, list[str]]]()


def _session_records(config: pytest.Config) -> tuple[list, list[str]]:
    """This session's records and the results file's unreadable lines, read once at session end."""
    if _SESSION_RECORDS not in config.stash:
        settings = config.stash[_CONFIG]
        records: list = []
        errors: list[str] = []
        if settings["results"].exists():
            records = [r for r in read_records(settings["results"], errors=errors) if r.session == settings["session"]]
        config.stash[_SESSION_RECORDS] = (records, errors)
    return config.stash[_SESSION_RECORDS]


_GATE = pytest.StashKey[tuple[int, str]]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """--gradeff-baseline: run the regression gate on this session's cells; a regression fails the session."""
    config = session.config
    baseline = config.getoption("gradeff_baseline", None)
    if baseline is None or getattr(config, "workerinput", None) is not None:
        return
    import contextlib
    import io
    import shlex

    from gradeff.compare import main as compare_main

    settings = config.stash[_CONFIG]
    records, _ = _session_records(config)
    # This session's records, as a file of their own: the gate's "current", and a handy artifact.
    current = settings["results"].with_name("last-session.jsonl")
    current.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = compare_main([baseline, str(current), *shlex.split(config.getoption("gradeff_compare_args"))])
    config.stash[_GATE] = (code, out.getvalue() + err.getvalue())
    if code != 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """One table per grid of the cells this session ran (see :mod:`gradeff.summary`), then report and gate."""
    if getattr(config, "workerinput", None) is not None:
        return
    settings = config.stash.get(_CONFIG, None)
    if settings is None:
        return
    records, errors = _session_records(config)
    if not records:
        return
    from gradeff.summary import summary_lines

    write = terminalreporter.write_line
    terminalreporter.section(f"gradeff: {len(records)} cells, profile {settings['profile']}, "
                             f"results in {settings['results']}")
    for line in summary_lines(records):
        write(line)
    for message in errors:
        write(f"unreadable line skipped: {message}")
    report = config.getoption("gradeff_report", None)
    if report is not None:
        from gradeff.report import write_report

        path = write_report(records, report, skipped_lines=errors, sources=[str(settings["results"])])
        write(f"report: {path.resolve()}")
    gate = config.stash.get(_GATE, None)
    if gate is not None:
        code, text = gate
        verdict = {0: "no regression", 1: "REGRESSION"}.get(code, "unusable input")
        terminalreporter.section(f"gradeff compare with {config.getoption('gradeff_baseline')}: {verdict}")
        for line in text.rstrip().splitlines():
            write(line)
