"""``gradeff report RESULTS… -o FILE``: the options checked, the results files loaded, and the HTML report, or the
CSV or parquet table, written to a file or to standard output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gradeff.analysis import scope
from gradeff.analysis.answer import AnswerOptions
from gradeff.analysis.choice import CHOICE_QUESTIONS, parse_prefer
from gradeff.analysis.margins import parse_margins
from gradeff.analysis.scope import UnknownGridError
from gradeff.records.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTPUT, error
from gradeff.records.loading import ResultsFileError, load_results
from gradeff.records.outputs import OutputError, colliding_outputs, write_with
from gradeff.report import build_view, render_html, write_report
from gradeff.report.csv_export import write_csv
from gradeff.report.dataframe import write_parquet
from gradeff.report.render import resolve_template_folder

if TYPE_CHECKING:
    from gradeff.records.loading import LoadedResults

__all__ = ["run_report"]

# A table format is chosen by the output's suffix too (an explicit --format wins).
_TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet"}


def run_report(args: argparse.Namespace) -> int:
    by_suffix = _TABLE_SUFFIXES.get(Path(args.output).suffix.lower()) if args.output else None
    if args.format == "html" and by_suffix:
        error(f"{args.output} ends in .{by_suffix} but --format is html; pass --format {by_suffix} or another name")
        return EXIT_BAD_INPUT
    fmt = args.format or by_suffix or "html"
    output = args.output or f"report.{fmt}"
    if fmt == "parquet" and output == "-":
        error("parquet is a binary file: give -o FILE.parquet, or --format csv for stdout")
        return EXIT_BAD_INPUT
    try:
        margins = parse_margins(args.margin)
    except ValueError as exc:
        error(f"--margin: {exc}")
        return EXIT_BAD_INPUT
    try:
        options = AnswerOptions(margins=margins, prefer=parse_prefer(args.prefer) if args.prefer else CHOICE_QUESTIONS)
    except ValueError as exc:
        error(f"--prefer {args.prefer}: {exc}")
        return EXIT_BAD_INPUT
    templates = None
    if fmt == "html":
        try:
            templates = resolve_template_folder(args.templates)
        except NotADirectoryError as exc:
            error(str(exc))
            return EXIT_BAD_INPUT
    try:
        loaded = load_results(args.results)
    except ResultsFileError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    for line in loaded.skipped_lines:
        print(f"gradeff: warning: skipped unreadable line {line}", file=sys.stderr)
    try:
        # Before anything is written: a record of a grid no study reads would otherwise fail the report half-way.
        scope.split(loaded.records)
    except UnknownGridError as exc:
        error(f"{exc}: refused rather than read as another study's records")
        return EXIT_BAD_INPUT

    if output != "-":
        # The report written over a results file it reads would destroy the records it shows.
        clashes = colliding_outputs({"-o": output} | {f"results file {i + 1}": p for i, p in enumerate(args.results)})
        if clashes:
            error(f"{clashes[0]}: the report would overwrite the records; give another -o")
            return EXIT_BAD_INPUT
    try:
        if output == "-":
            _write_stdout(fmt, args.title, loaded, templates, options)
        else:
            _write_file(fmt, args.title, loaded, output, templates, options)
    except OSError as exc:
        error(str(exc) if isinstance(exc, OutputError) else f"cannot write {output}: {exc.strerror or exc}")
        return EXIT_OUTPUT
    if output != "-":
        print(f"gradeff: wrote {output} ({len(loaded.records)} records from {len(loaded.sources)} file(s))",
              file=sys.stderr)
    return EXIT_OK


def _write_file(fmt: str, title: str, loaded: LoadedResults, output: str, templates: Path | None,
                options: AnswerOptions) -> None:
    path = Path(output)
    if fmt == "parquet":
        write_parquet(loaded.records, path)
        return
    if fmt == "csv" and path.suffix.lower() != ".csv":
        # write_report picks CSV by suffix; an explicit --format csv wins over the file name.
        write_with(path, lambda handle: write_csv(loaded.records, handle))
        return
    write_report(loaded.records, path, skipped_lines=loaded.skipped_lines, sources=loaded.sources, title=title,
                 templates=templates, answer_options=options)


def _write_stdout(fmt: str, title: str, loaded: LoadedResults, templates: Path | None,
                  options: AnswerOptions) -> None:
    if fmt == "csv":
        write_csv(loaded.records, sys.stdout)
        return
    view = build_view(loaded.records, skipped_lines=loaded.skipped_lines, sources=loaded.sources, title=title,
                      answer_options=options)
    sys.stdout.write(render_html(view, templates=templates))
