"""The fault plugin injects what it says, and only there."""

import pytest
import torch

import gradeff.axes.strategies.prepare as prepare
import gradeff.cell.build as build
from gradeff.cell.config import RunConfig
from gradeff.cell.plan import plan_cell
from gradeff.studies.grid import Cell
from gradeff.studies.hparams import hparams_for
from tests.gate.fault_plugin import inject

CONFIG = RunConfig(epochs=1, device="cpu", threads=1)


@pytest.fixture(autouse=True)
def restored(monkeypatch):
    """Every patch the plugin makes is undone after the test."""
    for module, name in ((build, "build_optimizer"), (build, "prepare_state"), (prepare, "enable_checkpointing")):
        monkeypatch.setattr(module, name, getattr(module, name))


def _state(optimizer: str, strategy: str):
    cell = Cell("llm", optimizer, strategy)
    plan = plan_cell(cell, CONFIG)
    return build.prepare_state(plan.sized(hparams_for("llm", "tiny", epochs=1)), torch.device("cpu"))


def test_lr_raises_adams_rate_by_one_percent_only():
    inject("lr")
    lr = hparams_for("llm", "tiny").lr
    assert _state("adam", "standard").optimizer.param_groups[0]["lr"] == pytest.approx(lr * 1.01)
    assert _state("sgd", "standard").optimizer.param_groups[0]["lr"] == pytest.approx(lr)


def test_accum_sums_the_micro_batches_gradients():
    """k micro-batches per step: plain SGD's step moves the weights k times as far (it stepped with k times the
    gradient), while the loss the closure returns stays the right one; a cell without accumulation is untouched."""
    def step(strategy: str) -> tuple[float, torch.Tensor]:
        torch.manual_seed(0)
        state = _state("sgd", strategy)
        batch = state.dataset.batch(torch.arange(2))
        before = [p.detach().clone() for p in state.model.parameters()]

        def closure():
            state.optimizer.zero_grad()
            loss = state.model(**batch).loss
            loss.backward()
            return loss

        loss = float(state.optimizer.step(closure))
        moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(state.model.parameters(), before)])
        return loss, moved

    right = {strategy: step(strategy) for strategy in ("standard", "accum")}
    inject("accum")
    loss, moved = step("accum")
    # The weights' float32 rounding blurs each tiny step, not their sum: the step's length is 4 times as long.
    assert loss == right["accum"][0]
    assert float(moved.norm() / right["accum"][1].norm()) == pytest.approx(4, rel=1e-3)
    assert torch.equal(step("standard")[1], right["standard"][1])


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
