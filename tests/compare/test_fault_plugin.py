"""The fault plugin injects what it says, and only there."""

import pytest
import torch

import gradeff.runner as runner
import gradeff.strategies.prepare as prepare
from gradeff.grid import Cell
from gradeff.hparams import hparams_for
from tests.compare.fault_plugin import inject

CONFIG = runner.RunConfig(epochs=1, device="cpu", threads=1)


@pytest.fixture(autouse=True)
def restored(monkeypatch):
    """Every patch the plugin makes is undone after the test."""
    for module, name in ((runner, "build_optimizer"), (runner, "prepare_state"), (prepare, "enable_checkpointing")):
        monkeypatch.setattr(module, name, getattr(module, name))


def _state(optimizer: str, strategy: str):
    cell = Cell("llm", optimizer, strategy)
    return runner.prepare_state(cell, CONFIG, hparams_for("llm", "tiny", epochs=1), torch.device("cpu"))


def test_lr_raises_adams_rate_by_one_percent_only():
    inject("lr")
    lr = hparams_for("llm", "tiny").lr
    assert _state("adam", "standard").optimizer.param_groups[0]["lr"] == pytest.approx(lr * 1.01)
    assert _state("sgd", "standard").optimizer.param_groups[0]["lr"] == pytest.approx(lr)


def test_accum_sums_the_micro_batches_gradients():
    """k micro-batches per step: every gradient is k times the right one; a cell without accumulation is untouched."""
    def gradient(strategy: str) -> torch.Tensor:
        torch.manual_seed(0)
        state = _state("sgd", strategy)
        batch = state.dataset.batch(torch.arange(2))
        state.model(**batch).loss.backward()
        return next(p.grad for p in state.model.parameters() if p.grad is not None)

    right = {strategy: gradient(strategy) for strategy in ("standard", "accum")}
    inject("accum")
    assert torch.allclose(gradient("accum"), right["accum"] * 4)
    assert torch.equal(gradient("standard"), right["standard"])


def test_checkpoint_switches_checkpointing_off():
    """What the checkpoint strategy's preparation calls leaves the model without checkpointing."""
    right = _state("sgd", "checkpoint").model
    prepare.enable_checkpointing(right)
    inject("checkpoint")
    faulty = _state("sgd", "checkpoint").model
    prepare.enable_checkpointing(faulty)
    assert right.is_gradient_checkpointing and not faulty.is_gradient_checkpointing


def test_an_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="GRADEFF_FAULT must be one of lr, accum, checkpoint, got 'speed'"):
        inject("speed")
