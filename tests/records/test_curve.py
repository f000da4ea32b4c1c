"""Time to target at optimizer-step resolution, read from a cell's test curve."""

from types import SimpleNamespace

from gradeff.records.curve import CurvePoint, first_at_target, target_loss, time_to_target
from gradeff.records.results import EpochRecord, Summary


class _Untrained:
    loss, accuracy = 4.0, None


def _curve(losses, every=5, per_epoch=10):
    """Points every ``every`` steps, one second and two joules of training per step, after the untrained one."""
    points = [CurvePoint(step=0, epoch=0, seconds=0.0, joules=0.0, loss=_Untrained.loss)]
    for i, loss in enumerate(losses, start=1):
        step = i * every
        points.append(CurvePoint(step=step, epoch=(step - 1) // per_epoch, seconds=float(step), joules=2.0 * step,
                                 loss=loss))
    return points


def _epochs(curve, per_epoch=10):
    ends = [p for p in curve if p.step and p.step % per_epoch == 0]
    return [EpochRecord(epoch=i, loss=p.loss, seconds=float(per_epoch), optimizer_steps=per_epoch,
                        closure_calls=per_epoch,
                        samples=80, targets=80, heldout_loss=p.loss) for i, p in enumerate(ends)]


def test_the_target_is_reached_at_the_first_point_at_or_below_it():
    """Untrained 4.0, floor 1.0 → target 2.5; reached at step 15 (mid-epoch), not at the epoch end (20)."""
    curve = _curve([3.5, 3.0, 2.5, 2.0])
    assert first_at_target(curve, 2.5).step == 15
    summary = Summary.of(_epochs(curve), 30.0, untrained=_Untrained, floor=1.0, curve=curve)
    assert summary.target_loss == 2.5 and summary.target_reached is True
    assert (summary.steps_to_target, summary.seconds_to_target, summary.joules_to_target) == (15, 15.0, 30.0)
    # At epoch resolution the same run needs the whole second epoch.
    by_epoch = Summary.of(_epochs(curve), 30.0, untrained=_Untrained, floor=1.0)
    assert by_epoch.steps_to_target == 20


def test_not_reached_differs_from_not_applicable():
    """A test curve that stays above the target: not reached (False); no test split at all: n/a (None)."""
    curve = _curve([3.9, 3.8, 3.7, 3.6])
    never = Summary.of(_epochs(curve), 30.0, untrained=_Untrained, floor=1.0, curve=curve)
    assert never.target_reached is False and never.steps_to_target is None
    bare = [EpochRecord(epoch=0, loss=3.0, seconds=1.0, optimizer_steps=10, closure_calls=10, samples=8, targets=8)]
    assert Summary.of(bare, 2.0).target_reached is None


def test_a_nan_test_loss_never_reaches_a_target():
    """A diverged evaluation is not a success."""
    assert first_at_target(_curve([float("nan"), 3.0]), 3.5).step == 10


def test_energy_unmeasured_is_none_not_zero():
    """Joules to target stay None when the energy meter had no figure at the point that reached it."""
    curve = [CurvePoint(step=0, epoch=0, seconds=0.0, joules=0.0, loss=4.0),
             CurvePoint(step=7, epoch=0, seconds=3.0, joules=None, loss=1.0)]
    summary = Summary.of(_epochs(curve, per_epoch=7), 5.0, untrained=_Untrained, floor=1.0, curve=curve)
    assert summary.steps_to_target == 7 and summary.joules_to_target is None


def _epoch(i, loss, steps=8, seconds=1.0):
    return SimpleNamespace(epoch=i, heldout_loss=loss, optimizer_steps=steps, seconds=seconds, joules=2.0)


def test_time_to_target_on_a_hand_made_series():
    """Target halfway from 4.0 to a floor of 1.0 = 2.5: reached at epoch 2 after 24 steps, 3 s, 6 J."""
    target = target_loss(4.0, 1.0)
    assert target == 2.5 and target_loss(4.0, None) == 2.0
    series = [_epoch(0, 3.5), _epoch(1, 2.6), _epoch(2, 2.4), _epoch(3, 2.0)]
    reached = time_to_target(series, target, joules=lambda e: e.joules)
    assert (reached.epoch, reached.optimizer_steps, reached.seconds, reached.joules) == (2, 24, 3.0, 6.0)
    assert time_to_target(series[:2], target) is None
    assert time_to_target([_epoch(0, None), _epoch(1, 2.0)], target).epoch == 1
    assert time_to_target(series, target).joules is None  # energy not given: not a made-up 0


def test_an_epoch_exactly_at_the_target_reaches_it():
    """The target is reached at ≤, and the result carries the target it was measured against."""
    reached = time_to_target([_epoch(0, 3.0), _epoch(1, 2.5), _epoch(2, 2.0)], 2.5)
    assert (reached.target, reached.epoch, reached.optimizer_steps, reached.seconds) == (2.5, 1, 16, 2.0)
    assert time_to_target([_epoch(0, 2.5000001)], 2.5) is None
