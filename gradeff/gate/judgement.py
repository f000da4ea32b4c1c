"""How one cell's numbers are judged: exactly against the baseline record (or the perturbation run) of the current
run's numerics environment, else within the band its perturbation runs measured, else at ``--loose`` tolerance.

A cell whose current run has the numerics environment of its baseline record (the same numerics probe, or without
probes the same CPU keys: :data:`gradeff.gate.portability.NUMERICS_KEYS`) must repeat its losses to 1e-6; on another
one its loss, held-out and counted-memory tolerances are widened to the band of :class:`gradeff.gate.portability.Band`.
Each judgement says which rule applied and why, in words the gate prints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from gradeff.gate.portability import COUNTED_MEMORY, Band, Sensitivity, has_probe, numerics_differences, same_numerics
from gradeff.gate.rules import LOOSE_ACCURACY_ATOL, LOOSE_LOSS_RTOL, Rule, ToleranceRule
from gradeff.records.formatting import plural
from gradeff.records.results import CellRecord, record_field

__all__ = ["Judgement", "judge", "loosened", "widened"]


def widened(rules: tuple[Rule, ...], loss_rtol: float, accuracy_atol: float, basis: str = "", *,
            memory_rtol: float = 0.0, memory_basis: str = "") -> tuple[Rule, ...]:
    """``rules`` with loss tolerances widened to at least ``loss_rtol`` (relative), held-out accuracy's to
    ``accuracy_atol`` and, where ``memory_rtol`` > 0, counted memory's to ``memory_rtol`` (never narrowed: an
    explicit ``--rule`` or ``--loose`` wider still wins), noting ``basis``."""
    out = []
    for rule in rules:
        if isinstance(rule, ToleranceRule) and fnmatchcase(rule.metric, "*_loss"):
            rule = replace(rule, rtol=max(rule.rtol, loss_rtol), basis=basis)
        elif isinstance(rule, ToleranceRule) and rule.metric == "heldout_accuracy":
            rule = replace(rule, atol=max(rule.atol, accuracy_atol), basis=basis)
        elif isinstance(rule, ToleranceRule) and memory_rtol > 0 and rule.source in _COUNTED_SOURCES:
            rule = replace(rule, rtol=max(rule.rtol, memory_rtol), basis=memory_basis or basis)
        out.append(rule)
    return tuple(out)


_COUNTED_SOURCES = frozenset(f"meters.memory.{name}" for name in COUNTED_MEMORY)


def loosened(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """``rules`` with loss and accuracy tolerances widened to at least ``--loose``'s."""
    return widened(rules, LOOSE_LOSS_RTOL, LOOSE_ACCURACY_ATOL, "--loose: no perturbation run of this cell")


@dataclass(frozen=True, slots=True)
class Judgement:
    """How one cell is judged: against which baseline record, with which rules, and what to say about it."""

    reference: CellRecord
    rules: tuple[Rule, ...]
    numerics: str = ""  # "" exact; else the line (grouped over cells) telling how its losses were judged
    why: str = ""  # which rule applied and why, in a few words (grouped over cells into the gate's rules line)


def _probe_or_cpu(primary: CellRecord, current: CellRecord) -> str:
    """What decided the numerics question: the two probes, or (a record without one) the CPU's keys."""
    if has_probe(primary) and has_probe(current):
        return ""
    if not (has_probe(primary) or has_probe(current)):
        who = "neither run has a"
    else:
        who = "the baseline has no" if not has_probe(primary) else "the current run has no"
    return (f"{who} numerics probe (recorded before probes), so the CPU model, threads and kernel settings decide, "
            "as before probes")


def _exact_why(reference: CellRecord, primary: CellRecord, current: CellRecord) -> str:
    """Why a cell is judged exactly: equal probes (whatever the CPUs are called) or, without probes, the same CPU."""
    against = "" if reference is primary else " against a perturbation run"
    fallback = _probe_or_cpu(reference, current)
    if fallback:
        cpu = record_field(current, "environment", "cpu")
        return f"exact (1e-6){against}: {fallback}, and they match" + (f" ({cpu})" if cpu else "")
    cpus = record_field(reference, "environment", "cpu"), record_field(current, "environment", "cpu")
    names = f", whatever the CPU's name ({cpus[0]} baseline, {cpus[1]} current)" if cpus[0] != cpus[1] else ""
    return (f"exact (1e-6){against}: the numerics probe {record_field(current, 'environment', 'numerics_probe')} "
            f"equals the {'baseline' if reference is primary else 'run'}'s{names}")


def judge(primary: CellRecord, runs: list[CellRecord], current: CellRecord, rules: tuple[Rule, ...],
               band: Band, sensitivity: Sensitivity | None) -> Judgement:
    """Exact against the baseline record (or perturbation run) of the current run's numerics environment; else
    the primary record within the band its sensitivity sets, or at ``--loose`` tolerance where none was measured."""
    for reference in (primary, *runs):
        if same_numerics(reference, current):
            return Judgement(reference, rules, why=_exact_why(reference, primary, current))
    differences = numerics_differences(primary, current)
    differs = ", ".join(f"{key} {before} (baseline) vs {after} (current)"
                        for key, (before, after) in differences.items())
    fallback = _probe_or_cpu(primary, current)
    if fallback:
        why = f"{fallback}, and they differ ({differs})"
    else:
        probes = differences.get("numerics_probe")
        why = (f"the numerics probe differs ({probes[0]} baseline vs {probes[1]} current)" if probes
               else f"the numerics environment differs ({differs})")
    if sensitivity is None:
        return Judgement(primary, loosened(rules), f"numerics environment differs ({differs}) and the baseline has "
                                                    f"no perturbation run of these cells: losses compared at --loose "
                                                    f"tolerance (rtol {LOOSE_LOSS_RTOL:g})",
                          why=f"--loose (no perturbation run to measure a band): {why}")
    change = sensitivity.change
    runs = plural(sensitivity.runs, "perturbation run")
    basis = f"band: {band.factor:g} × {change:.2g}, the largest change of {runs}"
    return Judgement(primary, widened(rules, band.loss_rtol(change), band.accuracy_atol(change), basis,
                                       memory_rtol=band.memory_rtol(sensitivity.memory_change),
                                       memory_basis=f"band: {band.factor:g} × {sensitivity.memory_change:.2g}, the "
                                                    f"largest memory change of {runs}"),
                      f"numerics environment differs ({differs}): losses judged within a band measured by the "
                      f"baseline's perturbation runs: {band.rule()}", why=f"band: {why}")

