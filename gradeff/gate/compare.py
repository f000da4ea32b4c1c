"""The regression gate: compare a baseline results file with a current one, metric by metric.

pytest-benchmark's ``--benchmark-compare-fail`` judges time only, with one global threshold and no
notion of noise; this gate also judges status, loss and memory, each with its own rule
(``gradeff.gate.rules``). Usage::

    gradeff compare BASELINE CURRENT [--markdown] [--all] [--output FILE] [--rule METRIC:KEY=VALUE]
    python -m gradeff.gate.compare BASELINE CURRENT

Exit codes: 0 no regression, 1 regression, 2 unusable input (missing or unreadable file, the same
file on both sides, no cell in common, cells run with another profile or seed, another environment
under ``--strict-environment``), 74 (``EX_IOERR``) no regression but ``--output`` could not be
written (one line says which file and why; a regression still exits 1, its verdict stands).

What counts as a regression by default:

* a cell of the baseline without a record in the current file (``--allow-missing`` lists it
  instead). With ``--cells FILE`` (what ``--gradeff-baseline`` passes: the cells the session
  selected, so a ``-k`` or ``--gradeff-optimizers`` slice is judged on its own cells only) a
  listed cell without a current record is missing, baseline cells not listed are out of scope;
* any change of status (``ok → skipped`` included), and a loss, held-out or memory figure
  that moved beyond its tolerance in either direction (golden: :mod:`gradeff.gate.rules`);
* a time per epoch beyond the noise-calibrated ratio of :class:`~gradeff.gate.rules.TimeRule`,
  but only when both files come from the same environment.

**Exact or within a band.** A cell whose current run has the numerics environment of its baseline
record (:data:`gradeff.gate.portability.NUMERICS_KEYS`: CPU model and id, torch threads, instruction
set, device, torch and transformers versions) must repeat its losses to 1e-6. On another one its
loss and held-out figures are judged within a band measured from the baseline's own perturbation
runs (``<baseline>.perturbed.jsonl``, or ``--perturbed FILE``: the same cells recorded with only the
summation order changed; :class:`gradeff.gate.portability.Band`), and a current run whose environment is
that of a perturbation run is compared with that run exactly. Without perturbation runs a foreign
cell falls back to the ``--loose`` tolerances. Statuses are exact everywhere, and so is memory counted
from tensors, except where the perturbation runs moved it (a line search's step: see
:mod:`gradeff.gate.portability`). Which cells were judged how, and the band's rule, are printed before the table.

The environment (CPU model, logical CPUs, torch threads, device, torch and transformers versions)
is compared first and any difference is printed first. Time measured on another machine says
nothing about the code, so under a difference the time rows become ``advisory`` (shown, never a
regression); ``--strict-environment`` makes a difference exit 2 instead.

CI (``.ci/run``) gates the ``adam,cgd`` slice against the committed ``baselines/tiny-cpu.jsonl``
and its perturbation runs (``scripts/record_baseline.py`` records both), with ``--strict``.
Recording a time baseline on the runner itself (the slice at the merge base, another full slice
run) would double CI's time for a check that the noise of a shared runner makes weak anyway; a
machine that wants time gated records its own baseline with ``scripts/calibrate_gate.sh``, which
also measures the time rule's false positives and negatives there.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path

from gradeff.gate.portability import (
    COUNTED_MEMORY,
    Band,
    Sensitivity,
    has_probe,
    numerics_differences,
    perturbations,
    perturbed_path,
    same_numerics,
    sensitivities,
)
from gradeff.gate.rules import (
    ADVISORY,
    CHANGED_BETTER,
    DEFAULT_RULES,
    IMPROVEMENT,
    LOOSE_ACCURACY_ATOL,
    LOOSE_LOSS_RTOL,
    NOT_COMPARED,
    REGRESSION,
    Row,
    Rule,
    TimeRule,
    ToleranceRule,
    override_rules,
)
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, colliding_outputs, write_text
from gradeff.records.results import CellRecord, record_field
from gradeff.records.safe_text import one_line
from gradeff.records.store import latest_by_run, read_records

__all__ = [
    "DEFAULT_RULES", "ENVIRONMENT_KEYS", "EXIT_INCOMPLETE_OUTPUT", "EXIT_OK", "EXIT_REGRESSION", "EXIT_UNUSABLE",
    "Comparison", "MismatchError", "UnusableInput", "Verdict", "arguments", "build_parser", "compare_records",
    "format_table", "headline", "load_results", "main", "parse_compare_args", "read_cells", "rules_line", "run",
    "summary_line",
]

# What makes two runs' times comparable: the same processor, as many cores and threads, the same
# device and the same libraries (a new torch may change kernels, hence speed and last digits).
ENVIRONMENT_KEYS = ("cpu", "cpu_id", "cpu_capability", "cpu_count", "torch_threads", "device", "device_name",
                    "torch", "transformers")

EXIT_OK, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


class UnusableInput(ValueError):
    """The inputs cannot be compared: the gate exits 2 with this message."""


class MismatchError(UnusableInput):
    """Matched cells ran with another profile, seed or precision: their numbers are not comparable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """The gate's result.

    Attributes:
        rows: one row per compared cell and rule, in baseline order, then rule order.
        only_in_baseline, only_in_current: cells of one file only.
        warnings: things a reader should know (other device kind, unreadable lines, …).
        environment: how the two environments differ (printed first); empty when they match.
        numerics: how the loss figures of cells run on another numerics environment were judged (a band,
            with its rule, or the loose fallback); empty when every cell was compared exactly.
        judged_by: which rule (exact, band, loose) applied to the compared cells and why (the numerics probes
            equal or not, or the CPU's keys where a record has no probe), grouped over cells: the gate prints it
            as one line.
        cells_compared: number of cells present in both files.
        missing: cells that should have a current record and have none (regressions unless
            ``allow_missing``).
        unbaselined: under ``strict``, cells the current run selected that the baseline lacks (regressions).
    """

    rows: tuple[Row, ...]
    only_in_baseline: tuple[str, ...] = ()
    only_in_current: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    numerics: tuple[str, ...] = ()
    judged_by: tuple[str, ...] = ()
    cells_compared: int = 0
    missing: tuple[str, ...] = ()
    unbaselined: tuple[str, ...] = ()

    @property
    def regressions(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.verdict == REGRESSION)

    @property
    def improvements(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.verdict == IMPROVEMENT)


def _grouped(differences: dict[str, list[str]]) -> list[str]:
    """``message (n cells: a, b, c, …)`` per distinct difference."""
    lines = []
    for message, cells in differences.items():
        shown = ", ".join(cells[:3]) + (", …" if len(cells) > 3 else "")
        lines.append(f"{message} ({_plural(len(cells), 'cell')}: {shown})")
    return lines


def _differences(b: CellRecord, c: CellRecord) -> tuple[list[str], list[str]]:
    """What differs between two runs of a cell: (reasons to refuse, reasons to warn)."""
    # Another profile or seed trains another model on other data, another precision in other arithmetic: no
    # number is comparable.
    settings = [(key, getattr(b, key), getattr(c, key)) for key in ("profile", "seed")]
    settings.append(("precision", record_field(b, "hparams", "precision", "fp32"),
                     record_field(c, "hparams", "precision", "fp32")))
    refusals = [f"{key} differs: {before} (baseline) vs {after} (current)" for key, before, after in settings
                if before != after]
    warnings = []
    kinds = b.device.split(":")[0], c.device.split(":")[0]
    if kinds[0] != kinds[1]:
        warnings.append(f"device differs: {kinds[0]} (baseline) vs {kinds[1]} (current); time and memory are not "
                        "comparable")
    return refusals, warnings


def _environment_differences(b: CellRecord, c: CellRecord) -> dict[str, str]:
    """``{key: "cpu differs: X (baseline) vs Y (current)"}`` for each of ``ENVIRONMENT_KEYS`` that differs."""
    messages = {}
    for key in ENVIRONMENT_KEYS:
        before, after = record_field(b, "environment", key), record_field(c, "environment", key)
        if key == "device":  # cuda:0 and cuda:1 are the same kind of device
            before, after = (str(v).split(":")[0] if v is not None else None for v in (before, after))
        if before != after:
            messages[key] = f"{key} differs: {before} (baseline) vs {after} (current)"
    return messages


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
class _Judgement:
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


def _judgement(primary: CellRecord, runs: list[CellRecord], current: CellRecord, rules: tuple[Rule, ...],
               band: Band, sensitivity: Sensitivity | None) -> _Judgement:
    """Exact against the baseline record (or perturbation run) of the current run's numerics environment; else
    the primary record within the band its sensitivity sets, or at ``--loose`` tolerance where none was measured."""
    for reference in (primary, *runs):
        if same_numerics(reference, current):
            return _Judgement(reference, rules, why=_exact_why(reference, primary, current))
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
        return _Judgement(primary, loosened(rules), f"numerics environment differs ({differs}) and the baseline has "
                                                    f"no perturbation run of these cells: losses compared at --loose "
                                                    f"tolerance (rtol {LOOSE_LOSS_RTOL:g})",
                          why=f"--loose (no perturbation run to measure a band): {why}")
    change = sensitivity.change
    runs = _plural(sensitivity.runs, "perturbation run")
    basis = f"band: {band.factor:g} × {change:.2g}, the largest change of {runs}"
    return _Judgement(primary, widened(rules, band.loss_rtol(change), band.accuracy_atol(change), basis,
                                       memory_rtol=band.memory_rtol(sensitivity.memory_change),
                                       memory_basis=f"band: {band.factor:g} × {sensitivity.memory_change:.2g}, the "
                                                    f"largest memory change of {runs}"),
                      f"numerics environment differs ({differs}): losses judged within a band measured by the "
                      f"baseline's perturbation runs: {band.rule()}", why=f"band: {why}")


def _same_experiment(primary: CellRecord, run: CellRecord) -> list[str]:
    """Why a perturbation run is not the baseline record's experiment with another summation order."""
    problems = [problem.replace(" (current)", " (perturbation run)") for problem in _differences(primary, run)[0]]
    if run.code_version != primary.code_version:
        problems.append(f"code_version differs: {primary.code_version} (baseline) vs {run.code_version} "
                        "(perturbation run)")
    return problems


def _advisory(row: Row) -> Row:
    """A time row measured in another environment: shown, never a regression or an improvement."""
    if row.verdict not in (REGRESSION, IMPROVEMENT):
        return row
    return replace(row, verdict=ADVISORY, note=f"would be {row.verdict} (environment differs): {row.note}",
                   noteworthy=True)


def paired_runs(baseline: list[CellRecord], current: list[CellRecord]) -> tuple[dict[str, CellRecord],
                                                                               dict[str, CellRecord]]:
    """The last record of each run on both sides, keyed so that equal keys are compared.

    A cell repeated over seeds (``--gradeff-seeds``) on either side is compared seed by seed, each run keyed
    ``<cell>-seed<S>`` (its pytest id): a seeded CPU run is deterministic, so the same seed must give the same
    numbers, and a regression of one seed would hide in a mean over seeds. A seed on one side only is a cell of
    that side only. A cell with one seed on each side is keyed by its id, as before repeats existed, so a
    baseline of another seed is still refused as a mismatch rather than silently not compared.
    """
    runs = latest_by_run(baseline), latest_by_run(current)
    # Each side holds one record per (cell, seed): a cell counted more than once on a side ran several seeds there.
    repeated = {cell for side in runs for cell, n in Counter(cell for cell, _ in side).items() if n > 1}
    return tuple({f"{cell}-seed{seed}" if cell in repeated else cell: record for (cell, seed), record in side.items()}
                 for side in runs)


def compare_records(baseline: list[CellRecord], current: list[CellRecord], rules: tuple[Rule, ...] = DEFAULT_RULES,
                    *, allow_mismatch: bool = False, allow_missing: bool = False,
                    selected: Collection[str] | None = None, strict_environment: bool = False,
                    perturbed: list[CellRecord] = (), band: Band = Band(),  # noqa: B008 - frozen
                    strict: bool = False) -> Comparison:
    """Compare the last record of every cell of ``current`` with the last one of ``baseline`` (seed by seed).

    Args:
        baseline, current: records in file order; a later record of a cell and seed supersedes earlier ones
            (see :func:`paired_runs` for cells repeated over seeds).
        rules: one row per rule and common cell.
        allow_mismatch: compare cells run with another profile or seed (as warnings) instead of raising.
        allow_missing: list cells without a current record instead of counting them as regressions.
        selected: the cells the current run was asked to run (its ``-k``/axis selection). Given,
            only these are judged: baseline cells outside it are ignored, and a selected cell
            without a current record is missing even when the baseline lacks it too. ``None``:
            every baseline cell should be in current.
        strict_environment: another environment raises instead of making time rows advisory.
        perturbed: the baseline's perturbation runs (see :mod:`gradeff.gate.portability`).
        band: how far a cell on another numerics environment may move, from its perturbation runs.
        strict: a selected cell the baseline lacks is a regression (``--strict``), not only listed.

    Returns:
        The comparison; cells present on one side only are listed, missing ones as regressions.

    Raises:
        MismatchError: a common cell ran with another profile or seed, and ``allow_mismatch`` is false;
            or the environments differ under ``strict_environment``.
        UnusableInput: a perturbation run is not its baseline record's experiment (another profile, seed,
            precision or code version).
    """
    before, after = paired_runs(baseline, current)
    scope = set(selected) if selected is not None else set()
    if selected is not None:
        # A selected cell id covers its runs over seeds.
        before = {cell: r for cell, r in before.items() if cell in scope or r.cell in scope}
    common = [cell for cell in before if cell in after]
    runs = perturbations(perturbed)
    foreign = defaultdict(list)
    for cell in common:
        for run in runs.get((before[cell].cell, before[cell].seed), []):
            for problem in _same_experiment(before[cell], run):
                foreign[problem].append(cell)
    if foreign:
        raise UnusableInput("perturbation runs of another experiment: " + "; ".join(_grouped(foreign))
                            + "; record the baseline and its perturbation runs together (scripts/record_baseline.py)")
    measured = sensitivities(latest_by_run(baseline).values(), perturbed)
    judgements = {cell: _judgement(before[cell], runs.get(key := (before[cell].cell, before[cell].seed), []),
                                   after[cell], rules, band, measured.get(key)) for cell in common}
    mismatches: dict[str, list[str]] = defaultdict(list)
    notes: dict[str, list[str]] = defaultdict(list)
    environment: dict[str, list[str]] = defaultdict(list)
    judged: dict[str, list[str]] = defaultdict(list)
    why: dict[str, list[str]] = defaultdict(list)
    for cell in common:
        why[judgements[cell].why].append(cell)
        refusals, warnings = _differences(before[cell], after[cell])
        for message in refusals:
            mismatches[message].append(cell)
        for message in warnings:
            notes[message].append(cell)
        for message in _environment_differences(judgements[cell].reference, after[cell]).values():
            environment[message].append(cell)
        if judgements[cell].reference is not before[cell]:
            # Recorded two cells at a time (scripts/record_baseline.py): its numbers are the yardstick, its time is not.
            environment["the current run's numerics are a perturbation run's: compared with it exactly, its time "
                        "recorded under pytest -n 2"].append(cell)
        if judgements[cell].numerics:
            judged[judgements[cell].numerics].append(cell)
    if mismatches and not allow_mismatch:
        raise MismatchError("refusing to compare: " + "; ".join(_grouped(mismatches))
                            + " (pass --allow-mismatch to compare anyway)")
    if environment and strict_environment:
        raise MismatchError("refusing to compare under --strict-environment: " + "; ".join(_grouped(environment)))
    elsewhere = {cell for cells in environment.values() for cell in cells}
    rows = []
    for cell in common:
        judgement = judgements[cell]
        for rule in judgement.rules:
            # The run's key names it (llm-adam-accum-seed1 where a cell is repeated over seeds).
            row = replace(rule.compare(judgement.reference, after[cell]), cell=cell)
            rows.append(_advisory(row) if isinstance(rule, TimeRule) and cell in elsewhere else row)
    only_in_baseline = tuple(cell for cell in before if cell not in after)
    ran = {*before, *after, *(r.cell for r in (*before.values(), *after.values()))}
    missing = only_in_baseline + tuple(cell for cell in dict.fromkeys(selected or ()) if cell not in ran)
    rows += [Row(cell=cell, metric="presence", before="present" if cell in before else "", after="missing",
                 change="", verdict=NOT_COMPARED if allow_missing else REGRESSION,
                 note=("only in baseline" if cell in before else "selected, no record")
                 + (" (--allow-missing)" if allow_missing else ""), noteworthy=True) for cell in missing]
    only_in_current = tuple(cell for cell in after if cell not in before)
    # A cell the run selected and the baseline lacks has nothing to be judged against: under --strict that is a
    # regression (refresh the baseline), not a cell silently passed over.
    unbaselined = tuple(cell for cell in only_in_current
                        if strict and (selected is None or cell in scope or after[cell].cell in scope))
    rows += [Row(cell=cell, metric="presence", before="missing", after="present", change="", verdict=REGRESSION,
                 note="not in the baseline (--strict): nothing to judge it against; record the baseline again "
                      "(scripts/record_baseline.py) or leave the cell out of the selection", noteworthy=True)
             for cell in unbaselined]
    return Comparison(rows=tuple(rows), only_in_baseline=only_in_baseline, only_in_current=only_in_current,
                      warnings=tuple(_grouped(mismatches) + _grouped(notes)),
                      environment=tuple(_grouped(environment)), numerics=tuple(_grouped(judged)),
                      judged_by=tuple(_grouped(why)), cells_compared=len(common), missing=missing,
                      unbaselined=unbaselined)



def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def summary_line(comparison: Comparison) -> str:
    """``3 regressions in 2 cells, 1 improvement, 70 cells compared`` (+ cells of one side only).

    A deterministic figure that moved the good way is a regression noted ``changed: better`` (it must repeat until
    the baseline is refreshed), never an improvement: the line counts those among the regressions and says so.
    """
    regressions = comparison.regressions
    better = sum(r.note.startswith(CHANGED_BETTER) for r in regressions)
    parts = [f"{_plural(len(regressions), 'regression')} in {_plural(len({r.cell for r in regressions}), 'cell')}"
             + (f" ({better} of them {CHANGED_BETTER}: a deterministic figure must repeat until the baseline is "
                "refreshed)" if better else ""),
             _plural(len(comparison.improvements), "improvement"),
             f"{_plural(comparison.cells_compared, 'cell')} compared"]
    if comparison.missing:
        parts.append(f"{len(comparison.missing)} missing")
    if comparison.only_in_baseline:
        parts.append(f"{len(comparison.only_in_baseline)} only in baseline")
    if comparison.only_in_current:
        parts.append(f"{len(comparison.only_in_current)} only in current")
    return ", ".join(parts)


def headline(verdict: Verdict, *, output: Path | None = None) -> str:
    """The gate's verdict in one line, the last a gated pytest session prints: ``GATE FAILED: 19 regressions in 6
    cells (exit 1) — details above`` or ``gate: no regression (24 cells compared)``.

    Args:
        verdict: what :func:`run` decided.
        output: the file the table went to (``--output``), named as where the details are.
    """
    where = f"details above{f' / in {output}' if output is not None else ''}"
    comparison = verdict.comparison
    if comparison is None:
        return one_line(f"GATE FAILED: unusable input (exit {verdict.code}): {verdict.error}")
    regressions = comparison.regressions
    if regressions:
        better = sum(r.note.startswith(CHANGED_BETTER) for r in regressions)
        return one_line(f"GATE FAILED: {_plural(len(regressions), 'regression')} in "
                        f"{_plural(len({r.cell for r in regressions}), 'cell')}"
                        + (f", {better} of them {CHANGED_BETTER}" if better else "")
                        + f" (exit {EXIT_REGRESSION}) — {where}")
    text = f"gate: no regression ({summary_line(comparison).split(', ', 1)[1]})"
    if verdict.code == EXIT_INCOMPLETE_OUTPUT:
        text += f"; its --output was not written (exit {EXIT_INCOMPLETE_OUTPUT})"
    return one_line(text)


def rules_line(comparison: Comparison) -> str:
    """``rules: exact (1e-6): the numerics probe v1:… equals the baseline's (24 cells: …)``: which rule judged the
    compared cells' losses and why, on one line (empty without a compared cell)."""
    return one_line("rules: " + "; ".join(comparison.judged_by)) if comparison.judged_by else ""


def _md(text: str) -> str:
    # A pipe inside a cell would end it early.
    return text.replace("|", "\\|")


_COLUMNS = ("cell", "metric", "before", "after", "change", "verdict", "note")


def format_table(comparison: Comparison, markdown: bool = False, all_rows: bool = False) -> str:
    """The comparison as a table, then cells of one side only, warnings and the total line.

    Args:
        comparison: from ``compare_records``.
        markdown: a GitHub-flavoured markdown table (CI logs, PR comments) instead of aligned text.
        all_rows: every row; by default only noteworthy ones (see ``Row.noteworthy``).

    Returns:
        The text, ending with a newline.
    """
    rows = [r for r in comparison.rows if all_rows or r.noteworthy]
    # Every field comes from a results file someone else wrote: one line each, control characters made visible.
    cells = [[one_line(getattr(r, column)) for column in _COLUMNS] for r in rows]
    bullet = "- " if markdown else ""
    # First, before any verdict: numbers from two machines are read differently.
    lines = [f"{bullet}environment differs: {one_line(line)}" for line in comparison.environment]
    if comparison.environment:
        lines += [f"{bullet}time rows are advisory: time measured in another environment is not a regression"]
    if comparison.judged_by:
        lines.append(f"{bullet}{rules_line(comparison)}")
    lines += [f"{bullet}{one_line(line)}" for line in comparison.numerics]
    if comparison.environment or comparison.numerics or comparison.judged_by:
        lines.append("")
    if not rows:
        lines.append("no change beyond tolerance")
    elif markdown:
        lines.append("| " + " | ".join(_COLUMNS) + " |")
        lines.append("|" + "---|" * len(_COLUMNS))
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in cells]
    else:
        widths = [max(len(c) for c in column) for column in zip(_COLUMNS, *cells)]
        for row in (_COLUMNS, *cells):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    extra = [f"only in baseline: {', '.join(comparison.only_in_baseline)}"] if comparison.only_in_baseline else []
    extra += [f"only in current: {', '.join(comparison.only_in_current)}"] if comparison.only_in_current else []
    extra += [f"warning: {w}" for w in comparison.warnings]
    extra = [one_line(line) for line in extra]
    lines += ([""] + [bullet + line for line in extra]) if extra else []
    lines += ["", f"**{summary_line(comparison)}**" if markdown else summary_line(comparison)]
    return "\n".join(lines) + "\n"


def load_results(path: str | Path, *, strict: bool = False) -> tuple[list[CellRecord], list[str]]:
    """Read a results file for the gate.

    Args:
        path: a JSON-lines results file.
        strict: any unreadable line makes the file unusable (else it is skipped with a warning).

    Returns:
        The records in file order, and warnings about skipped lines.

    Raises:
        UnusableInput: missing or unreadable file, no readable record, or a bad line under ``strict``.
    """
    errors: list[str] = []
    try:
        records = list(read_records(path, errors=errors))
    except FileNotFoundError:
        raise UnusableInput(f"results file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, binary garbage
        raise UnusableInput(f"cannot read results file {path}: {exc}") from None
    if errors and (strict or not records):
        why = "no readable record" if not records else "unreadable line under --strict"
        raise UnusableInput(f"{path}: {why}: " + "; ".join(errors))
    if not records:
        raise UnusableInput(f"{path}: no records (empty file)")
    # Every bad line, each with its number: fixing a file should not take one rerun per line.
    warnings = [f"{path}: skipped {_plural(len(errors), 'unreadable line')}: " + "; ".join(errors)] if errors else []
    return records, warnings


def read_cells(path: str | Path) -> list[str]:
    """The cell ids of a ``--cells`` file: one per line, blank lines and ``#`` comments ignored.

    Raises:
        UnusableInput: the file cannot be read.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"cannot read --cells file {path}: {exc}") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def build_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser = parser_class(
        prog="gradeff compare", description="Compare two gradeff results files cell by cell and metric by metric; "
        "exit 0 without regression, 1 with one, 2 on unusable input, 74 when --output could not be written.")
    parser.add_argument("baseline", type=Path, help="results file of the reference run (JSON lines)")
    parser.add_argument("current", type=Path, help="results file of the run to judge")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table (CI logs, PR comments)")
    parser.add_argument("--all", dest="all_rows", action="store_true", help="every row, not only noteworthy ones")
    parser.add_argument("--output", type=Path, metavar="FILE", help="write the table to FILE (stdout gets the total)")
    parser.add_argument("--strict", action="store_true",
                        help="any unreadable line makes a file unusable, and a selected cell the baseline lacks is a "
                             "regression")
    parser.add_argument("--allow-mismatch", action="store_true", help="compare cells run with another profile/seed")
    parser.add_argument("--allow-missing", action="store_true",
                        help="list cells without a current record instead of counting them as regressions")
    # The default since missing cells became regressions; still accepted so older scripts keep working.
    parser.add_argument("--missing-is-regression", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cells", type=Path, metavar="FILE",
                        help="judge only the cells listed in FILE (one id per line: the cells the current run "
                             "selected); a listed cell without a current record is missing")
    parser.add_argument("--strict-environment", action="store_true",
                        help="exit 2 when the environments differ (CPU, cores, threads, device, torch, transformers) "
                             "instead of making time rows advisory")
    parser.add_argument("--time-ratio", metavar="R",
                        help=f"smallest slowdown of the best epoch that counts "
                             f"(default ×{TimeRule().ratio}, more where "
                             f"the baseline's epochs are noisy, up to ×{TimeRule().max_ratio})")
    parser.add_argument("--loose", action="store_true",
                        help=f"tolerances for GPU runs, which are not bit-reproducible: losses rtol {LOOSE_LOSS_RTOL}, "
                             f"held-out accuracy atol {LOOSE_ACCURACY_ATOL}")
    parser.add_argument("--perturbed", type=Path, metavar="FILE",
                        help="the baseline's perturbation runs (the same cells with another summation order), which "
                             "measure each cell's band on another numerics environment (default: BASELINE's "
                             "<stem>.perturbed.jsonl where it exists)")
    parser.add_argument("--band-factor", type=float, default=Band().factor, metavar="K",
                        help=f"band on another numerics environment: K times the largest change a perturbation run "
                             f"made to the losses of a cell of the same optimizer (default {Band().factor:g})")
    parser.add_argument("--band-floor", type=float, default=Band().floor, metavar="RTOL",
                        help=f"the band's smallest relative tolerance (default {Band().floor:g})")
    parser.add_argument("--rule", action="append", default=[], metavar="METRIC:KEY=VALUE",
                        help="override a rule setting, e.g. final_loss:rtol=0.01 or '*_bytes:rtol=0.05' (repeatable)")
    parser.add_argument("--ignore", action="append", default=[], metavar="METRIC",
                        help="leave a metric out, e.g. time_per_epoch on a noisy shared runner (repeatable)")
    return parser


def _rules(args: argparse.Namespace) -> tuple[Rule, ...]:
    """``DEFAULT_RULES`` with ``--loose``, ``--time-ratio``, then ``--rule`` (so explicit wins), then ``--ignore``."""
    overrides = [("*_loss", "rtol", str(LOOSE_LOSS_RTOL)),
                 ("heldout_accuracy", "atol", str(LOOSE_ACCURACY_ATOL))] if args.loose else []
    if args.time_ratio is not None:
        # A floor above the cap raises the cap with it: --time-ratio 3 means "nothing under ×3".
        cap = max(TimeRule().max_ratio, _number(args.time_ratio))
        overrides += [("time_per_epoch", "max_ratio", str(cap)), ("time_per_epoch", "ratio", args.time_ratio)]
    for spec in args.rule:
        metric, _, setting = spec.partition(":")
        key, equals, value = setting.partition("=")
        if not (metric and key and equals):
            raise ValueError(f"--rule {spec!r}: expected METRIC:KEY=VALUE")
        overrides.append((metric, key, value))
    rules = DEFAULT_RULES
    for pattern, key, value in overrides:
        rules = override_rules(rules, pattern, key, value)
    unknown = set(args.ignore) - {r.metric for r in rules}
    if unknown:
        raise ValueError(f"--ignore: unknown metric {sorted(unknown)}; metrics: {', '.join(r.metric for r in rules)}")
    return tuple(r for r in rules if r.metric not in args.ignore)


def _band(args: argparse.Namespace) -> Band:
    """The band of ``--band-factor`` and ``--band-floor`` (``ValueError`` naming a bad one)."""
    return Band(factor=args.band_factor, floor=args.band_floor)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0  # the ratio override itself then names the bad value


class _RaisingParser(argparse.ArgumentParser):
    """A parser that raises ``ValueError`` instead of printing usage and exiting."""

    def error(self, message: str):
        raise ValueError(message)


def arguments(baseline: str | Path, current: str | Path, options: str = "") -> argparse.Namespace:
    """The parsed command line ``gradeff compare BASELINE CURRENT OPTIONS`` (``options`` as one shell string).

    Raises:
        ValueError: an unknown option or a bad value, in argparse's words.
    """
    return build_parser(_RaisingParser).parse_args([str(baseline), str(current), *shlex.split(options)])


def parse_compare_args(text: str) -> tuple[Rule, ...]:
    """Check the options part of a ``gradeff compare`` command line (``--gradeff-compare-args``).

    The two file arguments are filled in with placeholders, so only the options are judged.

    Returns:
        The rules those options select.

    Raises:
        ValueError: an unknown option, a bad value or an unknown metric, in argparse's words.
    """
    return _rules(arguments("baseline", "current", text))


def _perturbed_file(args: argparse.Namespace) -> Path | None:
    """``--perturbed``, else the baseline's ``<stem>.perturbed.jsonl`` where there is one."""
    if args.perturbed is not None:
        return args.perturbed
    beside = perturbed_path(args.baseline)
    return beside if beside.is_file() else None


def _refuse_one_file_twice(args: argparse.Namespace, perturbed: Path | None) -> None:
    """Comparing a file with itself always passes, and an output on an input destroys it: refused up front."""
    inputs = {"the baseline": args.baseline, "the current file": args.current, "--perturbed": perturbed}
    clashes = colliding_outputs(inputs)
    if clashes:
        raise UnusableInput(f"{clashes[0]}: a run compared with itself always passes; give the current run's "
                            "results and a baseline recorded before it")
    if args.output is not None:
        clashes = colliding_outputs({"--output": args.output, **inputs, "--cells": args.cells})
        if clashes:
            raise UnusableInput(f"{clashes[0]}: the table would overwrite an input; give another --output")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the gate decided and what ``gradeff compare`` prints for it.

    Attributes:
        code: the exit code (``EXIT_OK``, ``EXIT_REGRESSION``, ``EXIT_UNUSABLE`` or ``EXIT_INCOMPLETE_OUTPUT``).
        text: what goes to standard output: the table, or with ``--output`` the total line ("" when unusable).
        error: the one-line reason for standard error (unusable input, an ``--output`` not written), or ``None``.
        comparison: the comparison itself; ``None`` when the input was unusable.
    """

    code: int
    text: str
    error: str | None = None
    comparison: Comparison | None = None


def run(args: argparse.Namespace, *, current_records: list[CellRecord] | None = None,
        selected_cells: list[str] | None = None) -> Verdict:
    """Judge a current run against a baseline, as ``gradeff compare`` does, without printing.

    Args:
        args: the command line's options (:func:`arguments`, or :func:`build_parser`'s parse).
        current_records: the current run's records, given instead of reading CURRENT (which then only names
            them): the pytest plugin judges its session in memory, so a disk too full to keep the session's
            files still gets its verdict.
        selected_cells: the cells the current run selected, given instead of a ``--cells`` file.

    Raises:
        ValueError: a bad ``--rule`` or band option (:func:`main` reports those as usage errors first).
    """
    rules, band = _rules(args), _band(args)
    try:
        perturbed_file = _perturbed_file(args)
        _refuse_one_file_twice(args, perturbed_file)
        baseline, warnings = load_results(args.baseline, strict=args.strict)
        perturbed, notes = load_results(perturbed_file, strict=args.strict) if perturbed_file else ([], [])
        selected = read_cells(args.cells) if args.cells is not None else selected_cells
        if current_records is not None:
            current, more = current_records, []
        elif selected is not None and _empty(args.current):
            current, more = [], []
        else:
            current, more = load_results(args.current, strict=args.strict)
        comparison = compare_records(baseline, current, rules, allow_mismatch=args.allow_mismatch,
                                     allow_missing=args.allow_missing and not args.missing_is_regression,
                                     selected=selected, strict_environment=args.strict_environment,
                                     perturbed=perturbed, band=band, strict=args.strict)
        # Disjoint files are the wrong files; a selected slice that recorded nothing is a regression.
        if comparison.cells_compared == 0 and not (selected is not None and comparison.missing) \
                and not comparison.unbaselined:
            raise UnusableInput(f"no cell in common between {args.baseline} ({len(comparison.only_in_baseline)} cells) "
                                f"and {args.current} ({len(comparison.only_in_current)} cells)")
    except UnusableInput as exc:
        return Verdict(code=EXIT_UNUSABLE, text="", error=one_line(exc))
    comparison = replace(comparison, warnings=(*warnings, *notes, *more, *comparison.warnings))
    text = format_table(comparison, markdown=args.markdown, all_rows=args.all_rows)
    code = EXIT_REGRESSION if comparison.regressions else EXIT_OK
    if args.output is None:
        return Verdict(code=code, text=text, comparison=comparison)
    try:
        write_text(args.output, text)
    except OutputError as exc:
        # The verdict stands and is printed; only the file is missing (a regression still exits 1).
        return Verdict(code=code or EXIT_INCOMPLETE_OUTPUT, text=summary_line(comparison) + "\n",
                       error=one_line(exc), comparison=comparison)
    return Verdict(code=code, text=summary_line(comparison) + "\n", comparison=comparison)


def main(argv: list[str] | None = None) -> int:
    """Run the gate: ``gradeff compare BASELINE CURRENT [options]``.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        0 no regression, 1 regression, 2 unusable input (the reason is on stderr), 74 no regression but
        ``--output`` could not be written (the total line is printed all the same).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        try:
            _rules(args)
            _band(args)
        except ValueError as exc:
            parser.error(str(exc))
    except SystemExit as exc:  # argparse exits; a library caller wants the code
        return exc.code if isinstance(exc.code, int) else EXIT_UNUSABLE
    verdict = run(args)
    if verdict.error is not None:
        print(f"gradeff compare: error: {verdict.error}", file=sys.stderr)
    print(verdict.text, end="")
    return verdict.code


def _empty(path: Path) -> bool:
    # A run whose every selected cell died before recording leaves an empty file: that is a
    # regression of every cell (all missing), not unusable input.
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
