"""The training loop: one step path, accumulation's bookkeeping, divergence, warm-up."""

import dataclasses
import types

import pytest
import torch

import gradeff.cell.loop as loop
from gradeff.axes.data import make_dataset
from gradeff.axes.models import build_model
from gradeff.axes.optim import build_optimizer
from gradeff.cell.loop import GPU_CHECK_EVERY, Diverged, Pause, TrainState, train, train_epoch
from gradeff.studies.hparams import hparams_for


def _state(k: int, optimizer: str = "sgd", lr: float = 1e-3, model: str = "llm", **optimizer_overrides) -> TrainState:
    # The loop's laws on a small fixed epoch (8 steps of 8), whatever the profile's sizes are.
    hp = dataclasses.replace(hparams_for(model, "tiny"), batch_size=8, train_samples=64)
    torch.manual_seed(0)
    net = build_model(model, "tiny", num_labels=hp.num_classes)
    return TrainState(model=net, optimizer=build_optimizer(optimizer, net.parameters(), lr, **optimizer_overrides),
                      dataset=make_dataset("causal_lm" if model == "llm" else "image_classification", hp, 0),
                      batch_size=hp.batch_size, micro_batches_per_step=k, seed=0, device=torch.device("cpu"))


def test_accumulation_takes_k_times_fewer_steps_on_the_same_samples():
    """k = 4: a quarter of the optimizer steps, the same samples and targets per epoch."""
    standard, accum = train_epoch(_state(1)), train_epoch(_state(4))
    assert standard.optimizer_steps == 4 * accum.optimizer_steps == 8
    assert standard.samples == accum.samples == 64
    assert standard.targets == accum.targets == 64 * 31
    assert standard.closure_calls == standard.optimizer_steps


def test_epoch_loss_is_the_mean_over_all_targets_whatever_the_grouping():
    """With a vanishing step the epoch loss is the same per-target mean for k = 1 and k = 4."""
    standard = train_epoch(_state(1, lr=1e-30))
    accum = train_epoch(_state(4, lr=1e-30))
    assert standard.loss == pytest.approx(accum.loss, rel=1e-5)


def test_every_optimizer_goes_through_the_closure():
    """CG with an exact search evaluates the closure twice per step; the loop counts every call."""
    stats = train_epoch(_state(1, optimizer="cgd", line_search="exact"))
    assert stats.closure_calls == 2 * stats.optimizer_steps == 16


def test_nan_loss_raises_diverged_with_the_step():
    """A NaN weight makes the first step's loss NaN: Diverged names step 1."""
    state = _state(1)
    with torch.no_grad():
        next(state.model.parameters()).fill_(float("nan"))
    with pytest.raises(Diverged) as info:
        train_epoch(state)
    assert info.value.step == 1 and info.value.epoch == 0


def _poison_after(state: TrainState, step_index: int) -> None:
    """Make every loss from optimizer step ``step_index + 2`` (1-based) on NaN."""
    def after_step(index):
        if index == step_index:
            with torch.no_grad():
                next(state.model.parameters()).fill_(float("nan"))
    state.after_step = after_step


@pytest.mark.parametrize("every", [1, 3, 4, 100])
def test_a_late_check_still_names_the_first_failing_step(every):
    """Losses read every N steps: the loop runs on to the check, and Diverged names step 3, where it began."""
    state = _state(1)
    state.check_every = every
    _poison_after(state, 1)
    with pytest.raises(Diverged) as info:
        train_epoch(state)
    assert info.value.step == 3 and info.value.epoch == 0
    assert info.value.loss != info.value.loss  # NaN
    # The check comes at the first multiple of N from step 3 on, or at the epoch's end (8 steps).
    assert state.global_step == min(max(3, -(-3 // every) * every), 8)


def test_losses_are_read_once_per_n_steps_and_at_the_epochs_end(monkeypatch):
    """8 steps read every 3: after steps 3 and 6 and at the end; every step by default on the CPU."""
    import gradeff.cell.loop as loop

    reads = []
    check = loop._check_finite
    monkeypatch.setattr(loop, "_check_finite",
                        lambda pending, epoch: (reads.append(len(pending)), check(pending, epoch)))
    state = _state(1)
    state.check_every = 3
    stats = train_epoch(state)
    assert [n for n in reads if n] == [3, 3, 2]
    reads.clear()
    assert train_epoch(_state(1)).loss == stats.loss  # when the losses are read changes nothing they sum to
    assert [n for n in reads if n] == [1] * 8


def test_the_gpu_defers_its_checks_and_the_cpu_does_not():
    state = _state(1)
    assert state.divergence_check_every == 1
    state.device = torch.device("cuda")
    assert state.divergence_check_every == GPU_CHECK_EVERY > 1
    state.check_every = 5
    assert state.divergence_check_every == 5


def test_training_lowers_the_loss():
    """Adam on the tiny LLM: the third epoch's loss is below the first's."""
    history = train(_state(1, optimizer="adam", lr=3e-3), epochs=3)
    assert [h.epoch for h in history] == [0, 1, 2]
    assert history[-1].loss < history[0].loss


def test_warmup_scheduler_ramps_the_learning_rate():
    """With warm-up, the learning rate grows linearly to its target over the warm-up steps."""
    from gradeff.cell.build import _warmup_scheduler

    hp = hparams_for("llm", "paper")
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=hp.lr)
    scheduler = _warmup_scheduler(optimizer, hp, total_steps=100)  # 3 warm-up steps
    rates = []
    for _ in range(5):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([hp.lr / 3, 2 * hp.lr / 3, hp.lr, hp.lr, hp.lr])


def test_a_pause_runs_every_k_steps_outside_the_epochs_clock(monkeypatch):
    """Pauses come after every 3rd optimizer step of the cell (not after an epoch's last step), are handed the
    epoch's training seconds so far, and their own time is left out of the epoch's seconds (a fake clock: each
    step takes 1 s, each pause 100 s)."""
    state = _state(1)  # 8 steps an epoch
    clock = types.SimpleNamespace(now=0.0)
    step = loop.optimizer_step

    def timed_step(state, group, batches=None):
        clock.now += 1.0
        return step(state, group, batches)

    calls = []

    def pause(elapsed):
        calls.append((state.global_step, elapsed))
        clock.now += 100.0

    monkeypatch.setattr(loop, "optimizer_step", timed_step)
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    state.pause = Pause(every=3, run=pause)
    epochs = [train_epoch(state), train_epoch(state)]
    assert calls == [(3, 3.0), (6, 6.0), (9, 1.0), (12, 4.0), (15, 7.0)]
    assert [e.seconds for e in epochs] == [8.0, 8.0]
    with pytest.raises(ValueError, match=">= 1"):
        Pause(every=0, run=pause)
