"""The NetScore family: one number per model that rewards accuracy and charges for cost.

Every score is a decibel-style log ratio, ``20·log10(accuracy^k / cost)``, so a score rises with
accuracy and falls as any cost grows, and a factor of 10 in a cost weighted by ``e`` moves it by
``20·e`` dB.

``NetScore`` (Wong 2018, "NetScore: Towards Universal Metrics for Large-scale Performance
Analysis of Deep Neural Networks for Practical On-Device Edge Usage", arXiv:1806.05512)::

    Ω = 20·log10( a^α / (p^β · m^γ) ),   α = 2, β = γ = 0.5

    a  top-1 accuracy, in %
    p  parameters, in millions
    m  multiply-accumulates of one inference (one image), in millions

The deployment-aware variants of the PEFT study replace the model's size by what running it
costs on a machine (``w = 1/8`` weights each cost against the squared accuracy)::

    NS-E = 20·log10( A² / (t^w · P^w) )            inference energy
    NS-M = 20·log10( A² / r^w )                    inference memory
    NS#  = 20·log10( A² / (r^w · t^w · P^w) )      both

    A  top-1 accuracy, in %
    t  wall time of the measured inference pass, in s
    P  mean power over that pass, in W
    r  peak memory of inference, in MiB (2^20 bytes)

Since ``t^w · P^w = (t·P)^w``, NS-E charges the energy of the pass, ``t·P`` joules: ``t`` and
``P`` must describe the same pass, and scores compare only between passes over the same images.

Units. The scores are not unit-free: the paper's units (%, millions, s, W, MiB) are kept, so
that figures compare with published ones. For a model under one million parameters or one
million MACs (the ``tiny`` profile), ``p`` and ``m`` are below 1, their logarithms negative, and
the cost terms *raise* the score instead of lowering it; likewise a run under 1 s, 1 W or 1 MiB.
That is a shift, not a distortion: changing a unit multiplies an input by a constant, which adds
the same constant to every model's score, so differences between scores, rankings and every
monotonicity below are the same in any unit. Only the absolute value (and its sign) depends on
the units, so compare scores, never read one alone.

Measured inputs only. A score is computed from measured inputs or not at all: an input that is
``None``, zero, negative or not finite makes the score's value ``None`` and is named in
``missing`` (a 0 for "not measured" would otherwise become an infinite score). A score that
uses a power (NS-E, NS#) computed from an *estimated* energy (the ``"estimate"`` source of
:mod:`gradeff.meters.energy`, CPU time times watts per CPU) carries ``estimated=True``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALPHA",
    "BETA",
    "GAMMA",
    "LABELS",
    "MEASURED_SOURCES",
    "Score",
    "W",
    "netscore",
    "netscore_family",
    "ns_e",
    "ns_m",
    "ns_sharp",
]

# NetScore's exponents (Wong 2018): accuracy counts twice as much as parameters and MACs together.
ALPHA, BETA, GAMMA = 2.0, 0.5, 0.5
# The deployment-aware variants' exponent of every cost.
W = 1 / 8

MIB = 2**20
MILLION = 1e6

# Energy sources (gradeff.meters.energy) whose joules are measured, and the one that is modelled.
MEASURED_SOURCES = frozenset({"nvml", "rapl"})
_ESTIMATED_SOURCE = "estimate"
_SOURCES = MEASURED_SOURCES | {_ESTIMATED_SOURCE, "none"}

# Key of each score in :func:`netscore_family`'s result -> its name in the literature.
LABELS: Mapping[str, str] = {"netscore": "NetScore", "ns_e": "NS-E", "ns_m": "NS-M", "ns_sharp": "NS#"}


@dataclass(frozen=True, slots=True)
class Score:
    """One score and how far it can be trusted.

    Attributes:
        value: the score in dB, or ``None`` when an input was not measured.
        estimated: the value was computed from an estimated power (energy source
            ``"estimate"``), not a measured one. Always ``False`` when ``value`` is ``None``.
        missing: the inputs that were ``None``, non-positive or not finite, by name; empty
            exactly when ``value`` is not ``None``.
    """

    value: float | None
    estimated: bool = False
    missing: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types: ``{"value": float | None, "estimated": bool, "missing": [str, ...]}``."""
        return {"value": self.value, "estimated": self.estimated, "missing": list(self.missing)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Score:
        """The score :meth:`as_dict` wrote."""
        return cls(value=data["value"], estimated=bool(data["estimated"]), missing=tuple(data["missing"]))


def _measured(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def _log_score(accuracy_pct: tuple[str, float | None], costs: tuple[tuple[str, float | None, float], ...],
               *, alpha: float, estimated: bool) -> Score:
    """``20·log10(A^alpha / Π cost^exponent)`` over ``(name, value)`` inputs, or the names missing."""
    name, accuracy = accuracy_pct
    if accuracy is not None and math.isfinite(accuracy) and accuracy > 100:
        raise ValueError(f"{name} is a percentage in (0, 100], got {accuracy}")
    missing = tuple(n for n, v in (accuracy_pct, *((n, v) for n, v, _ in costs)) if not _measured(v))
    if missing:
        return Score(None, False, missing)
    log = alpha * math.log10(accuracy) - sum(e * math.log10(v) for _, v, e in costs)
    return Score(20.0 * log, estimated, ())


def netscore(accuracy_pct: float | None, params_millions: float | None, macs_millions: float | None, *,
             alpha: float = ALPHA, beta: float = BETA, gamma: float = GAMMA) -> Score:
    """NetScore ``Ω = 20·log10(a^α / (p^β · m^γ))`` (Wong 2018), in dB.

    Args:
        accuracy_pct: top-1 accuracy ``a``, in % (0-100].
        params_millions: parameters ``p``, in millions.
        macs_millions: multiply-accumulates ``m`` of one inference, in millions.
        alpha, beta, gamma: the exponents; the paper's 2, 0.5, 0.5 by default.

    Returns:
        The score; never estimated (no power enters it).

    Raises:
        ValueError: ``accuracy_pct`` above 100 (a percentage was expected).
    """
    return _log_score(("accuracy_pct", accuracy_pct),
                      (("params_millions", params_millions, beta), ("macs_millions", macs_millions, gamma)),
                      alpha=alpha, estimated=False)


def ns_e(accuracy_pct: float | None, seconds: float | None, power_w: float | None, *,
         power_estimated: bool = False, w: float = W) -> Score:
    """NS-E ``= 20·log10(A² / (t^w · P^w))``, ``w = 1/8``, in dB: accuracy against inference energy.

    Args:
        accuracy_pct: top-1 accuracy ``A``, in % (0-100].
        seconds: wall time ``t`` of the inference pass, in s.
        power_w: mean power ``P`` over the same pass, in W.
        power_estimated: ``power_w`` comes from an energy estimate rather than a meter.
        w: the cost exponent.
    """
    return _log_score(("accuracy_pct", accuracy_pct), (("seconds", seconds, w), ("power_w", power_w, w)),
                      alpha=2.0, estimated=power_estimated)


def ns_m(accuracy_pct: float | None, memory_mib: float | None, *, w: float = W) -> Score:
    """NS-M ``= 20·log10(A² / r^w)``, ``w = 1/8``, in dB: accuracy against peak inference memory.

    Args:
        accuracy_pct: top-1 accuracy ``A``, in % (0-100].
        memory_mib: peak memory ``r`` of inference, in MiB.
        w: the cost exponent.
    """
    return _log_score(("accuracy_pct", accuracy_pct), (("memory_mib", memory_mib, w),), alpha=2.0, estimated=False)


def ns_sharp(accuracy_pct: float | None, memory_mib: float | None, seconds: float | None, power_w: float | None,
             *, power_estimated: bool = False, w: float = W) -> Score:
    """NS# ``= 20·log10(A² / (r^w · t^w · P^w))``, ``w = 1/8``, in dB: memory and energy together.

    ``NS# = NS-E + NS-M - 20·log10(A²)``.

    Args:
        accuracy_pct: top-1 accuracy ``A``, in % (0-100].
        memory_mib: peak memory ``r`` of inference, in MiB.
        seconds: wall time ``t`` of the inference pass, in s.
        power_w: mean power ``P`` over the same pass, in W.
        power_estimated: ``power_w`` comes from an energy estimate rather than a meter.
        w: the cost exponent.
    """
    return _log_score(("accuracy_pct", accuracy_pct),
                      (("memory_mib", memory_mib, w), ("seconds", seconds, w), ("power_w", power_w, w)),
                      alpha=2.0, estimated=power_estimated)


def _scaled(value: float | None, divisor: float) -> float | None:
    return None if value is None else value / divisor


def netscore_family(accuracy: float | None, parameters: int | None, macs: int | None,
                    inference_seconds: float | None, mean_power_w: float | None, peak_memory_bytes: int | None,
                    energy_source: str | None) -> dict[str, Score]:
    """Every score of the family from a record's raw figures, converted to the papers' units here.

    Args:
        accuracy: top-1 accuracy as a fraction in (0, 1], as :mod:`gradeff.cell.evaluation` records it.
        parameters: parameters, a count (``parameter_counts(model)["total"]``).
        macs: multiply-accumulates of one inference (one image), a count.
        inference_seconds: wall time of the inference pass the power was measured over, in s.
        mean_power_w: mean power over that pass, in W (its joules over its seconds).
        peak_memory_bytes: peak memory of inference, in bytes.
        energy_source: the source of the energy behind ``mean_power_w`` (``"nvml"``, ``"rapl"``,
            ``"estimate"`` or ``"none"``). ``"estimate"`` marks NS-E and NS# as estimated;
            ``"none"`` (or ``None``) means the power was not measured and counts as missing.

    Returns:
        ``{"netscore", "ns_e", "ns_m", "ns_sharp"}`` → :class:`Score` (see :data:`LABELS`);
        ``{k: s.as_dict() for k, s in result.items()}`` is plain JSON. ``missing`` names this
        function's arguments.

    Raises:
        ValueError: ``accuracy`` above 1 (a fraction was expected), or an unknown energy source.
    """
    if accuracy is not None and math.isfinite(accuracy) and accuracy > 1:
        raise ValueError(f"accuracy is a fraction in (0, 1], got {accuracy}")
    if energy_source is not None and energy_source not in _SOURCES:
        raise ValueError(f"energy_source must be one of {sorted(_SOURCES)} or None, got {energy_source!r}")
    if energy_source in (None, "none"):
        mean_power_w = None  # no meter behind it: not a measured power, whatever the number
    estimated = energy_source == _ESTIMATED_SOURCE
    a = ("accuracy", None if accuracy is None else accuracy * 100.0)
    p = ("parameters", _scaled(parameters, MILLION))
    m = ("macs", _scaled(macs, MILLION))
    t = ("inference_seconds", inference_seconds)
    power = ("mean_power_w", mean_power_w)
    r = ("peak_memory_bytes", _scaled(peak_memory_bytes, MIB))
    return {
        "netscore": _log_score(a, ((*p, BETA), (*m, GAMMA)), alpha=ALPHA, estimated=False),
        "ns_e": _log_score(a, ((*t, W), (*power, W)), alpha=2.0, estimated=estimated),
        "ns_m": _log_score(a, ((*r, W),), alpha=2.0, estimated=False),
        "ns_sharp": _log_score(a, ((*r, W), (*t, W), (*power, W)), alpha=2.0, estimated=estimated),
    }
