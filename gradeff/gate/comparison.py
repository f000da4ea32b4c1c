"""Two sets of records compared cell by cell (seed by seed where a cell ran several seeds): which cells pair up,
which refuse to be compared (another profile, seed, precision or experiment), how each cell is judged
(:mod:`gradeff.gate.judgement`), one row per cell and rule, and the cells missing on one side.

What counts as a regression: a baseline cell (or a selected one) without a current record, any change of status, a
figure beyond its rule's tolerance (:mod:`gradeff.gate.rules`), and a time beyond the time rule only where both runs
share an environment (:data:`ENVIRONMENT_KEYS`; elsewhere time rows are advisory).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, replace

from gradeff.gate.judgement import judge
from gradeff.gate.portability import Band, perturbations, sensitivities
from gradeff.gate.rules import ADVISORY, DEFAULT_RULES, IMPROVEMENT, NOT_COMPARED, REGRESSION, Row, Rule, TimeRule
from gradeff.records.formatting import plural
from gradeff.records.results import CellRecord, record_field
from gradeff.records.store import latest_by_run

__all__ = ["ENVIRONMENT_KEYS", "Comparison", "MismatchError", "UnusableInput", "compare_records", "paired_runs"]

# What makes two runs' times comparable: the same processor, as many cores and threads, the same
# device and the same libraries (a new torch may change kernels, hence speed and last digits).
ENVIRONMENT_KEYS = ("cpu", "cpu_id", "cpu_capability", "cpu_count", "torch_threads", "device", "device_name",
                    "torch", "transformers")


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
        lines.append(f"{message} ({plural(len(cells), 'cell')}: {shown})")
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
    _refuse_foreign_perturbations(common, before, runs)
    measured = sensitivities(latest_by_run(baseline).values(), perturbed)
    judgements = {cell: judge(before[cell], runs.get(key := (before[cell].cell, before[cell].seed), []),
                                   after[cell], rules, band, measured.get(key)) for cell in common}
    found = _Findings.of(common, before, after, judgements)
    if found.mismatches and not allow_mismatch:
        raise MismatchError("refusing to compare: " + "; ".join(_grouped(found.mismatches))
                            + " (pass --allow-mismatch to compare anyway)")
    if found.environment and strict_environment:
        raise MismatchError("refusing to compare under --strict-environment: "
                            + "; ".join(_grouped(found.environment)))
    elsewhere = {cell for cells in found.environment.values() for cell in cells}
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
    rows += _missing_rows(missing, before, allow_missing=allow_missing)
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
                      warnings=tuple(_grouped(found.mismatches) + _grouped(found.notes)),
                      environment=tuple(_grouped(found.environment)), numerics=tuple(_grouped(found.judged)),
                      judged_by=tuple(_grouped(found.why)), cells_compared=len(common), missing=missing,
                      unbaselined=unbaselined)


def _refuse_foreign_perturbations(common: list[str], before: dict[str, CellRecord], runs: dict) -> None:
    """Raise :class:`UnusableInput` where a common cell's perturbation runs are not its baseline record's experiment."""
    foreign = defaultdict(list)
    for cell in common:
        for run in runs.get((before[cell].cell, before[cell].seed), []):
            for problem in _same_experiment(before[cell], run):
                foreign[problem].append(cell)
    if foreign:
        raise UnusableInput("perturbation runs of another experiment: " + "; ".join(_grouped(foreign))
                            + "; record the baseline and its perturbation runs together (scripts/record_baseline.py)")


@dataclass(frozen=True, slots=True)
class _Findings:
    """What the common cells' pairs say besides their rows, each message with the cells it holds for."""

    mismatches: dict[str, list[str]]
    notes: dict[str, list[str]]
    environment: dict[str, list[str]]
    judged: dict[str, list[str]]
    why: dict[str, list[str]]

    @classmethod
    def of(cls, common: list[str], before: dict[str, CellRecord], after: dict[str, CellRecord],
           judgements: dict) -> _Findings:
        found = cls(*(defaultdict(list) for _ in range(5)))
        for cell in common:
            found.why[judgements[cell].why].append(cell)
            refusals, warnings = _differences(before[cell], after[cell])
            for message in refusals:
                found.mismatches[message].append(cell)
            for message in warnings:
                found.notes[message].append(cell)
            for message in _environment_differences(judgements[cell].reference, after[cell]).values():
                found.environment[message].append(cell)
            if judgements[cell].reference is not before[cell]:
                # Recorded two cells at a time (scripts/record_baseline.py): its numbers are the yardstick, its time
                # is not.
                found.environment["the current run's numerics are a perturbation run's: compared with it exactly, "
                                  "its time recorded under pytest -n 2"].append(cell)
            if judgements[cell].numerics:
                found.judged[judgements[cell].numerics].append(cell)
        return found


def _missing_rows(missing: tuple[str, ...], before: dict[str, CellRecord], *, allow_missing: bool) -> list[Row]:
    return [Row(cell=cell, metric="presence", before="present" if cell in before else "", after="missing",
                change="", verdict=NOT_COMPARED if allow_missing else REGRESSION,
                note=("only in baseline" if cell in before else "selected, no record")
                + (" (--allow-missing)" if allow_missing else ""), noteworthy=True) for cell in missing]
