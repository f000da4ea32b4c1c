"""The training loop: one epoch at a time, one step path for every optimizer and strategy.

Every optimizer step is ``optimizer.step(closure)``. The closure zeroes the gradients, runs the
step's micro-batches (one, or k under gradient accumulation) and returns the loss. Adam calls it
once; a conjugate-gradient line search may call it several times. Strategies never branch here:
checkpointing was switched on in the model before the loop, accumulation is the number of
micro-batches per step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from gradeff.axes.data import Dataset, epoch_order
from gradeff.cell import stop
from gradeff.meters.untouched import untouched

if TYPE_CHECKING:
    from gradeff.axes.strategies.sharded import Ranks

__all__ = [
    "GPU_CHECK_EVERY", "Diverged", "EpochStats", "Pause", "TrainState", "move_batch", "optimizer_step", "sync", "train",
    "train_epoch", "warm_up",
]


# Optimizer steps a GPU runs ahead between two reads of the losses: the loop's only host synchronisations
# (a line search's own reads of the loss, and fp16's overflow check, are the optimizers' and scaler's).
GPU_CHECK_EVERY = 16


class Diverged(RuntimeError):
    """The loss became NaN or infinite: the cell stops and records where."""

    def __init__(self, *, step: int, epoch: int, loss: float):
        super().__init__(f"loss {loss} at optimizer step {step} (epoch {epoch})")
        self.step, self.epoch, self.loss = step, epoch, loss


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochStats:
    """What one epoch did. ``loss`` is the mean cross-entropy per target (token or image).

    ``data_seconds`` is the part of ``seconds`` spent waiting for data (gathering each micro-batch and
    moving it to the device); the rest is compute.
    """

    epoch: int
    loss: float
    seconds: float
    optimizer_steps: int
    closure_calls: int
    samples: int
    targets: int
    data_seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Pause:
    """Work between optimizer steps that is not training (an evaluation every ``every`` steps).

    The loop stops its clock around it, so an epoch's ``seconds`` are the training's alone; ``run`` receives the
    epoch's training seconds so far. It runs after every ``every``-th optimizer step (counted over the whole
    cell) except an epoch's last, whose work is the epoch end's (:func:`gradeff.cell.run` evaluates there anyway).
    """

    every: int
    run: Callable[[float], object]

    def __post_init__(self):
        if self.every < 1:
            raise ValueError(f"a pause comes every >= 1 optimizer steps, got {self.every}")


@dataclass(kw_only=True)
class TrainState:
    """Everything one cell's training needs, and its progress.

    Attributes:
        micro_batches_per_step: 1, or k for gradient accumulation.
        scheduler: optional learning-rate scheduler, stepped once per optimizer step.
        after_step: called with the index of each optimizer step just taken, while its gradients
            are still there (a fine-tuning method's hook, e.g. AdaLoRA's rank re-allocation).
        scaler: fp16's loss scaler (:func:`gradeff.cell.precision.make_scaler`); ``None`` in fp32 and bf16.
        check_every: optimizer steps between divergence checks (and at every epoch's end); ``None``: every
            step on the CPU, where reading the loss costs nothing, and every :data:`GPU_CHECK_EVERY` steps
            on a GPU, where each read stalls the host until the device has caught up.
        ranks: a sharded cell's process (:class:`gradeff.axes.strategies.sharded.Ranks`): it trains on its
            slice of each micro-batch and the step's loss is summed over the processes; ``None``: one process.
        pause: what runs between steps outside the epoch's clock (:class:`Pause`); ``None``: nothing.
        workers: ``torch.utils.data.DataLoader`` worker processes that gather the epoch's micro-batches ahead of
            the steps (pinned memory on a GPU, two micro-batches per worker in flight); 0: the training process
            gathers each micro-batch when its step needs it. The same samples in the same order either way.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    dataset: Dataset
    batch_size: int
    micro_batches_per_step: int
    seed: int
    device: torch.device
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    after_step: Callable[[int], object] | None = None
    scaler: torch.amp.GradScaler | None = None
    check_every: int | None = None
    ranks: Ranks | None = None
    pause: Pause | None = None
    workers: int = 0
    epoch: int = 0
    global_step: int = 0
    history: list[EpochStats] = field(default_factory=list)
    # Seconds spent getting micro-batches (gather + move to the device) since the epoch began.
    data_seconds: float = 0.0
    # The dataset's targets per sample as Python ints: a step's weights are then sums on the host, not kernels.
    _targets: tuple[Dataset, list[int]] | None = field(default=None, repr=False)

    @property
    def divergence_check_every(self) -> int:
        if self.check_every is not None:
            return self.check_every
        return GPU_CHECK_EVERY if self.device.type == "cuda" else 1

    def targets_of(self, indices: torch.Tensor) -> int:
        """The loss targets of the samples at ``indices`` (summed on the host, from a list read once)."""
        if self._targets is None or self._targets[0] is not self.dataset:
            self._targets = (self.dataset, self.dataset.targets.tolist())
        targets = self._targets[1]
        return sum(targets[i] for i in indices.tolist())

    def step_groups(self, epoch: int) -> list[list[torch.Tensor]]:
        """This epoch's sample indices: micro-batches, grouped by optimizer step."""
        micro = list(epoch_order(len(self.dataset), self.seed, epoch).split(self.batch_size))
        k = self.micro_batches_per_step
        return [micro[i:i + k] for i in range(0, len(micro), k)]


def sync(device: torch.device) -> None:
    """Wait for queued device work, so a clock read after it measures the work itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def move_batch(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch's tensors on ``device`` (asynchronously where the device allows)."""
    return {name: t.to(device, non_blocking=True) for name, t in batch.items()}


class _MicroBatches(torch.utils.data.Dataset):
    """An epoch's micro-batches in step order, each gathered whole: what a DataLoader's workers fetch ahead."""

    def __init__(self, dataset: Dataset, micro: list[torch.Tensor]):
        self.dataset, self.micro = dataset, micro

    def __len__(self) -> int:
        return len(self.micro)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.dataset.batch(self.micro[index])


def _prefetched(state: TrainState, groups: list[list[torch.Tensor]]):
    """An iterator over the epoch's micro-batches (a sharded process's slices), gathered by ``state.workers``
    DataLoader workers; started here, so the workers' start-up is not in the epoch's time."""
    micro = [state.ranks.local(idx) if state.ranks is not None else idx for group in groups for idx in group]
    loader = torch.utils.data.DataLoader(_MicroBatches(state.dataset, micro), batch_size=None, shuffle=False,
                                         num_workers=state.workers, pin_memory=state.device.type == "cuda",
                                         prefetch_factor=2)
    return iter(loader)


def optimizer_step(state: TrainState, group: list[torch.Tensor],
                   batches: list[dict[str, torch.Tensor]] | None = None) -> tuple[torch.Tensor, int, int]:
    """One optimizer step over a group of micro-batches.

    ``batches``: the group's micro-batches already gathered (by DataLoader workers), in order; ``None``: each is
    gathered here when the closure needs it.

    Returns:
        ``(loss, closure calls, targets)``: the step's loss (mean per target, before the update) as a
        0-d tensor on the device (reading it is the caller's choice: it waits for the device), how many
        forward+backward passes over the group the optimizer asked for, and the number of targets in
        the group.
    """
    model, optimizer, data = state.model, state.optimizer, state.dataset
    counts = [state.targets_of(idx) for idx in group]
    total = sum(counts)
    if state.ranks is not None:
        # This process's slices; each loss is still weighted by the whole step's targets.
        group = [state.ranks.local(idx) for idx in group]
        counts = [state.targets_of(idx) for idx in group]
    calls = 0

    def closure():
        nonlocal calls
        calls += 1
        optimizer.zero_grad(set_to_none=True)
        step_loss = None  # the first micro-batch's loss itself: a zero to add it to would cost two kernels a step
        for position, (idx, count) in enumerate(zip(group, counts)):
            # Micro-batches are gathered and moved one at a time: under accumulation only one
            # micro-batch's inputs and activations are alive at once, as with the standard batch.
            waited = time.perf_counter()
            batch = move_batch(data.batch(idx) if batches is None else batches[position], state.device)
            state.data_seconds += time.perf_counter() - waited
            loss = model(**batch).loss
            if count != total:
                # transformers losses are means over a micro-batch's targets; weighting each by its
                # share of the step's targets makes the accumulated gradient the gradient of the
                # mean over all k·b samples' targets, exactly as one large batch would give. (A whole
                # step's micro-batch has weight 1: multiplying by it would change no bit, only cost a kernel.)
                loss = loss * (count / total)
            (loss if state.scaler is None else state.scaler.scale(loss)).backward()
            step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        return step_loss if state.ranks is None else state.ranks.total(step_loss)

    if state.scaler is None:
        loss = optimizer.step(closure)
    else:
        # fp16: backward ran on the scaled loss; the scaler unscales the gradients, skips a step whose
        # gradients overflowed, and adapts the scale. (Line-search optimizers are refused in fp16.)
        loss = closure()
        state.scaler.step(optimizer)
        state.scaler.update()
    if state.after_step is not None:
        state.after_step(state.global_step)
    state.global_step += 1
    return torch.as_tensor(loss, device=state.device).detach(), calls, total


def _check_finite(pending: list[tuple[int, torch.Tensor]], epoch: int) -> None:
    """Raise :class:`Diverged` at the first of the steps ``(global step, loss)`` whose loss is not finite.

    One read of the device for all of them; the failing step is still the one recorded.
    """
    if not pending:
        return
    if len(pending) == 1:
        # The CPU's every-step check: one read of one value, not four kernels to stack and test it.
        step, loss = pending[0]
        value = float(loss)
        if not math.isfinite(value):
            raise Diverged(step=step, epoch=epoch, loss=value)
        return
    losses = torch.stack([loss for _, loss in pending])
    finite = torch.isfinite(losses)
    if bool(finite.all()):
        return
    first = int((~finite).nonzero()[0])
    raise Diverged(step=pending[first][0], epoch=epoch, loss=float(losses[first]))


def train_epoch(state: TrainState) -> EpochStats:
    """Train one epoch; append and return its statistics.

    Raises:
        Diverged: the loss of an optimizer step is not finite.
    """
    epoch = state.epoch
    closure_calls = 0
    # Each step's loss stays on the device until the epoch's end, where all are read at once and summed in
    # float64, weighted by their targets, in step order.
    step_losses: list[torch.Tensor] = []
    step_targets: list[int] = []
    pending: list[tuple[int, torch.Tensor]] = []
    targets_seen = 0
    samples_seen = 0
    steps = 0
    sync(state.device)
    state.data_seconds = 0.0
    paused = 0.0  # seconds of pauses (evaluations), kept out of the epoch's time
    groups = state.step_groups(epoch)
    prefetched = _prefetched(state, groups) if state.workers else None
    start = time.perf_counter()
    for index, group in enumerate(groups):
        if stop.reason is not None:
            raise KeyboardInterrupt(stop.reason)  # a stop whose first raise a finalizer swallowed
        batches = None
        if prefetched is not None:
            # The step's micro-batches, kept for every call of its closure (a line search makes several).
            waited = time.perf_counter()
            batches = [next(prefetched) for _ in group]
            state.data_seconds += time.perf_counter() - waited
        loss, closure_calls_of_step, total = optimizer_step(state, group, batches)
        closure_calls += closure_calls_of_step
        steps += 1
        pending.append((state.global_step, loss))
        if len(pending) >= state.divergence_check_every:
            _check_finite(pending, epoch)
            pending = []
        if state.scheduler is not None:
            state.scheduler.step()
        step_losses.append(loss)
        step_targets.append(total)
        targets_seen += total
        samples_seen += sum(len(idx) for idx in group)
        if state.pause is not None and index + 1 < len(groups) and state.global_step % state.pause.every == 0:
            # A diverged model is not worth evaluating: its step is raised first, as without the pause.
            _check_finite(pending, epoch)
            pending = []
            sync(state.device)
            stopped = time.perf_counter()
            state.pause.run(stopped - start - paused)
            sync(state.device)
            paused += time.perf_counter() - stopped
    _check_finite(pending, epoch)
    sync(state.device)
    loss_sum = 0.0
    for value, total in zip(torch.stack(step_losses).double().tolist() if step_losses else [], step_targets):
        loss_sum += value * total
    stats = EpochStats(epoch=epoch, loss=loss_sum / targets_seen, seconds=time.perf_counter() - start - paused,
                       optimizer_steps=steps, closure_calls=closure_calls, samples=samples_seen,
                       targets=targets_seen, data_seconds=state.data_seconds)
    state.history.append(stats)
    state.epoch += 1
    return stats


def train(state: TrainState, epochs: int) -> list[EpochStats]:
    """Train ``epochs`` epochs; return the statistics of every epoch so far."""
    for _ in range(epochs):
        train_epoch(state)
    return state.history


def warm_up(state: TrainState) -> None:
    """One forward and backward pass without an optimizer step, outside any measurement.

    The first pass pays for lazy allocations and kernel selection; doing it here keeps that
    one-off cost out of epoch 0's time. It leaves no trace (:func:`gradeff.meters.untouched.untouched`):
    parameters, buffers (BatchNorm statistics) and the RNG are as before, the gradients dropped.
    """
    batch = move_batch(state.dataset.batch(torch.arange(min(state.batch_size, len(state.dataset)))), state.device)
    with untouched(state.model):
        state.model(**batch).loss.backward()
    state.optimizer.zero_grad(set_to_none=True)
    sync(state.device)
