"""Shared fixtures of the test suite: the pytester grid, and hand-made records of each study."""

# C extensions cannot be loaded twice in one process. An in-process pytester run (``runpytest``) restores
# sys.modules afterwards, dropping whatever it imported first; numpy imported there for the first time
# would then fail to import again in a later test ("cannot load module more than once per process").
# Importing these before any pytester run keeps them in every snapshot. The Llama decoder's modules too: a model a
# test's conftest registers is built (on meta) while that session configures, and transformers' lazy module would
# be left pointing at the submodules the restore dropped.
import fcntl
import tempfile
from contextlib import contextmanager
from pathlib import Path

import matplotlib.figure  # noqa: F401
import numpy  # noqa: F401
import pytest
import torch

import gradeff.axes.models.llm  # noqa: F401
from gradeff.records.results import CellRecord, EpochRecord, Summary

pytest_plugins = ["pytester"]


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow or cluster, which a plain `pytest tests` leaves out (CI runs "
                          "every test)")


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker, as _turn tells one
        # One torch thread per worker: two workers of two threads each on two cores would ask for twice the cores
        # there are, and OpenMP's threads busy-wait for each other.
        torch.set_num_threads(1)
    # The gradeff plugin registers the grids' markers; the suite's own are registered here (--strict-markers).
    config.addinivalue_line("markers", "cluster: needs the local Slurm cluster of scripts/slurm-local.sh, which "
                                       "it installs and starts (skipped where Slurm cannot run; -m 'not cluster' "
                                       "leaves these tests out)")
    config.addinivalue_line("markers", "slow: an end-to-end test of several seconds (a pytest session of its own, "
                                       "which every pytester test is; real cells; a command run as a user runs it); a "
                                       "plain `pytest tests` leaves these out, --slow or -m runs them")
    config.addinivalue_line("markers", "serial: measures time or a meter that another test running beside it would "
                                       "disturb; under pytest-xdist it runs while no other test does")


@contextmanager
def _turn(item: pytest.Item):
    """Under pytest-xdist, a test holds a lock shared by every worker's test: shared for most, exclusive for a test
    marked serial, which so runs while no other test does (its setup, where a module's measurement may run, too)."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:
        yield
        return
    exclusive = item.get_closest_marker("serial") is not None
    path = Path(tempfile.gettempdir()) / f"gradeff-tests-{workerinput['testrunuid']}.lock"
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with _turn(item):
        return (yield)


# What pytest-xdist tells its workers' code through the environment. A pytest session a test starts (pytester, a
# subprocess) is a session of its own, not one of this run's workers; inheriting these, it would take itself for one
# (gradeff switches pytest-benchmark off under xdist, so such a session writes no benchmark JSON).
XDIST_ENVIRONMENT = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def _sessions_a_test_starts_are_not_xdist_workers(monkeypatch):
    for name in XDIST_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


# What a plain `pytest tests` leaves out, so that a developer can run it between changes: the slow end-to-end tests
# and the cluster's (which start Slurm). A run that selects by marker (-m), names --slow, or names a test file or a
# test runs what it selects: CI runs `pytest tests` and then `-m "slow and not cluster"` and `-m cluster`.
LEFT_OUT_BY_DEFAULT = ("slow", "cluster")
_LEFT_OUT = pytest.StashKey[int]()


def _selects_for_itself(config) -> bool:
    if config.getoption("--slow") or config.option.markexpr:
        return True
    return any("::" in arg or arg.endswith(".py") for arg in config.args)


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        # A test that runs a pytest session of its own (pytester) is end-to-end by nature: most train real cells.
        if "pytester" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    if _selects_for_itself(config):
        return
    kept, left_out = [], []
    for item in items:
        (left_out if any(item.get_closest_marker(name) for name in LEFT_OUT_BY_DEFAULT) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        config.stash[_LEFT_OUT] = len(left_out)
        items[:] = kept
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is not None:  # a pytest-xdist worker: its controller prints the count
            workeroutput["left_out"] = len(left_out)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    # On pytest-xdist's controller, which collects nothing itself: every worker left out the same tests.
    count = getattr(node, "workeroutput", {}).get("left_out", 0)
    node.config.stash[_LEFT_OUT] = max(count, node.config.stash.get(_LEFT_OUT, 0))


def pytest_terminal_summary(terminalreporter, config):
    count = config.stash.get(_LEFT_OUT, 0)
    if count:
        terminalreporter.write_line(f"{count} slow or cluster tests left out: `pytest tests --slow` runs every test "
                                    f"(CI does)")


GRID_FILES = ("benchmarks/test_grid.py", "benchmarks/test_peft_grid.py", "benchmarks/test_memory_grid.py",
              "benchmarks/test_baselines_grid.py")


@pytest.fixture
def grid_pytester(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> pytest.Pytester:
    """A pytester directory holding copies of the benchmark grid modules (every grid)."""
    for path in GRID_FILES:
        source = request.config.rootpath / path
        pytester.makepyfile(**{source.stem: source.read_text()})
    return pytester


def meters(*, util=None, rss=400 * 2**20, joules=12.0, activation=8 * 2**20, state=0, gpu_alloc=None,
           cost_fraction=0.004) -> dict:
    """A full ``meters`` dict in the documented shape (GPU parts ``None`` unless given)."""
    return {
        "ram": {"peak_rss_bytes": rss, "peak_source": "kernel", "mean_rss_bytes": rss * 0.9, "peak_system_percent": 4.5,
                "samples": 10, "duration_s": 1.0},
        "gpu": {"available": util is not None, "device_name": "H100" if util is not None else None,
                "util_mean_percent": util, "util_max_percent": util, "mem_used_peak_bytes": gpu_alloc,
                "power_mean_w": None, "alloc_peak_bytes": gpu_alloc, "reserved_peak_bytes": gpu_alloc,
                "samples": 5, "short_window": False, "duration_s": 1.0},
        "energy": {"joules": joules, "source": "estimate", "co2_grams": None if joules is None else joules / 9000,
                   "duration_s": 1.0},
        "cost": {"reads_s": cost_fraction / 2, "sampler_cpu_s": cost_fraction / 2, "epoch_s": 1.0,
                 "fraction": cost_fraction},
        "memory": {"parameter_bytes": 2**20, "trainable_parameter_bytes": 2**20, "gradient_bytes": 2**20,
                   "optimizer_state_bytes": state, "activation_bytes": activation},
    }


def build_record(cell: str = "llm-adam-standard", status: str = "ok", *, losses=(2.0, 1.5), seconds=(1.0, 1.0),
                 **overrides) -> CellRecord:
    """A record whose epochs have ``losses`` and ``seconds``; any field can be overridden."""
    model, optimizer, strategy = cell.rsplit("-", 2)
    epochs = tuple(EpochRecord(epoch=i, loss=loss, seconds=sec, optimizer_steps=8, closure_calls=8, samples=64,
                               targets=64) for i, (loss, sec) in enumerate(zip(losses, seconds, strict=True)))
    values = dict(cell=cell, model=model, optimizer=optimizer, strategy=strategy, profile="tiny", seed=0,
                  device="cpu", status=status, epochs=epochs, summary=Summary.of(list(epochs), sum(seconds) + 1),
                  loss_floor=0.5, session="s1", environment={"python": "3.11", "torch": "2.13.0+cpu"},
                  hparams={"lr": 1e-3, "batch_size": 8})
    return CellRecord(**(values | overrides))


def build_peft_record(model: str = "vit_s", method: str = "lora", strategy: str = "standard",
                      dataset: str = "cifar100", status: str = "ok", *, accuracies=(0.4, 0.6), seconds=(1.0, 1.0),
                      trainable: int | None = 1_000, total: int | None = 100_000, joules: float | None = 10.0,
                      activation: int = 8 * 2**20, gpu_alloc: int | None = None, bayes: float | None = 0.9,
                      weights: dict | None = None, **overrides) -> CellRecord:
    """A PEFT-study record whose epochs reach held-out ``accuracies`` (fractions); any field can be overridden."""
    epochs = tuple(EpochRecord(epoch=i, loss=2.0 - acc, seconds=sec, optimizer_steps=4, closure_calls=4, samples=64,
                               targets=64, heldout_loss=2.5 - acc, heldout_accuracy=acc, eval_seconds=0.1)
                   for i, (acc, sec) in enumerate(zip(accuracies, seconds, strict=True)))
    recorded = meters(joules=joules, activation=activation, gpu_alloc=gpu_alloc)
    values = dict(
        cell=f"{model}-{method}-{strategy}-{dataset}", grid="peft", model=model, optimizer="adamw", strategy=strategy,
        method=method, dataset=dataset, profile="tiny", seed=0, device="cpu", status=status, epochs=epochs,
        summary=Summary.of(list(epochs), sum(seconds) + 1), loss_floor=0.4, session="s2",
        task={"key": dataset, "name": dataset, "train_samples": 256, "loss_floor": 0.4, "heldout_samples": 256,
              "heldout_loss_floor": 0.45, "bayes_accuracy": bayes, "info": {}},
        parameters={"total": total, "trainable": trainable},
        weights=weights if weights is not None else {"source": "random", "path": None, "pretraining": None},
        environment={"python": "3.11", "torch": "2.13.0+cpu"}, meters=recorded,
        hparams={"lr": 1e-3, "batch_size": 16, "heldout_samples": 256,
                 "method": {"lr_scale": 1.0 if method == "full" else 10.0, "lora_r": 8}})
    return CellRecord(**(values | overrides))


@pytest.fixture
def make_record():
    """The :func:`build_record` factory."""
    return build_record


@pytest.fixture
def make_peft_record():
    """The :func:`build_peft_record` factory."""
    return build_peft_record


@pytest.fixture
def make_meters():
    """The :func:`meters` factory."""
    return meters
