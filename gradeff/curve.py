"""The test-loss curve of a cell at optimizer-step resolution, and the time to target read from it.

The runner evaluates the test split before training, every ``eval_every`` optimizer steps and at each epoch's
end, outside the epochs' clocks and meters (AlgoPerf's protocol). Each evaluation is a point carrying the
training's cost up to it — optimizer steps, seconds, joules — so the time to a target loss is the cost at the
first point that reached it, resolved to ``eval_every`` steps instead of to whole epochs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

__all__ = ["CurvePoint", "first_at_target"]


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
