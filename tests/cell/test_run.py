"""run_cell: every outcome of a cell becomes a record with the right status."""

import dataclasses

import pytest
import torch

import gradeff.cell.build as build
import gradeff.cell.run as runner
from gradeff.axes.strategies import STRATEGIES
from gradeff.cell.arithmetic import cell_arithmetic
from gradeff.cell.config import RunConfig
from gradeff.cell.devices import resolve_device
from gradeff.cell.plan import cannot_run, cell_data, plan_cell, task_dataset
from gradeff.cell.run import run_cell
from gradeff.studies.grid import Cell
from gradeff.studies.hparams import hparams_for

CONFIG = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="test")


def test_ok_cell_records_its_epochs():
    """A tiny cell ends ok with one epoch, its floor, hyper-parameters and environment."""
    record = run_cell(Cell("llm", "adam", "accum"), CONFIG)
    assert record.status == "ok", record.detail
    hp = hparams_for("llm", "tiny")
    assert len(record.epochs) == 1 and record.epochs[0].optimizer_steps == hp.train_samples // (hp.batch_size * 4)
    assert record.loss_floor is not None and record.hparams["accum_steps"] == 4
    assert record.environment["torch"] == torch.__version__ and record.session == "test"


@pytest.mark.slow
def test_model_flops_leave_out_checkpointing_s_recomputation(monkeypatch):
    """MFU's FLOPs are the model's: the same per sample whether or not the cell recomputes activations.

    On the CPU the table knows no peak, so MFU is not measured unless a peak is given; with one it is
    the achieved rate over it.
    """
    meters = dataclasses.replace(CONFIG.meters, peak_tflops=1e-3)
    monkeypatch.setattr(runner, "_FLOPS_SEEN", {})
    standard = run_cell(Cell("llm", "adam", "standard"), CONFIG).meters["compute"]
    monkeypatch.setattr(runner, "_FLOPS_SEEN", {})  # counted again, on the checkpointed model's cell
    checkpoint = run_cell(Cell("llm", "adam", "checkpoint"), dataclasses.replace(CONFIG, meters=meters))
    compute = checkpoint.meters["compute"]
    assert compute["flops_per_sample"] == standard["flops_per_sample"] > 0
    assert standard["mfu"] is None and standard["peak_flops_per_s"] is None
    assert compute["mfu"] == pytest.approx(compute["achieved_flops_per_s"] / 1e9)
    assert compute["seconds"] == pytest.approx(sum(e.seconds for e in checkpoint.epochs))


def test_flops_are_counted_once_per_model_method_and_data(monkeypatch):
    """Another optimizer or strategy of the same model reuses the count; another model or method counts again."""
    counted = []
    count = runner.count_step_flops
    monkeypatch.setattr(runner, "count_step_flops", lambda model, batch: counted.append(1) or count(model, batch))
    monkeypatch.setattr(runner, "_FLOPS_SEEN", {})
    first = run_cell(Cell("llm", "sgd", "standard"), CONFIG).meters["compute"]
    again = run_cell(Cell("llm", "adam", "accum"), CONFIG).meters["compute"]
    assert len(counted) == 1 and again["flops_per_sample"] == first["flops_per_sample"]
    other = run_cell(Cell("vit", "sgd", "standard"), CONFIG).meters["compute"]
    assert len(counted) == 2 and other["flops_per_sample"] != first["flops_per_sample"]
    run_cell(Cell("llm", "sgd", "standard"), dataclasses.replace(CONFIG, precision="bf16"))
    assert len(counted) == 3


def test_a_step_the_flop_counter_cannot_follow_costs_the_figure_not_the_cell(monkeypatch):
    """The counter's failure is recorded as MFU not measured, with the reason; the cell trains on."""
    def refuse(model, batch):
        raise AssertionError("shapes are incompatible")

    monkeypatch.setattr(runner, "count_step_flops", refuse)
    monkeypatch.setattr(runner, "_FLOPS_SEEN", {})
    record = run_cell(Cell("llm", "sgd", "standard"), CONFIG)
    assert record.status == "ok" and len(record.epochs) == 1
    assert record.meters["compute"] == {"not_measured": "AssertionError: shapes are incompatible"}


def test_a_cell_leaves_subnormal_floats_as_it_found_them():
    """Cells flush subnormals for speed; afterwards the process computes them again (IEEE default)."""
    tiny = torch.tensor([1e-40])
    assert tiny.item() != 0.0
    record = run_cell(Cell("llm", "sgd", "standard"), CONFIG)
    assert record.status == "ok"
    assert torch.tensor([1e-40]).item() != 0.0 and (tiny * 1).item() != 0.0


@pytest.mark.parametrize("strategy", ["offload", "compile_budget100", "compile_budget40"])
def test_a_strategy_that_measures_nothing_on_a_cpu_runs_there_only_when_named(strategy):
    """Offload (host = device) and the compiler's budget (no live peak) are skipped on a CPU with their reason, before
    anything is built, unless the session named them; every other strategy runs."""
    cell = Cell("llm", "adamw", strategy)
    record = run_cell(cell, CONFIG)
    assert record.status == "skipped" and not record.epochs
    assert f"--gradeff-strategies {strategy}" in record.detail
    assert record.detail.endswith(STRATEGIES[strategy].cpu_limitation)
    assert cannot_run(cell, dataclasses.replace(CONFIG, named_strategies=(strategy,))) is None
    assert cannot_run(cell, dataclasses.replace(CONFIG, named_strategies=("budget40",))) is not None
    for other in ("standard", "checkpoint", "accum", "budget40"):
        assert cannot_run(Cell("llm", "adamw", other), CONFIG) is None


def test_only_offload_and_the_compilers_budget_are_limited_on_a_cpu():
    limited = {key for key in STRATEGIES if STRATEGIES[key].cpu_limitation is not None}
    assert limited == {"offload", "compile_budget", "compile_budget100",
                       *(f"compile_budget{percent}" for percent in (80, 60, 40, 20))}


@pytest.mark.parametrize(("strategy", "compile_backend", "compiles"), [
    ("standard", None, False), ("checkpoint", None, False), ("compile_budget40", None, True),
    ("standard", "aot_eager_decomp_partition", True)])
def test_only_a_compiled_cell_lets_torch_compile_compile(strategy, compile_backend, compiles):
    """A library's own torch.compile inside an eager cell runs its function as written (nothing is compiled, the
    result is the same); a compiled cell compiles. The stance is torch's default again after the cell."""
    graphs = []

    def recording_backend(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    library_function = torch.compile(lambda x: x * 2 + 1, backend=recording_backend, dynamic=False)
    config = dataclasses.replace(CONFIG, compile=compile_backend)
    with cell_arithmetic(Cell("llm", "adamw", strategy), config):
        out = library_function(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 3.0))
    assert bool(graphs) is compiles
    graphs.clear()
    torch._dynamo.reset()
    library_function(torch.ones(3))
    assert len(graphs) == 1
    torch._dynamo.reset()


def _patched_builder(monkeypatch, wrap):
    original = build.build_model

    def build_wrapped(*args, **kwargs):
        return wrap(original(*args, **kwargs))

    monkeypatch.setattr(build, "build_model", build_wrapped)


def test_out_of_memory_in_forward_is_an_oom_record(monkeypatch):
    """A CUDA OOM raised from inside a forward on step 3 ends the cell as oom at step 3."""
    calls = {"n": 0}

    def wrap(model):
        forward = model.forward

        def failing_forward(*args, **kwargs):
            # Held-out evaluations run in eval mode and are not steps: count training forwards only.
            calls["n"] += model.training
            # The FLOP count's pass, the warm-up pass and 2 good steps; then the third step fails.
            if model.training and calls["n"] == 5:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return forward(*args, **kwargs)

        model.forward = failing_forward
        return model

    _patched_builder(monkeypatch, wrap)
    monkeypatch.setattr(runner, "_FLOPS_SEEN", {})  # the count's pass runs, whatever ran before
    record = run_cell(Cell("llm", "sgd", "standard"), CONFIG)
    assert record.status == "oom" and record.failed_step == 3
    assert "out of memory" in record.detail


def test_nan_weights_are_a_diverged_record(monkeypatch):
    """A model whose loss is NaN ends diverged at step 1, with the step recorded."""
    def wrap(model):
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        return model

    _patched_builder(monkeypatch, wrap)
    record = run_cell(Cell("vit", "adam", "standard"), CONFIG)
    assert record.status == "diverged" and record.failed_step == 1 and record.epochs == ()


def test_exception_while_building_is_an_error_record(monkeypatch):
    """Any other exception is an error record carrying the message."""
    def wrap(model):
        raise RuntimeError("weights are corrupt")

    _patched_builder(monkeypatch, wrap)
    record = run_cell(Cell("vit", "adam", "standard"), CONFIG)
    assert record.status == "error" and "RuntimeError: weights are corrupt" in record.detail
    assert record.summary.final_loss is None


def test_incompatible_cell_is_a_skipped_record(monkeypatch):
    """A cell the capability check refuses is recorded as skipped with the reason."""
    monkeypatch.setattr("gradeff.cell.plan.incompatibility", lambda *specs: "no checkpointing here")
    record = run_cell(Cell("vit", "adam", "checkpoint"), CONFIG)
    assert record.status == "skipped" and record.detail == "no checkpointing here"


def test_same_seed_gives_the_same_losses():
    """Two runs of one cell on the CPU give identical loss series."""
    a = run_cell(Cell("modernbert", "adamw", "checkpoint"), CONFIG)
    b = run_cell(Cell("modernbert", "adamw", "checkpoint"), CONFIG)
    assert [e.loss for e in a.epochs] == [e.loss for e in b.epochs]


def test_device_resolution():
    """auto picks the CPU here; cuda without a GPU and unknown devices are refused."""
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="valid devices: auto, cpu, cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no usable CUDA"):
            resolve_device("cuda")


def test_missing_optional_dependency_skips_with_the_install_hint(monkeypatch):
    """A model needing a package that is not installed is skipped, naming the pip extra."""
    import dataclasses

    import gradeff.studies.grid as grid
    from gradeff.axes.methods import METHODS
    from gradeff.axes.models import MODELS

    cell = Cell("llm", "adam", "standard")
    needy = dataclasses.replace(MODELS["llm"], requires=(("gradeff_absent_package", "peft"),))
    monkeypatch.setattr(grid, "MODELS", {**MODELS, "llm": needy})
    assert grid.incompatibility(cell) == ("Llama-3.2-1B-style decoder needs the 'gradeff_absent_package' package: "
                                          "pip install 'gradeff[peft]'")
    # The runner asks the same capability check: the cell is recorded as skipped with the hint.
    record = run_cell(cell, CONFIG)
    assert record.status == "skipped" and "pip install 'gradeff[peft]'" in record.detail
    present = dataclasses.replace(MODELS["llm"], requires=(("torch", "torch"),))
    monkeypatch.setattr(grid, "MODELS", {**MODELS, "llm": present})
    assert grid.incompatibility(cell) is None
    # A method's own requirement is named with the method.
    needy_method = dataclasses.replace(METHODS["lora"], requires=(("gradeff_absent_package", "peft"),))
    monkeypatch.setattr(grid, "METHODS", {**METHODS, "lora": needy_method})
    assert grid.incompatibility(Cell("llm", "adam", "standard", "lora")).startswith("LoRA needs")


@pytest.mark.slow
def test_fine_tuning_cell_records_method_dataset_and_heldout_accuracy(tmp_path, monkeypatch):
    """A PEFT cell starts from the cached pretraining and records held-out accuracy after every epoch."""
    from gradeff.studies import hparams

    monkeypatch.setitem(hparams.PRETRAIN_HPARAMS, "tiny", hparams.PretrainHParams(
        num_classes=8, train_samples=64, heldout_samples=32, epochs=1, batch_size=32, lr=1e-3))
    config = RunConfig(profile="tiny", seed=0, epochs=2, device="cpu", session="test", cache_dir=str(tmp_path))
    record = run_cell(Cell("vit_s", "adamw", "standard", "lora", "dtd", grid="peft"), config)
    assert record.status == "ok", record.detail
    assert (record.cell, record.method, record.dataset) == ("vit_s-lora-standard-dtd", "lora", "dtd")
    assert all(e.heldout_accuracy is not None and 0 <= e.heldout_accuracy <= 1 for e in record.epochs)
    assert len(record.epochs) == 2 and record.summary.final_heldout_accuracy == record.epochs[-1].heldout_accuracy
    assert record.task["heldout_samples"] == 256 and 0 < record.task["bayes_accuracy"] <= 1
    assert 0 <= record.task["sanity_accuracy"] < record.task["bayes_accuracy"]  # the raw-pixel 1-NN, same split
    assert 0 < record.parameters["trainable"] < record.parameters["total"]
    assert record.weights["source"] == "pretrained" and record.weights["pretraining"]["optimizer_steps"] == 2
    assert record.hparams["method"]["lora_r"] == 8 and record.hparams["num_classes"] == 47
    # The trained classifier's cost of use, measured on the held-out split, with the NetScore family.
    inference = record.inference
    assert inference["throughput_images"] == 256 and inference["macs_per_image"] > 0
    assert inference["parameters"] == record.parameters["total"]
    assert set(inference["scores"]) == {"netscore", "ns_e", "ns_m", "ns_sharp"}
    assert inference["scores"]["ns_m"]["value"] is not None


def test_bitfit_on_a_bias_free_model_is_skipped_with_the_reason():
    """BitFit on Llama (no biases) is skipped before anything is built, never silently changed."""
    record = run_cell(Cell("llm", "adam", "standard", "bitfit"), CONFIG)
    assert record.status == "skipped" and "has none" in record.detail and record.cell == "llm-adam-standard-bitfit"


def test_a_method_that_trains_nothing_is_evaluated_once():
    """A zero-shot baseline: no optimizer, no epochs; its held-out evaluation is the summary, with its inference
    cost."""
    record = run_cell(Cell("clip", "adamw", "standard", "zero_shot", "dtd", grid="baselines"), CONFIG)
    assert record.status == "ok", record.detail
    assert record.epochs == () and record.summary.optimizer_steps == 0 and record.summary.mean_epoch_seconds is None
    assert 0 <= record.summary.final_heldout_accuracy <= 1 and record.summary.final_heldout_loss > 0
    assert record.parameters["trainable"] == 0 and record.inference["throughput_images"] == 256
    assert record.inference["scores"]["netscore"]["value"] is not None or record.summary.final_heldout_accuracy == 0


@pytest.mark.slow
def test_tuning_keeps_the_rate_with_the_best_validation_loss():
    """--gradeff-tune lr: every rate of the grid and the protocol's own is tried on the validation split; the
    record is a fresh run at the best, whose test figures no trial saw."""
    config = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="t", tune="lr", tune_points=3,
                       protocol="shared")
    record = run_cell(Cell("llm", "sgd", "standard"), config)
    tuning = record.tuning
    rates = [trial["lr"] for trial in tuning["trials"]]
    assert rates == pytest.approx([1e-3, 0.01, 0.1, 1.0]) and tuning["reference"] == 1e-3
    # The largest rate may diverge (whether lr=1.0 does here depends on the CPU's float rounding): a trial that did
    # not end ok has no validation loss and cannot be chosen.
    scored = [trial for trial in tuning["trials"] if trial["status"] == "ok"]
    assert all(trial["validation_loss"] is None for trial in tuning["trials"] if trial["status"] != "ok")
    assert len(scored) >= 3
    best = min(scored, key=lambda t: t["validation_loss"])
    assert tuning["chosen"] == best["lr"] == record.hparams["lr"]
    assert tuning["at_edge"] == ("low" if best["lr"] == rates[0] else "high" if best["lr"] == rates[-1] else None)
    # The record is a full run at the chosen rate: deterministic on CPU, so it repeats the trial's validation loss.
    assert record.summary.final_validation_loss == pytest.approx(best["validation_loss"], rel=1e-6)
    assert "heldout_loss" not in best and record.summary.final_heldout_loss is not None
    assert tuning["seconds"] > 0 and tuning["budget"] == {"trials": 4, "epochs": 1, "seeds": [0]}
    assert record.hparams["lr_source"].startswith("live search")


def test_a_search_never_reads_the_test_split(monkeypatch):
    """While the trials run, not one sample of the test split is read (only the validation split's); the run
    reported after the search reads it. Fails if any trial evaluates, measures or otherwise batches the test set."""
    import gradeff.cell.run as runner
    from gradeff.axes.data.dataset import Dataset

    phase = {"trial": False}
    reads = []
    run_once, batch = runner._run_once, Dataset.batch

    def tracked_run_once(plan, **kwargs):
        phase["trial"] = plan.config.trial
        return run_once(plan, **kwargs)

    def tracked_batch(self, indices):
        reads.append((phase["trial"], id(self)))
        return batch(self, indices)

    monkeypatch.setattr(runner, "_run_once", tracked_run_once)
    monkeypatch.setattr(Dataset, "batch", tracked_batch)
    config = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="t", tune="lr", tune_points=2)
    record = run_cell(Cell("vit", "adam", "standard"), config)  # classification: the inference cost reads splits too
    assert record.status == "ok" and len(record.tuning["trials"]) >= 2
    data = task_dataset("image_classification", hparams_for("vit", "tiny", epochs=1), 0)
    test, validation = id(data.heldout), id(data.validation)
    assert not any(trial and split == test for trial, split in reads), "a trial read the test split"
    assert any(trial and split == validation for trial, split in reads)
    assert any(not trial and split == test for trial, split in reads)


def test_a_tuning_free_optimizer_is_not_searched():
    """CG's line search sizes its steps: --gradeff-tune records why there is nothing to tune and runs it once."""
    config = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="t", tune="lr", tune_points=3)
    record = run_cell(Cell("llm", "cgd", "standard"), config)
    assert record.status == "ok" and record.tuning["trials"] == [] and record.tuning["param"] is None
    assert "line search" in record.tuning["tuning_free"]


@pytest.mark.slow
def test_an_isolated_cell_runs_in_a_process_of_its_own():
    """--gradeff-isolate: the record comes back whole from a spawned process and says so; RSS is measured there."""
    import os

    config = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="t", isolate=True)
    record = run_cell(Cell("llm", "adam", "standard"), config)
    assert record.status == "ok" and record.environment["process"] == "isolated"
    assert record.meters["ram"]["peak_rss_bytes"] > 0
    shared = run_cell(Cell("llm", "adam", "standard"), CONFIG)
    assert shared.environment["process"] == "shared" and os.getpid() > 0
    assert [e.loss for e in record.epochs] == [e.loss for e in shared.epochs]  # the same training, elsewhere


@pytest.mark.slow
def test_fused_kernels_are_recorded_and_keep_checkpointing_exact():
    """--gradeff-fused: the record names the kernel that ran; checkpointing still changes nothing but memory, so a
    checkpointed cell's losses equal the standard one's to the last bit, as without it."""
    fused = dataclasses.replace(CONFIG, fused=True)
    standard = run_cell(Cell("llm", "adam", "standard"), fused)
    checkpoint = run_cell(Cell("llm", "adam", "checkpoint"), fused)
    assert standard.status == checkpoint.status == "ok"
    assert standard.hparams["optimizer_kernel"] == checkpoint.hparams["optimizer_kernel"] == "fused"
    assert [e.loss for e in standard.epochs] == [e.loss for e in checkpoint.epochs]
    assert run_cell(Cell("llm", "cgd", "standard"), fused).hparams["optimizer_kernel"] == "default"
    assert run_cell(Cell("llm", "adam", "standard"), CONFIG).hparams["optimizer_kernel"] == "default"


@pytest.mark.slow
def test_compiled_cells_keep_the_laws_and_record_their_compile():
    """--gradeff-compile: every strategy trains through torch.compile, the compile is recorded in the plan and
    happens before the epochs; checkpointed, accumulated and plain compiled losses are the eager ones' within
    float rounding, and the optimizer state is the eager one's (aot_eager_decomp_partition: the quickest backend
    to compile). A checkpointed block is compiled as a graph of its own, so its sums may round differently: the
    eager law's last bit does not carry over."""
    from torch._dynamo.utils import counters

    compiled_in_epochs = []

    def timer(epoch_fn, rounds, after_epoch):
        # Graphs dynamo compiles while the timed epochs run: none, if the compile happened in the warm-up.
        before = counters["stats"]["unique_graphs"]
        for _ in range(rounds):
            epoch_fn()
            after_epoch()
        compiled_in_epochs.append(counters["stats"]["unique_graphs"] - before)

    compiled = dataclasses.replace(CONFIG, compile="aot_eager_decomp_partition")
    eager = {s: run_cell(Cell("llm", "adamw", s), CONFIG) for s in ("standard", "accum")}
    counters.clear()
    runs = {s: run_cell(Cell("llm", "adamw", s), compiled, timer=timer) for s in ("standard", "checkpoint", "accum")}
    assert all(r.status == "ok" for r in runs.values()), [r.detail for r in runs.values()]
    assert counters["stats"]["unique_graphs"] > 0 and compiled_in_epochs == [0, 0, 0]
    for record in runs.values():
        assert record.plan["compile_backend"] == "aot_eager_decomp_partition" and record.plan["compile_seconds"] > 0
    assert [e.loss for e in runs["checkpoint"].epochs] == pytest.approx([e.loss for e in runs["standard"].epochs],
                                                                        rel=1e-6)
    for strategy, record in eager.items():
        assert [e.loss for e in runs[strategy].epochs] == pytest.approx([e.loss for e in record.epochs], rel=1e-6)
        assert runs[strategy].meters["memory"]["optimizer_state_bytes"] == \
            record.meters["memory"]["optimizer_state_bytes"]
    assert "compile_backend" not in eager["standard"].plan


@pytest.mark.slow
def test_dataloader_workers_feed_the_same_samples_in_the_same_order():
    """--gradeff-workers 2: micro-batches gathered ahead by DataLoader workers give the in-process gather's numbers
    to the last bit, a line search's repeated closure calls and accumulation's micro-batches included, and the wait
    for them is recorded."""
    cell = Cell("llm", "cgd", "accum")
    own = run_cell(cell, dataclasses.replace(CONFIG, epochs=2))
    workers = run_cell(cell, dataclasses.replace(CONFIG, epochs=2, workers=2))
    assert own.status == workers.status == "ok", workers.detail
    assert [e.loss for e in workers.epochs] == [e.loss for e in own.epochs]
    assert workers.summary.final_heldout_loss == own.summary.final_heldout_loss
    assert [e.closure_calls for e in workers.epochs] == [e.closure_calls for e in own.epochs]
    assert all(e.data_seconds > 0 for e in workers.epochs)


def test_a_prebuilt_cell_resolves_its_data_once_and_records_the_same_as_a_cell_built_by_the_runner(monkeypatch):
    """The fixtures' path (build_cell, then run_cell with the build) asks for the cell's data once, at the build, and
    trains and records exactly what the runner's own build would."""
    calls = []

    def counted(plan):
        calls.append(plan.cell.id)
        return cell_data(plan)

    cell = Cell("llm", "adam", "standard")
    own = run_cell(cell, CONFIG)
    # Both the build and the run look the data up: only the build may.
    monkeypatch.setattr(build, "cell_data", counted)
    monkeypatch.setattr(runner, "cell_data", counted)
    plan = plan_cell(cell, CONFIG)
    built = build.build_cell(plan)
    record = runner.run_plan(plan, built=built)
    assert calls == [cell.id] and built.plan == plan
    assert record.status == own.status == "ok" and record.hparams == own.hparams
    assert [e.loss for e in record.epochs] == [e.loss for e in own.epochs]


def test_the_runner_trains_the_plan_it_is_given_without_resolving_it_again(monkeypatch):
    """run_plan reads the plan's settings and skip reason; it never plans the cell anew (the fixtures' plan is the
    one trained). A plan with a rate of its own trains at that rate; a plan that says skip is skipped with its
    reason, though the cell itself could run."""
    import gradeff.cell.plan as planning

    cell = Cell("llm", "adam", "standard")
    plan = plan_cell(cell, CONFIG)
    own_rate = plan.sized(dataclasses.replace(plan.hp, lr=plan.hp.lr / 7))
    resolved = []
    settings = planning._settings
    monkeypatch.setattr(planning, "_settings", lambda *args: resolved.append(args) or settings(*args))
    record = runner.run_plan(own_rate)
    assert record.status == "ok" and record.hparams["lr"] == plan.hp.lr / 7
    # Only the record's fingerprint plans the cell, as a resumed session would (gradeff.cell.experiment).
    assert len(resolved) == 1
    skipped = runner.run_plan(dataclasses.replace(plan, skip="left out for this test"))
    assert skipped.status == "skipped" and skipped.detail == "left out for this test" and skipped.epochs == ()


def test_a_build_is_trained_only_with_the_plan_it_was_built_from():
    plan = plan_cell(Cell("llm", "adam", "standard"), CONFIG)
    built = build.build_cell(plan)
    with pytest.raises(ValueError, match="built from another plan"):
        runner.run_plan(plan.under(seed=1), built=built)
    assert runner.run_plan(plan, built=built).status == "ok"
