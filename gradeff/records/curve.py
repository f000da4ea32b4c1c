"""The test-loss curve of a cell at optimizer-step resolution, and the time to target read from it.

The runner evaluates the test split before training, every ``eval_every`` optimizer steps and at each epoch's
end, outside the epochs' clocks and meters (AlgoPerf's protocol). Each evaluation is a point carrying the
training's cost up to it — optimizer steps, seconds, joules — so the time to a target loss is the cost at the
first point that reached it, resolved to ``eval_every`` steps instead of to whole epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

__all__ = ["CurvePoint", "TimeToTarget", "first_at_target", "target_loss", "time_to_target"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """One evaluation of the test split during a cell.

    Attributes:
        step: optimizer steps taken before it (0: the untrained model).
        epoch: the epoch it fell in (the untrained model's point: 0).
        seconds: training seconds up to it (the epochs' clocks; evaluations are outside them).
        joules: energy of the training up to it, ``None`` where the machine has no energy figure.
        loss: mean test loss per target.
        accuracy: test top-1 accuracy (classification), else ``None``.
        eval_seconds: how long this evaluation took (outside every clock and meter).
    """

    step: int
    epoch: int
    seconds: float
    joules: float | None
    loss: float
    accuracy: float | None = None
    eval_seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def first_at_target(points: Iterable[CurvePoint], target: float) -> CurvePoint | None:
    """The first point whose test loss is at or below ``target``, ``None`` if none is (not reached).

    A NaN loss (a diverged evaluation) never reaches a target.
    """
    for point in points:
        if point.loss <= target:
            return point
    return None


def target_loss(initial: float, floor: float | None) -> float:
    """The held-out loss a cell must reach: halfway from the untrained model's to the floor (or to 0)."""
    return (initial + (floor if floor is not None else 0.0)) / 2


@dataclass(frozen=True, slots=True)
class TimeToTarget:
    """What reaching the target cost: optimizer steps, seconds and joules up to the first epoch that reached it."""

    target: float
    epoch: int
    optimizer_steps: int
    seconds: float
    joules: float | None


def time_to_target(epochs: Iterable, target: float, *, loss: Callable = lambda e: e.heldout_loss,
                   joules: Callable = lambda e: None) -> TimeToTarget | None:
    """The cost of reaching ``target`` (at epoch resolution), or ``None`` if no epoch reached it.

    Args:
        epochs: epoch records in order (``optimizer_steps``, ``seconds``).
        target: the held-out loss to reach.
        loss: an epoch's held-out loss (``None`` where not measured).
        joules: an epoch's energy (``None`` where not measured: the sum is then ``None``).
    """
    steps, seconds, energy = 0, 0.0, 0.0
    for epoch in epochs:
        steps += epoch.optimizer_steps
        seconds += epoch.seconds
        spent = joules(epoch)
        energy = None if energy is None or spent is None else energy + spent
        value = loss(epoch)
        if value is not None and value <= target:
            return TimeToTarget(target=target, epoch=epoch.epoch, optimizer_steps=steps, seconds=seconds,
                                joules=energy)
    return None
