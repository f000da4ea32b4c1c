"""--gradeff-dry-run: what the meta pass predicts is what a cell measures, and the plan follows the strategy."""

import json

import pytest
import torch

from gradeff.axes.methods import apply_method
from gradeff.axes.models import MODELS, build_model
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies.budget import profile_step
from gradeff.cell.config import RunConfig
from gradeff.meters.flops import count_step_flops
from gradeff.meters.memory import parameter_bytes
from gradeff.pytest.dryrun import (
    DEVICE_MEMORY,
    CellForecast,
    Target,
    _measure,
    dry_run_lines,
    forecast_cell,
    plan_document,
    target_for,
)
from gradeff.studies.grid import Cell
from gradeff.studies.hparams import hparams_for, method_hparams_for

H200 = Target(name="H200", memory_bytes=143_771 * 2**20, peak_flops=989.4e12, peak_source="table", mfu=0.3,
              precision="bf16")


def _measured_on_cpu(model: str, method: str):
    """One real fine-tuning step of the tiny cell on the CPU: counted FLOPs, parameter bytes, saved activations."""
    hp = hparams_for(model, "tiny", dataset="cifar100")
    torch.manual_seed(0)
    network = apply_method(method, build_model(model, "tiny", num_labels=hp.num_classes),
                           method_hparams_for(method, model, "tiny"), total_steps=1, head=MODELS[model].head).model
    batch = {"pixel_values": torch.randn(hp.batch_size, 3, 32, 32), "labels": torch.randint(0, 100, (hp.batch_size,))}
    trainable = [p for p in network.parameters() if p.requires_grad]
    profile = profile_step(network.train(), batch, state_bytes=OPTIMIZERS["adamw"].state_bytes(trainable),
                           device=torch.device("cpu"))
    return count_step_flops(network, batch).flops, parameter_bytes(network), profile


def _predicted(model: str, method: str):
    hp = hparams_for(model, "tiny", dataset="cifar100")
    return _measure(model, method, "cifar100", "tiny", "adamw", hp.batch_size, hp.num_classes, hp.image_size)


@pytest.mark.parametrize("model", ["tinyvit", "vim_s"])
@pytest.mark.parametrize("method", ["full", "lora", "bitfit"])
@pytest.mark.slow
def test_meta_predicts_the_cpu_step_exactly(model, method):
    """Without attention kernels (TinyViT's explicit softmax, Vim's scan) the meta pass is the CPU pass: the same
    FLOPs, parameter bytes, saved activations per block and optimizer state, to the unit."""
    flops, params, measured = _measured_on_cpu(model, method)
    predicted = _predicted(model, method)
    assert predicted.flops == flops
    assert predicted.profile.parameter_bytes == params
    assert predicted.profile.activation_bytes == measured.activation_bytes
    assert [(layer.saved_bytes, layer.boundary_bytes, layer.gradient_bytes) for layer in predicted.profile.layers] == [
        (layer.saved_bytes, layer.boundary_bytes, layer.gradient_bytes) for layer in measured.layers]
    assert predicted.profile.optimizer_state_bytes == measured.optimizer_state_bytes


@pytest.mark.parametrize("model", ["vit_s", "mambavision_t"])
def test_attention_on_meta_is_counted_within_one_percent(model):
    """scaled_dot_product_attention dispatches to another kernel on meta than on the CPU: the counts differ a little."""
    flops, _, measured = _measured_on_cpu(model, "full")
    predicted = _predicted(model, "full")
    assert predicted.flops == pytest.approx(flops, rel=0.01)
    assert predicted.profile.activation_bytes == pytest.approx(measured.activation_bytes, rel=0.05)


@pytest.mark.parametrize("model", ["vit_s", "tinyvit", "vim_s", "mambavision_t"])
def test_qlora_weights_are_predicted_to_the_byte(model):
    """4-bit NF4 storage with double quantisation, by bitsandbytes' layout, against the quantised model itself."""
    _, params, _ = _measured_on_cpu(model, "qlora")
    assert _predicted(model, "qlora").profile.parameter_bytes == params


def _plan(strategy: str, method: str = "full", **config) -> object:
    cell = Cell("vit_s", "adamw", strategy, method, "cifar100", grid="peft")
    return forecast_cell(cell, RunConfig(profile="tiny", **config), H200)


def test_checkpointing_trades_memory_for_a_second_forward():
    standard, checkpoint = _plan("standard"), _plan("checkpoint")
    measured = _predicted("vit_s", "full")
    assert standard.step_flops == measured.flops and standard.checkpointed == (0, 4)
    assert checkpoint.step_flops == measured.flops + measured.forward_flops and checkpoint.checkpointed == (4, 4)
    assert checkpoint.predicted_peak < standard.predicted_peak
    assert checkpoint.seconds > standard.seconds > 0


def test_the_budget_plan_is_the_cells_and_an_unreachable_budget_is_oom():
    fitted = _plan("budget", memory_budget=8 * 2**20)
    assert fitted.status == "ready" and 0 < fitted.checkpointed[0] <= 4 and fitted.predicted_peak <= 0.9 * 8 * 2**20
    refused = _plan("budget", memory_budget=2**20)
    assert refused.status.startswith("oom: every block checkpointed still needs")
    assert "(the 0.00 GiB budget less its 10% margin)" in refused.status


def test_a_strategy_over_the_memory_budget_is_oom_and_a_skipped_cell_says_why():
    assert _plan("standard", memory_budget=2**20).status.startswith("oom: ")
    skipped = forecast_cell(Cell("llm", "adamw", "standard", "bitfit", grid="peft"), RunConfig(profile="tiny"), H200)
    assert skipped.status == ("skipped: BitFit (biases only) trains only bias terms and Llama-3.2-1B-style decoder "
                              "has none")


def test_time_is_every_step_and_evaluation_over_peak_times_mfu():
    plan, measured = _plan("standard"), _predicted("vit_s", "full")
    hp = hparams_for("vit_s", "tiny", dataset="cifar100")
    steps = hp.epochs * hp.train_samples // hp.batch_size
    evaluation = (hp.epochs + 1) * hp.heldout_samples * measured.forward_flops / hp.batch_size
    assert plan.seconds == pytest.approx((steps * measured.flops + evaluation) / (989.4e12 * 0.3))


def test_the_forecast_reads_the_cells_plan_as_the_runner_makes_it():
    """The sizes are the plan's (gradeff.cell.plan.plan_cell), overrides included: a session that caps the training
    samples trains fewer steps, and the estimate says so."""
    hp = hparams_for("vit_s", "tiny", dataset="cifar100")
    full, capped = _plan("standard"), _plan("standard", train_samples=hp.train_samples // 2)
    measured = _predicted("vit_s", "full")
    evaluation = (hp.epochs + 1) * hp.heldout_samples * measured.forward_flops / hp.batch_size
    steps = hp.epochs * (hp.train_samples // 2) // hp.batch_size
    assert capped.seconds == pytest.approx((steps * measured.flops + evaluation) / (989.4e12 * 0.3))
    assert capped.seconds < full.seconds


def test_a_named_device_takes_its_memory_and_peak_from_the_tables():
    target = target_for("H200", "cpu", precision="bf16", peak_tflops=None, mfu=0.3)
    assert (target.memory_bytes, target.peak_flops) == (dict(DEVICE_MEMORY)["H200"], 989.4e12)
    assert target_for("h100", "cpu", precision="fp32", peak_tflops=None, mfu=0.3).peak_flops == pytest.approx(66.9e12)
    unknown = target_for("TPU v9", "cpu", precision="fp32", peak_tflops=None, mfu=0.3)
    assert unknown.memory_bytes is None and unknown.peak_flops is None
    assert target_for("TPU v9", "cpu", precision="fp32", peak_tflops=100.0, mfu=0.3).peak_flops == pytest.approx(100e12)


def test_without_a_peak_the_table_says_how_to_get_a_time():
    cpu = Target(name="cpu", memory_bytes=2**34, peak_flops=None, peak_source=None, mfu=0.3, precision="fp32")
    plan = forecast_cell(Cell("vit_s", "adamw", "standard", "lora", "cifar100", grid="peft"), RunConfig(profile="tiny"),
                     cpu)
    lines = dry_run_lines([plan], cpu, profile="tiny")
    assert plan.seconds is None and "give --gradeff-peak-tflops for a time estimate" in lines[0]
    assert "  n/a  ready; suite pretraining (stand-in)" in lines[2]


def test_a_dry_run_trains_nothing_and_prints_every_selected_cell(grid_pytester, tmp_path):
    results, plan = tmp_path / "r.jsonl", tmp_path / "plan.json"
    outcome = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "-m", "peft and vim_s",
                                      "-k", "cifar100 and lora and not adalora and not qlora", "--gradeff-dry-run=H200",
                                      f"--gradeff-results={results}", f"--gradeff-cache={tmp_path / 'empty-cache'}",
                                      f"--gradeff-dry-run-json={plan}")
    assert outcome.ret == pytest.ExitCode.OK and not results.exists()
    # At tiny the budget lies halfway between the cell's own extremes: one of Vim-S's two blocks, as the cell plans.
    outcome.stdout.fnmatch_lines([
        "gradeff dry run: 3 cells, profile tiny, on H200 (140.4 GiB; peak 66.9 TFLOP/s at fp32 (table: H200 fp32), "
        "assumed MFU 0.3)",
        "vim_s-lora-standard-cifar100 * MFLOP * MiB    0/2 * ms  ready; suite pretraining (stand-in), *; "
        "cifar100: synthetic stand-in",
        "vim_s-lora-checkpoint-cifar100 * 2/2 *", "vim_s-lora-budget-cifar100 * 1/2 * ready; *",
        "3 ready, 0 over memory, 0 skipped, 0 not built; estimated time of the ready cells: * ms (one seed)",
        "vim_s: no --gradeff-weights and no cached pretraining: the suite pretrains it first (estimated *",
    ])
    # --gradeff-dry-run-json: the same plans as data, what gradeff launch splits and sizes its shards by.
    document = json.loads(plan.read_text())
    assert (document["format"], document["profile"], document["target"]["name"]) == ("gradeff-dry-run/1", "tiny",
                                                                                     "H200")
    cells = ["vim_s-lora-standard-cifar100", "vim_s-lora-checkpoint-cifar100", "vim_s-lora-budget-cifar100"]
    assert sorted(document["cells"]) == sorted(cells)
    assert sorted((test["cell"], test["seed"]) for test in document["tests"]) == sorted((cell, 0) for cell in cells)
    standard = document["cells"]["vim_s-lora-standard-cifar100"]
    assert (standard["model"], standard["method"], standard["dataset"], standard["status"]) == (
        "vim_s", "lora", "cifar100", "ready")
    assert standard["seconds"] > 0 and standard["predicted_peak_bytes"] > 0 and standard["pretrains"]
    assert document["cells"]["vim_s-lora-budget-cifar100"]["status"] == "ready"
    assert document["pretraining"]["vim_s"] > 0
    # An absolute budget below what every block checkpointed needs: the budget cell is refused, and so is every
    # cell whose predicted peak exceeds it.
    tight = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", "-m", "peft and vim_s",
                                    "-k", "cifar100 and lora and not adalora and not qlora", "--gradeff-dry-run=H200",
                                    "--gradeff-memory-budget=8MiB", f"--gradeff-cache={tmp_path / 'empty-cache'}")
    tight.stdout.fnmatch_lines(["vim_s-lora-checkpoint-cifar100 * oom: *",
                                "vim_s-lora-budget-cifar100 * oom: every block checkpointed *",
                                "0 ready, 3 over memory, 0 skipped, 0 not built*"])



def test_the_plan_document_names_each_test_once_per_seed():
    cell = Cell(grid="peft", model="vim_s", optimizer="adamw", strategy="standard", method="lora", dataset="cifar100")
    plan = CellForecast(cell=cell.id, status="ready", seconds=2.0, predicted_peak=2**20, step_flops=1e9)
    tests = [(f"g.py::test_cell[{cell.id}-seed{seed}]", cell, seed) for seed in (0, 1)] + [("g.py::test_own", None, 0)]
    document = plan_document(tests, [plan], H200, profile="tiny", pretraining={})
    assert [(t["cell"], t["seed"]) for t in document["tests"]] == [(cell.id, 0), (cell.id, 1), (None, 0)]
    assert document["cells"] == {cell.id: {"grid": "peft", "model": "vim_s", "optimizer": "adamw",
                                           "strategy": "standard", "method": "lora", "dataset": "cifar100",
                                           "status": "ready", "seconds": 2.0, "predicted_peak_bytes": 2**20,
                                           "step_flops": 1e9, "pretrains": False}}


def test_a_dry_run_json_without_the_dry_run_is_refused(grid_pytester, tmp_path):
    outcome = grid_pytester.runpytest("-p", "gradeff.pytest_plugin", f"--gradeff-dry-run-json={tmp_path / 'p.json'}")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--gradeff-dry-run-json: given without --gradeff-dry-run, whose plans it writes"])
