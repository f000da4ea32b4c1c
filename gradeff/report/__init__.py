"""Records → view model → HTML: the self-contained gradeff report.

Everything the page shows is decided in Python: which cells, in which order, which one is best,
how each number reads (units, ``n/a``, "diverged at step 37"). The page is a function of the set of
records (their order does not matter), opens with the Answer (:mod:`gradeff.report.answer`, the same
verdict lines as the terminal summary), and each section reads its own study's records only. This module assembles
the view
(:mod:`gradeff.report.view`) from the tables (:mod:`gradeff.report.tables`), figures
(:mod:`gradeff.report.figures`), context (:mod:`gradeff.report.context`) and the sections of the
PEFT study (:mod:`gradeff.report.peft`, :mod:`gradeff.report.inference`), the memory study
(:mod:`gradeff.report.memory`) and the papers' claims (:mod:`gradeff.report.claims`), and renders it
(:mod:`gradeff.report.render`) with the Jinja templates of ``reports/templates/``, which only loop and
print; they run with autoescape on and ``StrictUndefined``, so a field name typo fails a test instead of
printing nothing. :mod:`gradeff.report.csv_export` writes the flat CSV table instead.

:func:`write_report` is the entry point for the pytest plugin and the CLI (``gradeff report``:
:mod:`gradeff.report.command`).

May import: :mod:`gradeff.analysis`, :mod:`gradeff.records` and everything below them; never the gate or the cell.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from gradeff import analysis
from gradeff.analysis import group_by_model, naming, scope
from gradeff.analysis import memory as memory_analysis
from gradeff.analysis import peft as peft_analysis
from gradeff.analysis.answer import AnswerOptions
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES
from gradeff.records.formatting import NA
from gradeff.records.outputs import write_text, write_with
from gradeff.records.results import CellRecord, record_field
from gradeff.report import context, figures, table_cells, tables
from gradeff.report.answer import build_answer_view, build_real_view
from gradeff.report.claims import build_claims_view
from gradeff.report.csv_export import write_csv
from gradeff.report.memory import build_memory_view
from gradeff.report.papers import PAPERS
from gradeff.report.peft import build_peft_view
from gradeff.report.render import TEMPLATE, jinja_environment, render_html
from gradeff.report.view import (
    SECTIONS,
    ClaimsView,
    ModelView,
    ReportView,
    Table,
    display_name,
    distinct_text,
    html_id,
    status_text,
)
from gradeff.studies.grid import GRIDS

__all__ = [
    "MAIN_MISSING_NOTE", "SECTIONS", "TEMPLATE", "build_view", "jinja_environment", "render_html", "status_text",
    "write_report",
]

MAIN_MISSING_NOTE = ("No records of the main study (optimizers × memory strategies, read by training loss) in "
                     "these results.")


def build_view(
    records: Iterable[CellRecord],
    *,
    skipped_lines: Sequence[str] = (),
    sources: Sequence[str] = (),
    title: str = "gradeff report",
    generated_at: str | None = None,
    answer_options: AnswerOptions | None = None,
    export: str = "",
) -> ReportView:
    """Turn records into the report's view model: a function of the *set* of records.

    The records are made canonical first (:func:`gradeff.analysis.runs.canonical`: one record per cell and
    seed, the newest, in the registries' order), so the same records in any order give the same view. Each
    section reads its own studies' records only (:attr:`gradeff.report.view.Section.studies`), every cell
    over all its seeds.

    Args:
        records: records in any order; a cell read twice with the same seed keeps its newest record.
        skipped_lines: ``path:line: reason`` of unreadable lines, listed in the report.
        sources: the results files read (for the overview).
        title: page title.
        generated_at: timestamp text; defaults to now (UTC).
        export: the file name of the flat table written next to the page, which the appendix links to
            (``""``: none; the appendix says how to write one).

    Returns:
        The view model, ready for :func:`render_html`.
    """
    records = list(records)
    kept, superseded = analysis.canonical(records)
    studies = scope.split(kept)
    main = studies["main"]
    groups = group_by_model(main)
    runs_by_model = {model: analysis.by_cell(group) for model, group in groups.items()}
    models = list(groups)
    optimizers = analysis.order_keys((r.optimizer for r in main), OPTIMIZERS)
    strategies = analysis.order_keys((r.strategy for r in main), STRATEGIES)
    optimizers_of = {m: analysis.order_keys((r.optimizer for r in groups[m]), OPTIMIZERS) for m in models}
    model_views = []
    for index, model in enumerate(models):
        # What ran, not what it stands for: "Llama-3.2-1B-shaped, random init, 0.08 M params".
        slug, name, runs = html_id(model, index), naming.what_ran(groups[model][0]), runs_by_model[model]
        pareto, front = figures.pareto_figure(slug, name, runs, optimizers, strategies)
        counts = Counter(r.status for r in groups[model])
        seeds = f", {len(groups[model])} runs over seeds" if len(groups[model]) > len(runs) else ""
        model_views.append(ModelView(
            key=model, name=name, slug=slug,
            summary=f"{len(runs)} cells{seeds}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
                    + f"; trained on {naming.dataset_title(groups[model][0])}",
            tables=(*(tables.grid_table(slug, name, table_cells.resolve(k, groups[model]), runs, optimizers_of[model],
                                        strategies) for k in tables.grid_metrics_for(groups[model])),
                    tables.target_table(slug, runs, optimizers_of[model], strategies)),
            curves=figures.loss_curves_figure(slug, name, runs, optimizers, strategies),
            pareto=pareto, pareto_cells=front, memory=figures.memory_figure(slug, name, runs)))
    recommended, wins = tables.recommendation_table(models, runs_by_model)
    claims = build_claims_view(kept)
    cells = analysis.by_cell(kept)
    return ReportView(
        title=title,
        generated_at=generated_at or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        papers=PAPERS, export=export,
        sections=SECTIONS, section_by_id={section.id: section for section in SECTIONS},
        section_cells={section.id: tuple(r.cell for r in cells.values() if not section.studies
                                         or scope.study_of(r.first) in section.studies) for section in SECTIONS},
        answer=build_answer_view(kept, answer_options),
        real=build_real_view(studies["real"]),
        overview=_overview(kept, sources, superseded, skipped_lines, claims),
        notices=_notices(kept, superseded, skipped_lines),
        recommendations=recommended, wins=wins,
        best_loss=tables.best_loss_table(models, runs_by_model), best=tables.best_table(models, runs_by_model),
        protocols=tables.protocol_tables(records),
        ratios=tables.ratio_tables(models, optimizers, main),
        models=tuple(model_views),
        heatmap=figures.heatmap_figure(models, runs_by_model, optimizers_of, strategies),
        main_note="" if main else MAIN_MISSING_NOTE,
        peft=build_peft_view(studies["peft"] + studies["baselines"]),
        memory_strategies=build_memory_view(studies["memory"], studies["peft"]),
        claims=claims,
        failures=context.failures_table(kept),
        skipped_lines=tuple(skipped_lines), superseded=superseded,
        runs=context.runs_table(kept), environments=context.environment_tables(kept),
        hparams=_hparams_tables(kept),
        methods=context.methods(kept),
    )


def _overview(records: Sequence[CellRecord], sources: Sequence[str], superseded: int,
              skipped_lines: Sequence[str], claims: ClaimsView) -> tuple[tuple[str, str], ...]:
    counts = Counter(r.status for r in records)
    cells = len({r.cell for r in records})
    repeats = f" ({len(records)} runs over seeds)" if len(records) > cells else ""
    return (
        ("results files", ", ".join(sources) or NA),
        ("cells", f"{cells}{repeats}"),
        ("statuses", ", ".join(f"{n} {s}" for s, n in counts.items()) or NA),
        ("grids", _grids_text(records)),
        ("models", "; ".join(naming.what_ran(first) for first in _first_of_each_model(records)) or NA),
        ("profile", distinct_text(r.profile for r in records) if records else NA),
        ("seed", distinct_text(r.seed for r in sorted(records, key=lambda r: r.seed)) if records else NA),
        ("device", distinct_text(r.device for r in records) if records else NA),
        ("inference cost", _inference_text(records)),
        ("claims", _claims_text(claims)),
        *((("budgets out of reach", findings),) if (findings := _findings_text(records)) else ()),
        ("superseded records", str(superseded)),
        ("unreadable lines", str(len(skipped_lines))),
    )


def _inference_text(records: Sequence[CellRecord]) -> str:
    carried = sum(bool(peft_analysis.inference_of(r)) for r in records)
    if not carried:
        return f"{NA}: no record carries it"
    estimated = sum(record_field(r, "inference", "energy_source") == "estimate" for r in records)
    same = sum(peft_analysis.measured_on_standard(r) for r in records)
    return (f"{carried} of {len(records)} cells"
            + (f" ({same} more deploy their standard cell's model bit for bit, measured there)" if same else "")
            + ": latency at batch 1, throughput, peak inference memory, energy per "
            "image and MACs, with the NetScore family (NetScore, NS-E, NS-M, NS#) in dB in the papers' units: "
            "compare scores, never read one alone"
            + (f"; {estimated} cell(s) on estimated energy, so their NS-E and NS# are estimated (est.)" if estimated
               else "") + " (see 'Fine-tuning methods' and 'How each number was measured')")


def _claims_text(claims: ClaimsView) -> str:
    if not claims.summary:
        return NA
    return (f"{claims.summary}: each claim read on its own study's cells, over every seed, its effect held against "
            "the paper's range, widened only by its own 95 % interval, and against the seed spread (see 'Claims')")


def _hparams_tables(records: Sequence[CellRecord]) -> tuple[Table, ...]:
    # One table per grid: the studies set different hyper-parameters (the PEFT study's method settings).
    by_grid: dict[str, list[CellRecord]] = {}
    for record in records:
        by_grid.setdefault(record.grid, []).append(record)
    if not by_grid:
        return (context.hparams_table([], {}, table_id="hparams"),)
    tables = []
    for index, (grid, group) in enumerate(by_grid.items()):
        groups = group_by_model(group)
        tables.append(context.hparams_table(list(groups), groups, grid=grid,
                                            table_id=html_id(grid, index, prefix="hparams-")))
    return tuple(tables)


def _first_of_each_model(records: Sequence[CellRecord]) -> list[CellRecord]:
    """The first record of each model, in the records' order: what ran, once per model."""
    first: dict[str, CellRecord] = {}
    for record in records:
        first.setdefault(record.model, record)
    return list(first.values())


def _grids_text(records: Sequence[CellRecord]) -> str:
    counts = Counter(r.grid for r in records)
    return "; ".join(f"{grid}: {n} cell{'' if n == 1 else 's'}, {display_name(GRIDS, grid)}"
                     for grid, n in counts.items()) or NA


def _notices(records: Sequence[CellRecord], superseded: int, skipped_lines: Sequence[str]) -> tuple[str, ...]:
    notices = []
    if not records:
        notices.append("No records: nothing to report.")
    if len({r.profile for r in records}) > 1:
        notices.append("Records from several profiles are mixed: cells of different sizes are compared.")
    if len(records) > len({r.cell for r in records}):
        notices.append("Cells were run with several seeds: every table shows each cell's mean ± 95 % t-interval over "
                       "its seeds that ended ok, and every comparison (winners, ratios, claims) pairs cells seed by "
                       "seed.")
    if superseded:
        notices.append(f"{superseded} earlier record(s) of re-run cells were replaced by the later ones.")
    if skipped_lines:
        notices.append(f"{len(skipped_lines)} unreadable line(s) were skipped: see 'Unreadable lines'.")
    # A budget cell refused as oom is what the memory study measures (see _findings_text), not a fault to flag.
    failed = sum(r.status != "ok" and not memory_analysis.expected_oom(r) for r in records)
    if failed:
        notices.append(f"{failed} run(s) did not end ok: their numbers are replaced by their status "
                       "(see 'Failed and skipped cells').")
    return tuple(notices)


def _findings_text(records: Sequence[CellRecord]) -> str:
    refused = [r for r in records if memory_analysis.expected_oom(r)]
    if not refused:
        return ""
    return (f"{len(refused)} budget cell(s) ended oom by design: even the most frugal checkpointing plan does not "
            "fit their memory budget, so they were refused before training; which budgets are out of reach is "
            "the finding (see 'Memory strategies')")


def write_report(
    records: Iterable[CellRecord],
    path: str | Path,
    *,
    skipped_lines: Sequence[str] = (),
    sources: Sequence[str] = (),
    title: str = "gradeff report",
    templates: str | os.PathLike[str] | None = None,
    answer_options: AnswerOptions | None = None,
) -> Path:
    """Write the HTML report of ``records`` to ``path`` (a CSV table instead when ``path`` ends in ``.csv``).

    Next to an HTML page goes its flat table of every cell, the page's name with ``.cells.csv``
    (``report.cells.csv`` beside ``report.html``), linked from the page's appendix.

    This is what the pytest plugin calls at session end (``--gradeff-report PATH``) and what
    ``gradeff report`` runs.

    Args:
        records: cell records, in reading order.
        path: output file; parent directories are created.
        skipped_lines: unreadable lines to list in the report.
        sources: the results files the records came from.
        title: page title.
        templates: a folder of templates searched before the packaged ones (default ``$GRADEFF_TEMPLATES``).
        answer_options: the Answer's margins and the order of its "use this" choice (default: the defaults).

    Returns:
        The path written.

    Raises:
        NotADirectoryError: the template folder named does not exist.
        gradeff.records.outputs.OutputError: the file could not be written (disk full, I/O error); it is left as it was.
    """
    # Written whole, then renamed over the target: never seen half-written by a browser or a CI upload.
    if Path(path).suffix.lower() == ".csv":
        return write_with(path, lambda handle: write_csv(records, handle))
    records = list(records)
    # Every cell's numbers go in a flat table beside the page, which the page links to: the page itself keeps the
    # figures and the tables a reader looks at (under 500 KB for the default run, where every table inline was
    # 1.4 MB). Named after the page with a suffix of its own, so that it never takes the name of a table the user
    # keeps beside it (results.html, results.csv). The page first: a path that cannot be written is the one asked for.
    export = Path(path).with_name(Path(path).stem + ".cells.csv")
    view = build_view(records, skipped_lines=skipped_lines, sources=sources, title=title,
                      answer_options=answer_options, export=export.name)
    written = write_text(path, render_html(view, templates=templates))
    write_with(export, lambda handle: write_csv(records, handle))
    return written
