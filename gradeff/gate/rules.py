"""Per-metric rules of the regression gate: where a metric is read, and when a change is real.

Each rule is a small frozen value with defaults; ``override_rules`` makes changed copies. A rule
turns the baseline and current record of one cell into one ``Row``: the two values in human
units, the change, and a verdict — ``ok``, ``regression``, ``improvement`` or ``not compared``.
Lower is better for every numeric metric (loss, seconds, bytes) except held-out accuracy.

Defaults, and why:

* ``status``: golden, like every deterministic figure: any change regresses. ``ok`` → ``skipped``
  is a capability check that broke or an optional dependency that went missing, ``ok`` →
  ``interrupted`` a run that did not finish; ``diverged`` → ``ok`` is ``changed: better``, a
  regression until the baseline is refreshed (its losses cannot be compared with a failed run's).
* Deterministic figures (losses, held-out figures, memory counted from tensors) are two-sided
  (golden): a change beyond the tolerance in either direction is a regression, noted
  ``changed: better`` when the figure improved. A seeded run of the same code on the same
  numerics environment repeats them, so any change means the code's behaviour changed: a
  learning rate 1 % off that happens to lower the losses must fail as surely as one that raises
  them, until the baseline is refreshed on purpose (docs/gate.md, "The committed baseline"). Sampled
  figures (time, RSS, allocator and NVML peaks) stay one-sided: better is an improvement.
* ``final_loss``, ``mean_loss``: ``rtol=1e-6``, ``atol=1e-7``. A CPU cell with the same seed,
  torch and transformers versions is deterministic (seeded weights, data and order, no
  nondeterministic kernels): reruns of the committed slice repeat every loss bit for bit, and
  float32 summation-order noise stays near 1e-7. A real change is far larger: a learning rate
  1 % off moves a tiny cell's losses by 1e-5 to 5e-4 relative, which the old ``rtol=1e-3`` let
  through. GPU kernels (atomics, autotuned algorithms) are not bit-reproducible: use ``--loose``
  (``rtol=0.05``) there.
* ``heldout_loss``, ``heldout_accuracy`` (cells with a held-out split): the final epoch's
  held-out figures, as tight as the training losses for the same reason; accuracy is higher-better
  and moves in steps of one sample (1/256 at the tiny profile), so ``atol=1e-4`` flags any change
  of a deterministic run and ``--loose`` allows two points (``atol=0.02``) on GPUs.
* ``time_per_epoch``: see ``TimeRule``.
* ``parameter_bytes`` … ``activation_bytes``, ``peak_bytes`` (the live-tensor peak of one step):
  counted from tensors, not sampled, so they repeat to the byte for the same code and versions
  (every figure of the committed slice does); ``rtol=1e-6`` is a byte or two. A library version
  that stores a buffer differently shows up, named by the environment check.
* ``peak_rss_bytes``, ``mem_used_peak_bytes``: sampled at ~10 Hz, include allocator caching,
  shared libraries and (for NVML) other processes: ``rtol=0.25`` plus a 32 MiB absolute floor,
  because a small process's RSS jitters by tens of MiB between identical runs.
  ``alloc_peak_bytes`` (torch's allocator peak) is exact per process but shifts with cached
  kernel workspaces: ``rtol=0.25``.

Numeric metrics are compared only when both cells ended ``ok``: a failed cell's partial series
is not comparable, and the ``status`` row already reports the failure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields, replace
from fnmatch import fnmatchcase
from typing import Protocol

from gradeff.records.formatting import as_number
from gradeff.records.results import FAILED_STATUSES, CellRecord

__all__ = [
    "ADVISORY", "CHANGED_BETTER", "DEFAULT_RULES", "FAILED_STATUSES", "IMPROVEMENT", "LOOSE_ACCURACY_ATOL",
    "LOOSE_LOSS_RTOL", "MIB", "NOT_COMPARED", "OK", "REGRESSION",
    "VERDICTS", "Row", "Rule", "StatusRule", "TimeRule", "ToleranceRule", "override_rules",
]

# advisory: a change the gate shows but does not judge (time measured in another environment).
VERDICTS = ("ok", "regression", "improvement", "not compared", "advisory")
OK, REGRESSION, IMPROVEMENT, NOT_COMPARED, ADVISORY = VERDICTS
MIB = 1024 * 1024
LOSS_RTOL, LOSS_ATOL = 1e-6, 1e-7
LOOSE_LOSS_RTOL = 0.05
LOOSE_ACCURACY_ATOL = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """The verdict on one metric of one cell.

    Attributes:
        before, after: the values in human units ("" when absent).
        change: ``×1.31`` (time), ``+5.0%`` (loss, bytes), ``ok → diverged`` (status), or "".
        ratio: ``after / before`` for numeric metrics, ``None`` otherwise.
        note: why this verdict (tolerance, noise floor, reason not compared).
        noteworthy: shown without ``--all``: a verdict other than ok, a changed status, a
            slowdown beyond the ratio but within noise, or a metric present on one side only.
    """

    cell: str
    metric: str
    before: str
    after: str
    change: str
    verdict: str
    note: str = ""
    ratio: float | None = None
    noteworthy: bool = False


class Rule(Protocol):
    """What the gate asks of a rule: a metric name and a comparison of two records."""

    metric: str

    def compare(self, baseline: CellRecord, current: CellRecord) -> Row: ...


def _pct(fraction: float) -> str:
    return f"{fraction * 100:+.3g}%"


def _bytes(n: float) -> str:
    # MiB even for GiB-sized figures, as nvidia-smi does: one unit makes rows comparable at a glance.
    for unit, size in (("MiB", MIB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


_FORMATS = {"loss": lambda v: f"{v:.6g}", "bytes": _bytes}


def _lookup(record: CellRecord, path: str) -> float | None:
    """``summary.final_loss`` or ``meters.ram.peak_rss_bytes``; ``None`` if any level is absent."""
    value: object = record
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        if value is None:
            return None
    # bool is an int, but no metric is a flag; NaN/inf cannot be ordered against a tolerance.
    return as_number(value)


def _not_ok(metric: str, baseline: CellRecord, current: CellRecord) -> Row | None:
    """A ``not compared`` row when either cell did not end ok, else ``None``."""
    sides = [f"{side} {r.status}" for side, r in (("baseline", baseline), ("current", current)) if r.status != OK]
    if not sides:
        return None
    # Not noteworthy: the status row already tells the story once per cell.
    return Row(cell=current.cell, metric=metric, before="", after="", change="", verdict=NOT_COMPARED,
               note="status: " + ", ".join(sides))


def _absent(metric: str, cell: str, before: str | None, after: str | None) -> Row:
    """A ``not compared`` row for a metric (already formatted) that is ``None`` on a side."""
    missing = [side for side, v in (("baseline", before), ("current", after)) if v is None]
    return Row(cell=cell, metric=metric, before=before or "", after=after or "", change="", verdict=NOT_COMPARED,
               note=f"absent in {' and '.join(missing)}",
               # A meter that disappeared (or appeared) is worth a line; one never recorded is not.
               noteworthy=len(missing) == 1)


# The note of a deterministic figure that moved the good way: still a regression until the baseline is refreshed.
CHANGED_BETTER = "changed: better"


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusRule:
    """How a cell ended, golden: any change regresses (``ok → skipped`` too); ``→ ok`` is ``changed: better``."""

    metric: str = "status"

    def compare(self, baseline: CellRecord, current: CellRecord) -> Row:
        """Compare the statuses of one cell's two records."""
        before, after = baseline.status, current.status
        verdict, note = OK, ""
        if before != after:
            # Why the current run ended as it did, where it did not end ok (a failure, a skip reason).
            verdict, note = REGRESSION, CHANGED_BETTER if after == OK else current.detail
        # Long tracebacks would break the table; the first line says what happened.
        note = note.splitlines()[0][:100] if note else ""
        return Row(cell=current.cell, metric=self.metric, before=before, after=after,
                   change=f"{before} → {after}" if before != after else "", verdict=verdict, note=note,
                   noteworthy=before != after)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToleranceRule:
    """A value equal within ``atol + rtol·|baseline|`` (``numpy.isclose``); beyond it, worse or better.

    Attributes:
        metric: name in the table and in ``--rule`` overrides.
        source: dotted path into the record: ``summary.final_loss``, ``meters.ram.peak_rss_bytes``.
        unit: ``loss`` (plain numbers) or ``bytes`` (shown in MiB, KiB below 1 MiB).
        higher_is_better: an increase is the improvement (accuracy); otherwise a decrease is.
        two_sided: a deterministic figure (golden): a change beyond the tolerance either way is a regression.
        basis: where the tolerance comes from when it is not the rule's default (a band), shown in the note.
    """

    metric: str
    source: str
    rtol: float
    atol: float = 0.0
    unit: str = "loss"
    higher_is_better: bool = False
    two_sided: bool = False
    basis: str = ""

    def __post_init__(self):
        if not (self.rtol >= 0 and self.atol >= 0):
            raise ValueError(f"{self.metric}: rtol and atol must be >= 0, got rtol={self.rtol}, atol={self.atol}")
        if self.unit not in _FORMATS:
            raise ValueError(f"{self.metric}: unknown unit {self.unit!r}; valid units: {', '.join(_FORMATS)}")

    def compare(self, baseline: CellRecord, current: CellRecord) -> Row:
        """Compare the metric of one cell's two records."""
        if (row := _not_ok(self.metric, baseline, current)) is not None:
            return row
        before, after = _lookup(baseline, self.source), _lookup(current, self.source)
        fmt = _FORMATS[self.unit]
        if before is None or after is None:
            return _absent(self.metric, current.cell, None if before is None else fmt(before),
                           None if after is None else fmt(after))
        diff = after - before
        tolerance = self.atol + self.rtol * abs(before)
        worse = diff < 0 if self.higher_is_better else diff > 0
        verdict = OK if abs(diff) <= tolerance else REGRESSION if worse or self.two_sided else IMPROVEMENT
        shown = _bytes(tolerance) if self.unit == "bytes" else f"{tolerance:.3g}"
        note = f"tolerance ±{shown}" + (f" ({self.basis})" if self.basis else "")
        if verdict == REGRESSION and not worse:
            note = f"{CHANGED_BETTER}; {note}"
        return Row(cell=current.cell, metric=self.metric, before=fmt(before), after=fmt(after),
                   change=_pct(diff / before) if before else f"{diff:+.3g}", verdict=verdict,
                   note=note, ratio=after / before if before else None,
                   noteworthy=verdict != OK)


def _spread(samples: list[float]) -> float:
    """Relative spread of one epoch's time: sample standard deviation over the mean (0 for one sample)."""
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if len(samples) > 1 and mean > 0 else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeRule:
    """Seconds per epoch: even the slower side's best epoch must be beyond a threshold of the other's typical one.

    A cell regresses when the *fastest* current epoch is slower than the threshold times the *median*
    baseline epoch (``min(after) / median(before)``): other processes can only add time to an epoch,
    so a run's fastest epoch is the closest to what its code costs, and a real slowdown makes even
    that one slow, while a lucky, unusually fast baseline epoch (one in three of a short cell's
    epochs can be) does not become the yardstick. A best epoch beyond ``max_ratio`` times the
    baseline's best is a regression too, so a doubling of every epoch fails however spread the
    baseline. An improvement is the mirror image of both (``min(before) / median(after)``, and
    ``min(before) / min(after)``), so swapping the files swaps the verdict exactly. Measured on a
    quiet 2-core machine (5 unchanged and 5 ×2-slowed CI slices, 120 cells each): unchanged cells
    reached at most ×1.28 on this statistic and slowed ones at least ×2.04, where comparing the
    two fastest epochs flagged one unchanged cell in every run (a baseline epoch 33 % faster than
    its other two). The threshold::

        threshold = min(max(ratio, 1 + noise_sigmas × spread of the baseline's epochs), max_ratio)

    ``ratio`` is the floor (1.5), halfway (geometrically) between no change and the ×2 the gate
    must catch, with room for the jitter of a quiet machine. The allowance grows only with the
    *baseline's* spread, measured before the change, never with the current run's own: a slower
    run that is also noisier (a ×28 slowdown with wild epochs) must not excuse itself. ``max_ratio``
    (1.9) caps the allowance.

    What this can and cannot do was measured with ``scripts/calibrate_gate.sh`` (the CI slice, 5
    unchanged and 5 ×2-slowed runs against a baseline of the same machine, docs/gate.md "How far time
    can be trusted"): quiet, 0 of 120 unchanged cells flagged and 0 of 120 slowed ones let through;
    on a 2-core machine shared with other test runs, unchanged reruns moved by ×0.16 to ×6.4 per
    cell (best to best), and no per-cell threshold separates that from ×2, hence the environment
    check.

    Epoch 0 is left out when a cell has at least ``drop_first_from`` epochs: it pays one-off costs
    the warm-up pass does not cover (allocator growth, kernel autotuning, first-touch pages).
    """

    metric: str = "time_per_epoch"
    ratio: float = 1.5
    noise_sigmas: float = 2.0
    max_ratio: float = 1.9
    drop_first_from: int = 4

    def __post_init__(self):
        if not self.ratio >= 1.0:
            raise ValueError(f"{self.metric}: ratio must be >= 1, got {self.ratio}")
        if not self.max_ratio >= self.ratio:
            raise ValueError(f"{self.metric}: max_ratio must be >= ratio ({self.ratio}), got {self.max_ratio}")
        if not self.noise_sigmas >= 0:
            raise ValueError(f"{self.metric}: noise_sigmas must be >= 0, got {self.noise_sigmas}")

    def samples(self, record: CellRecord) -> list[float]:
        """The epoch times the statistic uses (epoch 0 dropped from ``drop_first_from`` epochs)."""
        epochs = record.epochs
        if len(epochs) >= self.drop_first_from:
            epochs = [e for e in epochs if e.epoch != 0]
        return [e.seconds for e in epochs]

    def threshold(self, baseline: list[float]) -> float:
        """The ratio beyond which a change is real, from the baseline's epochs alone."""
        return min(max(self.ratio, 1 + self.noise_sigmas * _spread(baseline)), self.max_ratio)

    def compare(self, baseline: CellRecord, current: CellRecord) -> Row:
        """Compare the epoch times of one cell's two records."""
        if (row := _not_ok(self.metric, baseline, current)) is not None:
            return row
        before, after = self.samples(baseline), self.samples(current)
        if not before or not after:
            return _absent(self.metric, current.cell, _seconds(before) if before else None,
                           _seconds(after) if after else None)
        best_b, best_a = min(before), min(after)
        typical_b, typical_a = statistics.median(before), statistics.median(after)
        if best_b <= 0:  # a clock that did not tick gives no ratio
            return Row(cell=current.cell, metric=self.metric, before=_seconds(before), after=_seconds(after),
                       change="", verdict=NOT_COMPARED, note="baseline epochs took 0 s", noteworthy=True)
        ratio = best_a / typical_b
        threshold = self.threshold(before)
        # Both directions as "slower side's best / faster side's median > threshold", so swapping the
        # files swaps the verdict exactly (no 1/ratio rounding at the threshold).
        # Or the best epoch itself beyond max_ratio: a doubling of every epoch fails however noisy the baseline
        # (a spread baseline's median would otherwise absorb it).
        slower = ratio > threshold or (best_b > 0 and best_a / best_b > self.max_ratio)
        faster = typical_a == 0 or best_b / typical_a > threshold or best_a == 0 or best_b / best_a > self.max_ratio
        verdict = REGRESSION if slower else IMPROVEMENT if faster else OK
        note = (f"best epoch {best_a:.3g} s vs the baseline's median {typical_b:.3g} s, threshold ×{threshold:.3g}"
                if not faster else
                f"baseline's best epoch {best_b:.3g} s vs median {typical_a:.3g} s now, threshold ×{threshold:.3g}")
        change = f"×{ratio:.3g}" if not faster else f"×{typical_a / best_b:.3g}"
        return Row(cell=current.cell, metric=self.metric, before=_seconds(before), after=_seconds(after),
                   change=change, verdict=verdict, note=note, ratio=ratio,
                   # A slowdown past the floor but inside this baseline's noise is worth a line.
                   noteworthy=(verdict != OK or ratio > self.ratio
                               or (typical_a > 0 and best_b / typical_a > self.ratio)))


def _seconds(samples: list[float]) -> str:
    spread = f" ±{statistics.stdev(samples):.2g}" if len(samples) > 1 else ""
    return f"{statistics.fmean(samples):.3g} s{spread} (n={len(samples)})"


def _memory(metric: str, source: str, rtol: float, atol: float = 0.0, *, two_sided: bool = False) -> ToleranceRule:
    return ToleranceRule(metric=metric, source=source, rtol=rtol, atol=atol, unit="bytes", two_sided=two_sided)


# Golden figures: what a seeded run repeats on the same numerics environment (two-sided: any change regresses).
DEFAULT_RULES: tuple[Rule, ...] = (
    StatusRule(),
    ToleranceRule(metric="final_loss", source="summary.final_loss", rtol=LOSS_RTOL, atol=LOSS_ATOL, two_sided=True),
    ToleranceRule(metric="mean_loss", source="summary.mean_loss", rtol=LOSS_RTOL, atol=LOSS_ATOL, two_sided=True),
    ToleranceRule(metric="heldout_loss", source="summary.final_heldout_loss", rtol=LOSS_RTOL, atol=LOSS_ATOL,
                  two_sided=True),
    ToleranceRule(metric="heldout_accuracy", source="summary.final_heldout_accuracy", rtol=0.0, atol=1e-4,
                  higher_is_better=True, two_sided=True),
    TimeRule(),
    *(_memory(name, f"meters.memory.{name}", rtol=1e-6, two_sided=True) for name in (
        "parameter_bytes", "trainable_parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
        "activation_bytes", "peak_bytes")),
    _memory("peak_rss_bytes", "meters.ram.peak_rss_bytes", rtol=0.25, atol=32 * MIB),
    _memory("alloc_peak_bytes", "meters.gpu.alloc_peak_bytes", rtol=0.25),
    _memory("mem_used_peak_bytes", "meters.gpu.mem_used_peak_bytes", rtol=0.25, atol=32 * MIB),
)


def _parse(text: str, annotation: str) -> object:
    # Annotations are strings (``from __future__ import annotations``); every setting is a number.
    return {"float": float, "int": int}[annotation](text)


def override_rules(rules: tuple[Rule, ...], pattern: str, key: str, value: str) -> tuple[Rule, ...]:
    """Copies of ``rules`` with ``key`` set to ``value`` on every rule whose metric matches ``pattern``.

    Args:
        rules: the rules to change.
        pattern: a metric name or an ``fnmatch`` pattern (``*_loss``, ``*_bytes``).
        key: a field of the matched rules (``rtol``, ``atol``, ``ratio``, ``noise_sigmas``, …).
        value: the new value as text, converted to the field's type.

    Returns:
        The new rules, in the same order.

    Raises:
        ValueError: no rule matches, a matched rule has no such field, or the value is invalid.
    """
    matched = [r for r in rules if fnmatchcase(r.metric, pattern)]
    if not matched:
        raise ValueError(f"no metric matches {pattern!r}; metrics: {', '.join(r.metric for r in rules)}")
    changed = {}
    for rule in matched:
        settings = {f.name: f.type for f in fields(rule) if f.type in ("float", "int")}
        if key not in settings:
            raise ValueError(f"{rule.metric} has no setting {key!r}; settings: {', '.join(settings) or 'none'}")
        try:
            changed[id(rule)] = replace(rule, **{key: _parse(value, settings[key])})
        except ValueError as exc:
            raise ValueError(f"{rule.metric}:{key}={value}: {exc}") from None
    return tuple(changed.get(id(r), r) for r in rules)
