"""run_cell: every outcome of a cell becomes a record with the right status."""

import pytest
import torch

import gradeff.runner as runner
from gradeff.devices import resolve_device
from gradeff.grid import Cell
from gradeff.runner import RunConfig, run_cell

CONFIG = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="test")


def test_ok_cell_records_its_epochs():
    """A tiny cell ends ok with one epoch, its floor, hyper-parameters and environment."""
    record = run_cell(Cell("llm", "adam", "accum"), CONFIG)
    assert record.status == "ok", record.detail
    assert len(record.epochs) == 1 and record.epochs[0].optimizer_steps == 2
    assert record.loss_floor is not None and record.hparams["accum_steps"] == 4
    assert record.environment["torch"] == torch.__version__ and record.session == "test"


def _patched_builder(monkeypatch, wrap):
    original = runner.build_model

    def build(*args, **kwargs):
        return wrap(original(*args, **kwargs))

    monkeypatch.setattr(runner, "build_model", build)


def test_out_of_memory_in_forward_is_an_oom_record(monkeypatch):
    """A CUDA OOM raised from inside a forward on step 3 ends the cell as oom at step 3."""
    calls = {"n": 0}

    def wrap(model):
        forward = model.forward

        def failing_forward(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 4:  # 1 warm-up pass + 2 good steps, then the third step fails
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return forward(*args, **kwargs)

        model.forward = failing_forward
        return model

    _patched_builder(monkeypatch, wrap)
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
    monkeypatch.setattr(runner, "incompatibility", lambda *specs: "no checkpointing here")
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

    import gradeff.grid as grid
    from gradeff.models import MODELS
    from gradeff.optim import OPTIMIZERS
    from gradeff.strategies import STRATEGIES

    needy = dataclasses.replace(MODELS["llm"], requires=(("gradeff_absent_package", "peft"),))
    reason = grid.incompatibility(needy, OPTIMIZERS["adam"], STRATEGIES["standard"])
    assert reason == ("Llama-3.2-1B-style decoder needs the 'gradeff_absent_package' package: "
                      "pip install 'gradeff[peft]'")
    present = dataclasses.replace(MODELS["llm"], requires=(("torch", "torch"),))
    assert grid.incompatibility(present, OPTIMIZERS["adam"], STRATEGIES["standard"]) is None
    # The runner's own registry lookup sees the needy spec: the real capability check decides.
    monkeypatch.setattr(runner, "MODELS", {**MODELS, "llm": needy})
    record = run_cell(Cell("llm", "adam", "standard"), CONFIG)
    assert record.status == "skipped" and "pip install 'gradeff[peft]'" in record.detail
