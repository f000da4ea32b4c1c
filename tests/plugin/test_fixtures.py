"""The grid's own tests are written with the public fixtures: what they receive is what the runner trains."""

import re

import pytest
import torch

from gradeff.cell.build import build_cell
from gradeff.cell.config import RunConfig
from gradeff.cell.plan import plan_cell
from gradeff.cell.run import run_cell
from gradeff.records.store import read_records
from gradeff.studies.grid import Cell

PLUGIN = ("-p", "gradeff.pytest_plugin")

CONFIG = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="t")


def _losses(record):
    return [(e.loss, e.heldout_loss, e.optimizer_steps, e.samples) for e in record.epochs]


def test_a_prebuilt_cell_trains_as_the_runners_own_build():
    """build_cell then run_cell(built=): the same numbers as the runner's own build, and the built model is trained."""
    cell = Cell("llm", "adam", "accum")
    own = run_cell(cell, CONFIG)
    built = build_cell(plan_cell(cell, CONFIG))
    model, optimizer = built.state.model, built.state.optimizer
    before = [p.detach().clone() for p in model.parameters()]
    record = run_cell(cell, CONFIG, built=built)
    assert record.status == own.status == "ok"
    assert _losses(record) == _losses(own) and record.summary.final_heldout_loss == own.summary.final_heldout_loss
    assert record.parameters == own.parameters and record.weights == own.weights and record.hparams == own.hparams
    assert set(record.meters) == set(own.meters) >= {"memory", "compute"}
    assert record.meters["memory"] == own.meters["memory"]
    assert record.meters["compute"]["model_flops"] == own.meters["compute"]["model_flops"] > 0
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()) if p.requires_grad)
    assert optimizer.state and all(p in optimizer.state for p in model.parameters() if p.requires_grad)
    assert record.started_at == built.started


@pytest.mark.parametrize(("raised", "status"), [
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), "oom"),
    (RuntimeError("builder broke"), "error"),
])
def test_a_failed_build_is_the_cells_status(monkeypatch, raised, status):
    """What building raised is kept, and run_cell records it as the cell's status instead of raising."""
    import gradeff.cell.build

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(gradeff.cell.build, "prepare_state", fail)
    built = build_cell(plan_cell(Cell("llm", "sgd", "standard"), CONFIG))
    assert built.state is None and built.error is raised and built.weights is not None
    record = run_cell(Cell("llm", "sgd", "standard"), CONFIG, built=built)
    assert record.status == status and str(raised).splitlines()[0] in record.detail
    assert record.weights == built.weights.to_record() and record.epochs == ()


def test_only_the_plain_path_takes_a_prebuilt_state():
    """A skipped, tuned or isolated cell builds its own models: handing it one is a mistake, said at once."""
    from dataclasses import replace

    built = build_cell(plan_cell(Cell("llm", "sgd", "standard"), CONFIG))
    for cell, settings in ((Cell("llm", "sgd", "standard", method="bitfit"), CONFIG),
                           (Cell("llm", "sgd", "standard"), replace(CONFIG, tune="lr")),
                           (Cell("llm", "sgd", "standard"), replace(CONFIG, isolate=True))):
        with pytest.raises(ValueError, match="prebuilt state is trained only where"):
            run_cell(cell, settings, built=built)


GRID_TEST = '''
import pytest
import torch


@pytest.mark.gradeff_grid("main")
def test_cell(cell, gradeff_model, gradeff_optimizer, gradeff_data, gradeff_meters, gradeff_cell):
    built = gradeff_model is not None
    before = [p.detach().clone() for p in gradeff_model.parameters()] if built else []
    record = gradeff_cell(cell)
    print(f"\\nCELL {record.cell} {record.status} built={built}")
    assert gradeff_meters.record is record
    if not built:
        assert gradeff_optimizer is None and gradeff_data is None
        if record.status == "skipped":
            pytest.skip(record.detail)
        assert record.status == "ok", record.detail
        return
    assert record.status == "ok", record.detail
    # The objects this test received are the ones trained: the model's parameters moved, the optimizer holds state
    # for exactly them, the data is the one trained on, the meters recorded the epochs.
    assert all(not torch.equal(b, p) for b, p in zip(before, gradeff_model.parameters()))
    params = {id(p) for group in gradeff_optimizer.param_groups for p in group["params"]}
    assert params == {id(p) for p in gradeff_model.parameters()}
    assert record.task["train_samples"] == len(gradeff_data)
    assert len(gradeff_meters.epochs_meters) == len(record.epochs) == gradeff_data.epochs
    assert [e.meters for e in record.epochs] == gradeff_meters.epochs_meters
    assert record.meters["memory"] == gradeff_meters.memory and "compute" in record.meters
'''


def test_the_grid_test_trains_the_objects_it_received(pytester, tmp_path):
    """Fixture values are what the runner trains; a skipped cell builds nothing and is still recorded."""
    pytester.makepyfile(test_grid=GRID_TEST)
    results = tmp_path / "r.jsonl"
    outcome = pytester.runpytest_subprocess(
        *PLUGIN, "-s", "-k", "llm-adam-standard or llm-cgd-checkpoint", "--gradeff-methods", "full,bitfit",
        "--gradeff-epochs", "2", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=2, skipped=2)
    outcome.stdout.fnmatch_lines_random(["*CELL llm-adam-standard ok built=True*",
                                         "*CELL llm-cgd-checkpoint ok built=True*",
                                         "*CELL llm-adam-standard-bitfit skipped built=False*"])
    records = {r.cell: r for r in read_records(results)}
    assert records["llm-cgd-checkpoint-bitfit"].status == "skipped"
    assert "trains only bias terms" in records["llm-cgd-checkpoint-bitfit"].detail


@pytest.mark.parametrize("option", [("--gradeff-tune", "lr", "--gradeff-tune-points", "1"), ("--gradeff-isolate",)])
def test_tuned_and_isolated_cells_build_their_own_models(pytester, tmp_path, option):
    """Under --gradeff-tune (a fresh model per trial) and --gradeff-isolate (built in the cell's process) the
    fixtures build nothing and are None; the cell is trained and recorded as before."""
    pytester.makepyfile(test_grid=GRID_TEST)
    results = tmp_path / "r.jsonl"
    outcome = pytester.runpytest_subprocess(*PLUGIN, "-s", "-k", "llm-sgd-standard", "--gradeff-epochs", "1",
                                            *option, f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1)
    outcome.stdout.fnmatch_lines(["*CELL llm-sgd-standard ok built=False*"])
    (record,) = read_records(results)
    assert record.status == "ok" and (record.tuning if "--gradeff-tune" in option
                                      else record.environment["process"] == "isolated")


CRASH_BEFORE_METERS = """
import os

import pytest


@pytest.fixture(autouse=True)
def crash_my_step(request):
    if os.environ.get("MY_STEP_CRASHES") and request.node.originalname == "test_my_step":
        raise RuntimeError("gone before its meters opened: no record")
"""


ONE_STEP_BENCH = """
import pytest


@pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
def test_my_step(gradeff_model, gradeff_meters):
    with gradeff_meters as meters, meters.epoch() as log:
        log.step(float(sum(p.double().sum() for p in gradeff_model.parameters())), samples=8)
"""


def test_under_xdist_a_custom_benchmark_without_a_record_is_missing(pytester, tmp_path, monkeypatch):
    """-n 2: the workers hand their selection back, custom cells included, so the gate misses a custom benchmark
    that left no record (with a grid cell selected beside it, the gate judges only the selection)."""
    pytester.makepyfile(test_mine=ONE_STEP_BENCH, test_grid=GRID_TEST)
    pytester.makeconftest(CRASH_BEFORE_METERS)
    args = (*PLUGIN, "-n", "2", "-p", "no:randomly", "test_mine.py", "test_grid.py",
            "-k", "my_step or llm-sgd-standard",
            "--gradeff-epochs", "1")
    baseline = tmp_path / "base.jsonl"
    outcome = pytester.runpytest_subprocess(*args, f"--gradeff-results={baseline}")
    outcome.assert_outcomes(passed=2)
    assert {r.cell for r in read_records(baseline)} == {"llm-adamw-my_step", "llm-sgd-standard"}
    # All recorded: the gate passes, and it judged both cells.
    again = tmp_path / "again.jsonl"
    gated = pytester.runpytest_subprocess(*args, f"--gradeff-results={again}", f"--gradeff-baseline={baseline}",
                                          "--gradeff-compare-args=--time-ratio 100")
    gated.stdout.fnmatch_lines(["*gradeff compare with*no regression*"])
    assert gated.ret == 0
    assert set((tmp_path / "last-session.cells").read_text().split()) == {"llm-adamw-my_step", "llm-sgd-standard"}
    # The benchmark leaves no record: missing, a regression.
    monkeypatch.setenv("MY_STEP_CRASHES", "1")
    gated = pytester.runpytest_subprocess(*args, f"--gradeff-results={tmp_path / 'third.jsonl'}",
                                          f"--gradeff-baseline={baseline}", "--gradeff-compare-args=--time-ratio 100")
    gated.assert_outcomes(passed=1, errors=1)
    gated.stdout.fnmatch_lines(["*gradeff compare with*REGRESSION*", "*only in baseline: llm-adamw-my_step*",
                                "*1 missing*"])
    assert set((tmp_path / "last-session.cells").read_text().split()) == {"llm-adamw-my_step", "llm-sgd-standard"}


# One epoch of a benchmark's own loop, then the rate its optimizer trained at ("LR 0.001").
ONE_EPOCH_THEN_RATE = '''
    with gradeff_meters as meters, meters.epoch() as log:
        for batch in gradeff_data.batches(0):
            gradeff_model(**batch).loss.backward()
            gradeff_optimizer.step()
            log.step(0.0, samples=len(batch["input_ids"]))
    group = gradeff_optimizer.param_groups[0]
    print("LR", repr(group.get("initial_lr", group["lr"])))
'''

METHOD_BENCH = '''
import pytest


@pytest.mark.parametrize("gradeff_method", ["lora", "bitfit"], indirect=True)
@pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
def test_adapted(gradeff_model, gradeff_data, gradeff_optimizer, gradeff_meters):
    trainable = [p for p in gradeff_model.parameters() if p.requires_grad]
    assert 0 < sum(p.numel() for p in trainable) < sum(p.numel() for p in gradeff_model.parameters()) / 2
    assert {id(p) for g in gradeff_optimizer.param_groups for p in g["params"]} == {id(p) for p in trainable}
''' + ONE_EPOCH_THEN_RATE + '''

@pytest.mark.parametrize("gradeff_method", ["nope"], indirect=True)
@pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
def test_unknown(gradeff_model):
    pass
'''


def test_a_benchmarks_method_is_applied_recorded_and_checked(pytester, tmp_path):
    """gradeff_method=lora: the adapted model, its trainable parameters at the method's rate, ``method`` and the id;
    bitfit on a model without biases is skipped with the grid's reason and recorded; a bad key names the valid ones."""
    from gradeff.studies.hparams import hparams_for, method_hparams_for

    pytester.makepyfile(test_methods=METHOD_BENCH)
    results = tmp_path / "r.jsonl"
    outcome = pytester.runpytest_subprocess(*PLUGIN, "-s", "--gradeff-epochs", "1", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1, skipped=1, errors=1)
    outcome.stdout.fnmatch_lines(["*test_unknown*gradeff_method: unknown method 'nope'; valid methods: full, lora,*"])
    assert "During handling" not in outcome.stdout.str()
    lr = hparams_for("llm", "tiny").lr * method_hparams_for("lora", "llm", "tiny").lr_scale
    outcome.stdout.fnmatch_lines([f"*LR {lr}"])
    records = {r.cell: r for r in read_records(results)}
    assert set(records) == {"llm-adamw-adapted-lora", "llm-adamw-adapted-bitfit"}
    lora, bitfit = records["llm-adamw-adapted-lora"], records["llm-adamw-adapted-bitfit"]
    assert lora.status == "ok" and lora.method == "lora" and lora.strategy == "adapted" and lora.grid == "custom"
    assert 0 < lora.parameters["trainable"] < lora.parameters["total"]
    assert lora.hparams["method"]["lr_scale"] == method_hparams_for("lora", "llm", "tiny").lr_scale != 1
    assert bitfit.status == "skipped" and bitfit.method == "bitfit" and "trains only bias terms" in bitfit.detail
    assert bitfit.epochs == () and bitfit.parameters == {}


def test_a_benchmarks_cell_id_carries_its_method_and_dataset_as_grid_ids_do():
    """Known at collection for the gate: the main study's convention, with the benchmark in the strategy's place."""
    from types import SimpleNamespace

    from gradeff.pytest.fixture_setup import bench_cell_id
    from gradeff.studies.grid import cell_id

    def item(**params):
        return SimpleNamespace(callspec=SimpleNamespace(params=params), fixturenames=("gradeff_meters",),
                               originalname="test_my_step")

    assert bench_cell_id(item(gradeff_model="llm")) == "llm-adamw-my_step"
    assert bench_cell_id(item(gradeff_model="llm", gradeff_method="full", gradeff_data="causal_lm")) == \
        "llm-adamw-my_step"
    assert bench_cell_id(item(gradeff_model="llm", gradeff_optimizer="adam", gradeff_method="lora")) == \
        cell_id("main", model="llm", optimizer="adam", strategy="my_step", method="lora") == "llm-adam-my_step-lora"
    assert bench_cell_id(item(gradeff_model="vit", gradeff_method="bitfit", gradeff_data="digits")) == \
        cell_id("main", model="vit", optimizer="adamw", strategy="my_step", method="bitfit", dataset="digits")
    assert bench_cell_id(SimpleNamespace(callspec=SimpleNamespace(params={"gradeff_model": "llm"}),
                                         fixturenames=("gradeff_model",), originalname="test_x")) is None


RATE_BENCH = '''
import pytest


@pytest.mark.parametrize("gradeff_optimizer", ["adam"], indirect=True)
@pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
def test_rate(gradeff_model, gradeff_data, gradeff_optimizer, gradeff_meters):
''' + ONE_EPOCH_THEN_RATE


@pytest.mark.parametrize("protocol", ["tuned", "shared"])
def test_a_benchmarks_record_names_the_rate_its_optimizer_trained_at(pytester, tmp_path, protocol):
    """The protocol sets a benchmark's rate as it sets a grid cell's (llm-adam's tuned rate is not the shared one);
    the record's hparams name that rate, where it came from and the precision, as a grid cell's do."""
    pytester.makepyfile(test_rate=RATE_BENCH)
    results = tmp_path / "r.jsonl"
    outcome = pytester.runpytest_subprocess(*PLUGIN, "-s", "-p", "no:cacheprovider", "--gradeff-epochs", "1",
                                            "--gradeff-protocol", protocol, f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1)
    trained = float(re.search(r"LR (\S+)", outcome.stdout.str()).group(1))
    (record,) = read_records(results)
    expected = plan_cell(Cell("llm", "adam", "standard"), RunConfig(epochs=1, protocol=protocol))
    assert record.hparams["lr"] == trained == expected.hp.lr
    assert record.hparams["lr_source"] == expected.rate.source and record.hparams["lr_source"].startswith(protocol)
    assert record.hparams["protocol"] == protocol and record.hparams["precision"] == "fp32"
    shared = plan_cell(Cell("llm", "adam", "standard"), RunConfig(epochs=1, protocol="shared")).hp.lr
    assert (trained != shared) == (protocol == "tuned")
