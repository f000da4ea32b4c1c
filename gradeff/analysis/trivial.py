"""A model's best cell beside its task's trivial baselines: did it learn more than a count or a pixel match gives?

Every record carries its task's trivial baselines on the same test split (``task["trivial_baselines"]``,
:mod:`gradeff.axes.data.trivial`): pixel 1-NN and a logistic regression on pixels for image classification, unigram and
bigram counts for causal text, the visible-token histogram for masked text, the image-blind caption bigram for
captioning. :func:`trivial_check` compares the best cell of an Answer line's quality question with the strongest of
them on that question's own metric (test loss: lower is better; test top-1 accuracy: higher), paired by seed: a
seed's data is drawn from the seed, so each seed's baseline is that seed's split's. A line whose best cell does not
beat it is flagged (:func:`check_text`), never silently ranked; records without baselines (older schema, a task
they do not cover) claim nothing.

An accuracy is a count of test images: a lead of a few images on a small split is what chance gives. So an accuracy
beats its baseline only where a one-sided two-proportion test over the test images of every seed (correct
answers pooled) puts it ahead at the 5 % level; a lead it does not carry is "not shown". The test treats the two
classifiers' answers as independent, which for two classifiers of the same images overstates the variance of the
difference: it is conservative, never claiming a lead the paired data would not. A loss is a mean over every test
token, its sampling error far below the differences in question, and is compared by its mean.

This module reads records only (no numpy, no torch): the baselines' names are spelled out here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gradeff.analysis.metrics import Metric
from gradeff.analysis.runs import CellRuns
from gradeff.records.formatting import as_number, format_value
from gradeff.records.results import CellRecord, record_field

__all__ = ["ALPHA", "BASELINE_WORDS", "TrivialBaseline", "TrivialCheck", "baseline_text", "check_text",
           "lead_p_value", "strongest_baseline", "trivial_check"]

# Each baseline of gradeff.axes.data.trivial in words (a baseline not named here prints its key).
BASELINE_WORDS = {
    "pixel_1nn": "raw-pixel 1-NN",
    "logistic_regression": "logistic regression on pixels",
    "unigram": "unigram count model",
    "bigram": "bigram count model",
    "caption_unigram": "image-blind caption unigram",
    "caption_bigram": "image-blind caption bigram",
    "visible_histogram": "visible-token histogram",
}
# The quality metrics a baseline has a figure on, with the baseline's metric and the scale to the metric's unit.
_ON = {"test_loss": ("loss", 1.0), "heldout_accuracy": ("accuracy", 100.0)}
# The level at which an accuracy's lead over its baseline counts as shown (one-sided).
ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class TrivialBaseline:
    """The strongest trivial baseline on some seeds' test splits.

    Attributes:
        name: its key (``bigram``).
        metric: the quality metric it is read on.
        by_seed: seed → its figure in the metric's unit (percent for an accuracy).
    """

    name: str
    metric: Metric
    by_seed: Mapping[int, float]

    @property
    def value(self) -> float:
        """Its mean over the seeds."""
        return statistics.fmean(self.by_seed.values())

    @property
    def words(self) -> str:
        return BASELINE_WORDS.get(self.name, self.name.replace("_", " "))


@dataclass(frozen=True, slots=True)
class TrivialCheck:
    """A line's best cell against the strongest trivial baseline, over the seeds both have.

    Attributes:
        baseline: the strongest baseline on those seeds.
        best: the best cell's mean over the same seeds.
        images: an accuracy's test images over those seeds (``None``: a loss, or a split of unknown size).
        p_value: an accuracy's one-sided p-value of its lead (:func:`lead_p_value`; ``None`` where not tested).
        beaten: the best cell is strictly better (lower loss, higher accuracy) and, for an accuracy, its lead
            shown at the 5 % level.
    """

    baseline: TrivialBaseline
    best: float
    images: int | None = None
    p_value: float | None = None

    @property
    def ahead(self) -> bool:
        """Strictly better in the mean, shown or not."""
        return self.baseline.metric.better(self.best, self.baseline.value)

    @property
    def beaten(self) -> bool:
        return self.ahead and (self.p_value is None or self.p_value < ALPHA)

    @property
    def margin(self) -> float:
        """How far the best cell is from the baseline, in the metric's unit (positive: beaten)."""
        gap = self.best - self.baseline.value
        return -gap if self.baseline.metric.goal == "min" else gap


def _figure(record: CellRecord, name: str, metric: Metric) -> float | None:
    baselines = record_field(record, "task", "trivial_baselines")
    entry = baselines.get(name) if isinstance(baselines, Mapping) else None
    wanted = _ON.get(metric.key)
    if not isinstance(entry, Mapping) or wanted is None or entry.get("metric") != wanted[0]:
        return None
    value = as_number(entry.get("value"))
    return None if value is None else value * wanted[1]


def strongest_baseline(records: Iterable[CellRecord], metric: Metric) -> TrivialBaseline | None:
    """The strongest trivial baseline the ``records`` carry on ``metric`` (mean over their seeds), or ``None``.

    Args:
        records: one cell's records (one per seed) or any records of one model on one dataset: a seed's baselines
            are read from its first record.
        metric: the quality metric (``test_loss`` or ``heldout_accuracy``; any other has no baseline).

    Returns:
        The baseline best on ``metric`` among those with a finite figure on every seed that carries baselines.
    """
    per_seed: dict[int, dict] = {}
    for record in records:
        baselines = record_field(record, "task", "trivial_baselines")
        if isinstance(baselines, Mapping) and baselines:
            per_seed.setdefault(record.seed, {"record": record, "names": set(baselines)})
    if not per_seed:
        return None
    names = set.intersection(*(seed["names"] for seed in per_seed.values()))
    found = []
    for name in sorted(names):
        by_seed = {seed: _figure(held["record"], name, metric) for seed, held in per_seed.items()}
        if by_seed and all(value is not None for value in by_seed.values()):
            found.append(TrivialBaseline(name=name, metric=metric, by_seed=by_seed))
    if not found:
        return None
    pick = min if metric.goal == "min" else max
    return pick(found, key=lambda baseline: baseline.value)


def trivial_check(best: CellRuns | None, metric: Metric | None) -> TrivialCheck | None:
    """The best cell of a line's quality question against the strongest trivial baseline of its seeds' splits.

    Args:
        best: the quality verdict's best cell over its seeds (``None``: no ranking).
        metric: the quality metric.

    Returns:
        ``None`` where nothing can be claimed: no best cell, a metric without baselines, or records without them.
    """
    if best is None or metric is None:
        return None
    values = best.values(metric)
    baseline = strongest_baseline([r for r in best.ok if r.seed in values], metric)
    if baseline is None:
        return None
    seeds = [seed for seed in values if seed in baseline.by_seed]
    mean = statistics.fmean(values[seed] for seed in seeds)
    if metric.key != "heldout_accuracy":
        return TrivialCheck(baseline=baseline, best=mean)
    sizes = {r.seed: as_number(record_field(r, "task", "heldout_samples")) for r in best.ok if r.seed in seeds}
    if any(not sizes.get(seed) for seed in seeds):
        return TrivialCheck(baseline=baseline, best=mean)
    images = int(sum(sizes[seed] for seed in seeds))
    right = sum(values[seed] / 100 * sizes[seed] for seed in seeds)
    baseline_right = sum(baseline.by_seed[seed] / 100 * sizes[seed] for seed in seeds)
    return TrivialCheck(baseline=baseline, best=mean, images=images,
                        p_value=lead_p_value(right, baseline_right, images))


def lead_p_value(right: float, baseline_right: float, images: int) -> float:
    """One-sided p-value that a classifier right on ``right`` of ``images`` test images is ahead of one right on
    ``baseline_right`` of them: the two-proportion z-test with the pooled proportion (1 for no lead at all)."""
    if images <= 0:
        raise ValueError(f"a test needs test images, got {images}")
    pooled = (right + baseline_right) / (2 * images)
    spread = math.sqrt(pooled * (1 - pooled) * 2 / images)
    lead = (right - baseline_right) / images
    if spread == 0:
        return 0.0 if lead > 0 else 1.0
    return 0.5 * math.erfc(lead / spread / math.sqrt(2))


def baseline_text(baseline: TrivialBaseline) -> str:
    """``bigram count model 3.109``: the baseline in words and its figure."""
    return f"{baseline.words} {format_value(baseline.value, baseline.metric.unit)}"


def check_text(check: TrivialCheck) -> str:
    """The check in a few words: ``learned less than the bigram count model (4.42 against 4.29)`` where the best
    cell does not beat it, else ``beats the bigram count model (3.109) by 0.2``."""
    unit = check.baseline.metric.unit
    best, baseline = format_value(check.best, unit), format_value(check.baseline.value, unit)
    if check.ahead and not check.beaten:
        return (f"not shown to beat the {check.baseline.words} ({best} against {baseline}; one-sided p = "
                f"{check.p_value:.2f} over {check.images} test images)")
    if not check.beaten:
        verb = "learned no more than" if check.margin == 0 else "learned less than"
        return f"{verb} the {check.baseline.words} ({best} against {baseline})"
    # An accuracy's lead is a difference of percentages: points, not a percent of the baseline.
    lead = f"{check.margin:.1f} points" if unit == "percent" else format_value(check.margin, unit)
    return f"beats the {check.baseline.words} ({baseline}) by {lead}"
