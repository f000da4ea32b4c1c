"""Practical-equivalence margins: how far apart two cells may be and still be the same for any practical purpose.

Two cells whose paired difference lies within ``±margin`` with 95 % confidence (two one-sided tests,
:func:`gradeff.analysis.pairing.tost`) are *equivalent*: the choice between them does not matter on that question, so
the "use this" line (:mod:`gradeff.analysis.choice`) moves on to the next one. A margin is relative to the best cell's
mean (``1%``) or absolute in the metric's own unit (``0.02`` nats, ``1pt`` of accuracy, ``1MiB``); the defaults
below are what a practitioner would not trade a second criterion for, and ``--gradeff-margin QUESTION=VALUE``
overrides them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_MARGINS", "MARGIN_QUESTIONS", "Margin", "margin_for", "metric_margin", "parse_margins"]

# The questions a margin is set for: the Answer's objectives.
MARGIN_QUESTIONS = ("quality", "speed", "memory", "energy")
_UNITS = {"": 1.0, "pt": 1.0, "b": 1.0, "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "s": 1.0, "ms": 1e-3,
          "j": 1.0}
_VALUE = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(?P<unit>%|pt|b|kib|mib|gib|s|ms|j)?\s*$",
                    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Margin:
    """A practical-equivalence margin: ``relative`` (a fraction of the reference) or ``absolute`` (metric units).

    Attributes:
        relative: a fraction of the best cell's mean (0.01: 1 %), or ``None``.
        absolute: a size in the metric's unit (bytes, seconds, nats, accuracy points), or ``None``.
        text: how it was given, for the Answer (``±1 %``, ``±1 pt``).
    """

    relative: float | None = None
    absolute: float | None = None
    text: str = ""

    def __post_init__(self):
        if (self.relative is None) == (self.absolute is None):
            raise ValueError("a margin is either relative or absolute")
        if (self.relative or self.absolute or 0.0) < 0:
            raise ValueError("a margin is not negative")

    def size(self, reference: float) -> float:
        """The margin in the metric's unit around ``reference`` (the best cell's mean)."""
        return self.absolute if self.absolute is not None else self.relative * abs(reference)


# Per question; quality depends on the metric's unit: a loss moves relatively, an accuracy in points.
DEFAULT_MARGINS: Mapping[str, Margin] = {
    "quality": Margin(relative=0.01, text="±1 %"),
    "quality:percent": Margin(absolute=1.0, text="±1 pt"),
    "speed": Margin(relative=0.05, text="±5 %"),
    "memory": Margin(relative=0.02, text="±2 %"),
    "energy": Margin(relative=0.05, text="±5 %"),
}


def margin_for(question: str, unit: str, margins: Mapping[str, Margin] | None = None) -> Margin:
    """The margin of ``question`` for a metric in ``unit`` (``percent`` accuracy takes ``quality:percent``)."""
    if question not in MARGIN_QUESTIONS:
        raise KeyError(f"unknown question {question!r}; valid: {', '.join(MARGIN_QUESTIONS)}")
    if margins and question in margins:
        return margins[question]  # what the user set holds whatever the metric's unit
    return DEFAULT_MARGINS.get(f"{question}:{unit}", DEFAULT_MARGINS[question])


# The metrics that answer a question, by key: a table of one of them marks its first place with that question's margin.
_QUESTION_OF_METRIC = {"test_loss": "quality", "heldout_accuracy": "quality", "test_f1": "quality",
                       "seconds_to_target": "speed", "peak": "memory", "ram_peak": "memory",
                       "joules_to_target": "energy"}


def metric_margin(metric, margins: Mapping[str, Margin] | None = None) -> Margin | None:
    """The margin of the question ``metric`` answers (a :class:`gradeff.analysis.metrics.Metric`), or ``None`` for a
    diagnostic metric (training loss, time per epoch, ...), whose first place is exact."""
    question = _QUESTION_OF_METRIC.get(metric.key)
    return None if question is None else margin_for(question, metric.unit, margins)


def _parse_value(text: str) -> Margin:
    match = _VALUE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a margin: give a percentage (1%) or a size (0.02, 1pt, 1MiB, 0.5s)")
    number, unit = float(match["number"]), (match["unit"] or "").lower()
    if unit == "%":
        return Margin(relative=number / 100, text=f"±{match['number']} %")
    return Margin(absolute=number * _UNITS[unit], text=f"±{match['number']}{' ' + match['unit'] if unit else ''}")


def parse_margins(items: Iterable[str]) -> dict[str, Margin]:
    """``--gradeff-margin`` values (``quality=1%``, ``memory=1MiB``, comma-separated or repeated) → question → margin.

    Raises:
        ValueError: an unknown question or an unreadable value, naming the valid forms.
    """
    found: dict[str, Margin] = {}
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            question, sep, value = part.partition("=")
            question = question.strip()
            if not sep or question not in MARGIN_QUESTIONS:
                valid = ", ".join(MARGIN_QUESTIONS)
                raise ValueError(f"{part!r}: expected QUESTION=VALUE with QUESTION one of {valid}")
            found[question] = _parse_value(value)
    return found
