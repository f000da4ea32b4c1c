"""The regression gate's command: compare a baseline results file with a current one, metric by metric.

This module reads the files and the options, and turns the comparison into a verdict, a printed table and an exit
code; the comparison itself is :mod:`gradeff.gate.comparison`, how each cell's numbers are judged
:mod:`gradeff.gate.judgement`, and its text :mod:`gradeff.gate.compare_table`.

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
from dataclasses import dataclass, replace
from pathlib import Path

from gradeff.gate.compare_table import format_table, summary_line
from gradeff.gate.comparison import Comparison, UnusableInput, compare_records
from gradeff.gate.portability import Band, perturbed_path
from gradeff.gate.rules import (
    CHANGED_BETTER,
    DEFAULT_RULES,
    LOOSE_ACCURACY_ATOL,
    LOOSE_LOSS_RTOL,
    Rule,
    TimeRule,
    override_rules,
)
from gradeff.records.formatting import plural
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, colliding_outputs, write_text
from gradeff.records.results import CellRecord
from gradeff.records.safe_text import one_line
from gradeff.records.store import read_records

__all__ = [
    "DEFAULT_RULES", "EXIT_INCOMPLETE_OUTPUT", "EXIT_OK", "EXIT_REGRESSION", "EXIT_UNUSABLE", "Verdict", "arguments",
    "build_parser", "headline", "load_results", "main", "parse_compare_args", "read_cells", "run",
]

EXIT_OK, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


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
    warnings = [f"{path}: skipped {plural(len(errors), 'unreadable line')}: " + "; ".join(errors)] if errors else []
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
        return one_line(f"GATE FAILED: {plural(len(regressions), 'regression')} in "
                        f"{plural(len({r.cell for r in regressions}), 'cell')}"
                        + (f", {better} of them {CHANGED_BETTER}" if better else "")
                        + f" (exit {EXIT_REGRESSION}) — {where}")
    text = f"gate: no regression ({summary_line(comparison).split(', ', 1)[1]})"
    if verdict.code == EXIT_INCOMPLETE_OUTPUT:
        text += f"; its --output was not written (exit {EXIT_INCOMPLETE_OUTPUT})"
    return one_line(text)

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
