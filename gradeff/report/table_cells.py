"""The cells every results table shows (the main study's, the PEFT study's, the Answer's): one record's metric,
a cell over its seeds with its place in the ranking, a paired ratio, as :class:`~gradeff.report.view.Cell` values.

A value is the mean over the seeds that ended ok, with the half-width of its 95 % t-interval and ``n`` where there
are several; a cell whose every seed failed shows its status instead of a number, an unmeasured one ``n/a`` with
the reason in its tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from gradeff import analysis
from gradeff.analysis import METRICS, Metric
from gradeff.analysis.margins import metric_margin
from gradeff.analysis.metrics import quality_metric
from gradeff.analysis.pairing import EQUIVALENT, IDENTICAL, OPEN, PairedRatio, rank
from gradeff.analysis.runs import CellRuns
from gradeff.records.formatting import NA, format_ratio, format_value
from gradeff.records.results import CellRecord
from gradeff.report.view import (
    Cell,
    status_text,
)

__all__ = ["metric_cell", "places", "ratio_cell", "resolve", "runs_cell"]

_PLACE_TITLES = {"best": "best mean over seeds", IDENTICAL: "the same numbers as the best on every seed",
                 EQUIVALENT: "equivalent to the best: within the question's margin, with 95 % confidence",
                 OPEN: "open against the best: neither separated from it nor shown equivalent yet"}


def resolve(key: str, records: Sequence[CellRecord]) -> Metric:
    """``quality`` → the records' quality metric; any other key → its metric."""
    return quality_metric(records) if key == "quality" else METRICS[key]


def metric_cell(record: CellRecord | None, metric: Metric, best: float | None, *,
                best_title: str = "best of this model",
                text: Callable[[CellRecord, float], tuple[str, str]] | None = None) -> Cell:
    """One table cell of one record's metric: its value (best highlighted), a failed cell's status, or ``n/a``.

    Args:
        record: the cell's record, or ``None`` when the results do not have it.
        metric: what the cell shows.
        best: the best value among the table's cells, highlighted where equal.
        best_title: the tooltip of the best cell.
        text: ``(record, value) → (text, second line)``; default: the value in the metric's unit.
    """
    if record is None:
        return Cell(text=NA, css="na", title="cell not in the results")
    if record.status != "ok":
        return Cell(text=status_text(record), css=f"status {record.status}", title=record.detail)
    value = analysis.metric_value(record, metric)
    if value is None:
        odd = analysis.nonfinite_value(record, metric)
        if odd is not None:
            # Measured, and the measurement is not a number: shown as such, never as "n/a" (not measured).
            return Cell(text="NaN" if math.isnan(odd) else "inf" if odd > 0 else "-inf", css="nonfinite",
                        title="measured, but not a finite number: left out of every best, mean and ranking")
        return Cell(text=NA, css="na", title="not measured")
    main, sub = text(record, value) if text is not None else (format_value(value, metric.unit), "")
    is_best = best is not None and value == best
    return Cell(text=main, sub=sub, css="best" if is_best else "", title=best_title if is_best else "")


def places(runs: Mapping[str, CellRuns], metric: Metric) -> dict[str, str]:
    """Each first-place cell of a ranking over seeds: ``best``, ``identical`` (to the best), ``equivalent`` or
    ``open``."""
    margin = metric_margin(metric)
    ranking = rank({cell: r.values(metric) for cell, r in runs.items()}, goal=metric.goal,
                   resolution=metric.resolution, fingerprints={cell: r.fingerprint() for cell, r in runs.items()},
                   margin=None if margin is None else margin.absolute,
                   relative_margin=None if margin is None else margin.relative)
    if ranking is None:
        return {}
    found = ({cell: IDENTICAL for cell in ranking.identical}
             | {cell: EQUIVALENT for group in ranking.equivalent for cell in group}
             | {cell: OPEN for group in ranking.open for cell in group})
    found[ranking.best] = "best"
    return found


def runs_cell(cell_runs: CellRuns | None, metric: Metric, place: str = "",
              text: Callable[[CellRuns, float], tuple[str, str]] | None = None) -> Cell:
    """A cell over its seeds: the mean of its ok seeds (± 95 % half-width and ``n`` with several), its status
    where no seed ended ok, ``n/a`` where none measured it.

    Args:
        cell_runs: the cell's records over seeds, or ``None`` when the results do not have it.
        metric: what the cell shows.
        place: its place in the table's ranking (``best``, ``identical``, ``equivalent``, ``open`` or ``""``): the
            first three are the first place, highlighted; an open cell is marked as still in contention.
        text: ``(runs, mean) → (text, second line)``; default: the mean in the metric's unit.
    """
    if cell_runs is None:
        return Cell(text=NA, css="na", title="cell not in the results")
    if not cell_runs.ok:
        worst = cell_runs.runs[-1]
        return Cell(text=status_text(worst) if len(cell_runs.runs) == 1 else cell_runs.status,
                    css=f"status {worst.status}", title=worst.detail)
    spread = cell_runs.interval(metric)
    if spread is None:
        if len(cell_runs.runs) == 1:
            return metric_cell(cell_runs.first, metric, None)
        return Cell(text=NA, css="na", title="not measured")
    main, sub = text(cell_runs, spread.mean) if text is not None else (format_value(spread.mean, metric.unit), "")
    if spread.n > 1:
        sub = " ".join(part for part in (sub, f"± {format_value(spread.half_width, metric.unit)} (n={spread.n})")
                       if part)
    failed = len(cell_runs.runs) - len(cell_runs.ok)
    if failed:
        sub += f"{', ' if sub else ''}{failed} seed{'s' * (failed > 1)} not ok"
    css = "open" if place == OPEN else "best" if place else ""
    return Cell(text=main, sub=sub, css=css, title=_PLACE_TITLES.get(place, ""))


def ratio_cell(ratio: PairedRatio | None, reason: str) -> Cell:
    """A ratio over seeds: its mean, ``identical`` where both sides are the same numbers, the interval and ``n``.

    Bold (better) or italic (worse) only where the interval over several seeds excludes 1, or, with one seed,
    where the ratio reads other than 1.00× as printed.
    """
    if ratio is None:
        return Cell(text=NA, css="na", title=reason)
    spread = ratio.interval
    if ratio.identical:
        return Cell(text=format_ratio(spread.mean), sub=f"identical (n={spread.n})", css="identical",
                    title="the same numbers on every seed")
    shown = round(spread.mean, 2)  # judged as printed: 0.999 reads "1.00×" and must not look like a win
    decided = ratio.significant if spread.n > 1 else shown != 1
    css = "" if not decided else "better" if shown < 1 else "worse" if shown > 1 else ""
    sub = f"{(spread.mean - 1) * 100:+.0f} %" + (f", ± {spread.half_width:.2f} (n={spread.n})" if spread.n > 1 else "")
    return Cell(text=format_ratio(spread.mean), sub=sub, css=css)


