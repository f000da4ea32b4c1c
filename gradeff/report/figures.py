"""The report's figures: records → plot data → inline SVG (:mod:`gradeff.report.plots`) → :class:`FigureView`.

Loss curves (paper Figure 2), the utilization/memory heat-map grid (Figure 3), loss vs time with
the Pareto frontier (Figure 4), the memory breakdown, the PEFT study's held-out accuracy curves, and
the memory study's memory vs time per strategy. Each figure's note says which cells it could not draw and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from markupsafe import Markup

from gradeff import analysis
from gradeff.analysis import METRICS, Metric
from gradeff.analysis import memory as ma
from gradeff.analysis import peft as peft_analysis
from gradeff.data import TASKS
from gradeff.formatting import as_number, format_loss, format_percent, format_value
from gradeff.methods import METHODS
from gradeff.models import MODELS
from gradeff.report import plots
from gradeff.report.view import FigureView, config_label, display_name, first_word, short_label, status_text
from gradeff.results import FAILED_STATUSES, CellRecord

__all__ = ["accuracy_curves_figure", "heatmap_figure", "loss_curves_figure", "memory_figure", "pareto_figure",
           "tradeoff_figure"]

# The memory study's figure: colour and marker index per kind of strategy; other strategies follow.
_STANDARD_STYLE, _KIND_STYLES = 0, {ma.ADAPTIVE: 3, ma.COMPILER: 4}
_KIND_LABELS = {ma.ADAPTIVE: "adaptive", ma.COMPILER: "torch.compile"}  # the legend is 2 in wide
_SINGLE_STYLES = {"checkpoint": 1, "offload": 2}
_HEAT_METRICS = {"gpu_util": "GPU util.", "gpu_mem": "GPU memory", "ram_peak": "RAM peak",
                 "activation": "activations"}  # metric → short panel title (panels are 2.7 in wide)


def loss_curves_figure(slug: str, name: str, records: Sequence[CellRecord], optimizers: Sequence[str],
                       strategies: Sequence[str]) -> FigureView:
    """Per-epoch loss of every cell of a model, the loss floor dashed (paper Figure 2).

    Args:
        slug: the model's HTML id prefix.
        name: the model's display name.
        records: the model's records.
        optimizers: every optimizer key of the report, in order (fixes each one's colour).
        strategies: every strategy key of the report, in order (fixes each one's line style).

    Returns:
        The figure; its note names cells without a completed epoch.
    """
    series, empty = [], []
    for record in records:
        points = [(e.epoch + 1, e.loss) for e in record.epochs
                  if as_number(e.loss) is not None and as_number(e.epoch) is not None]
        if not points:
            empty.append(f"{short_label(record)} ({status_text(record)})")
            continue
        suffix = "" if record.status == "ok" else f" ({record.status})"  # the step is in the tables
        series.append(plots.Series(
            label=short_label(record) + suffix, color_index=optimizers.index(record.optimizer),
            style_index=strategies.index(record.strategy), epochs=tuple(float(p[0]) for p in points),
            losses=tuple(float(p[1]) for p in points), failed=record.status in FAILED_STATUSES))
    floors = sorted({f for f in (as_number(r.loss_floor) for r in records) if f is not None})
    floor = floors[0] if len(floors) == 1 else None
    notes = []
    if floor is not None:
        notes.append(f"Dashed line: the task's loss floor, {format_loss(floor)}.")
    elif floors:
        notes.append("The cells disagree on the loss floor (different data?): no floor drawn.")
    else:
        notes.append("Loss floor unknown for this task: no floor drawn.")
    if empty:
        notes.append("No completed epoch: " + ", ".join(empty) + ".")
    caption = f"{name}: loss per epoch, every cell"
    svg = plots.loss_curves_svg(series, loss_floor=floor, title=caption, uid=f"{slug}-curves") \
        if series else None
    return FigureView(id=f"{slug}-curves", caption=caption, svg=Markup(svg) if svg else None, note=" ".join(notes))


def pareto_figure(slug: str, name: str, records: Sequence[CellRecord], optimizers: Sequence[str],
                  strategies: Sequence[str]) -> tuple[FigureView, tuple[str, ...]]:
    """Final loss vs time per epoch, Pareto frontier highlighted (paper Figure 4).

    Args:
        slug: the model's HTML id prefix.
        name: the model's display name.
        records: the model's records.
        optimizers: every optimizer key of the report, in order.
        strategies: every strategy key of the report, in order.

    Returns:
        The figure, and one line per Pareto-optimal cell.
    """
    front_cells = analysis.pareto_cells(records)
    front = {r.cell for r in front_cells}
    points, left_out = [], []
    for record in records:
        x = analysis.metric_value(record, "epoch_seconds")
        y = analysis.metric_value(record, "final_loss")
        if not analysis.comparable(record) or x is None or y is None:
            left_out.append(f"{short_label(record)} ({status_text(record)})")
            continue
        points.append(plots.Point(label=short_label(record), color_index=optimizers.index(record.optimizer),
                                  style_index=strategies.index(record.strategy), x=x, y=y,
                                  on_front=record.cell in front))
    caption = f"{name}: final loss vs time per epoch"
    svg = plots.pareto_svg(points, title=caption, uid=f"{slug}-pareto") if points else None
    note = "Ringed points joined by the staircase are Pareto-optimal: no other cell is both faster and lower."
    if left_out:
        note += " Not plotted (failed or unmeasured): " + ", ".join(left_out) + "."
    front_text = tuple(
        f"{config_label(r)}: final loss {format_loss(analysis.metric_value(r, 'final_loss'))}, "
        f"{format_value(analysis.metric_value(r, 'epoch_seconds'), 'seconds')} per epoch"
        for r in front_cells)
    return FigureView(id=f"{slug}-pareto", caption=caption, svg=Markup(svg) if svg else None, note=note), front_text


def memory_figure(slug: str, name: str, records: Sequence[CellRecord]) -> FigureView:
    """Stacked bars of parameters, gradients, optimizer state and activations per cell.

    Args:
        slug: the model's HTML id prefix.
        name: the model's display name.
        records: the model's records.

    Returns:
        The figure; its note names cells without a memory breakdown.
    """
    bars, missing = [], []
    for record in records:
        parts = analysis.memory_parts(record)
        if parts is None:
            missing.append(short_label(record))
            continue
        bars.append(plots.Bar(label=short_label(record), parts=tuple(parts)))
    caption = f"{name}: memory per cell (parameters, gradients, optimizer state, activations)"
    svg = plots.memory_bars_svg(bars, title=caption, uid=f"{slug}-memory") if bars else None
    note = "" if not missing else "n/a (no memory breakdown recorded): " + ", ".join(missing) + "."
    return FigureView(id=f"{slug}-memory", caption=caption, svg=Markup(svg) if svg else None, note=note)


def heatmap_figure(models: Sequence[str], groups: Mapping[str, Sequence[CellRecord]],
                   optimizers_of: Mapping[str, list[str]], strategies: Sequence[str]) -> FigureView:
    """Optimizer × strategy heat maps of utilization and memory, a row per model (paper Figure 3).

    Args:
        models: model keys, in order.
        groups: model key → its records.
        optimizers_of: model key → its optimizer keys, in order.
        strategies: every strategy key of the report, in order.

    Returns:
        The figure (without SVG when no cell measured any of the metrics); its note names what is missing.
    """
    records = [r for group in groups.values() for r in group]
    measured = [k for k in _HEAT_METRICS if any(analysis.metric_value(r, k) is not None for r in records)]
    unmeasured = [METRICS[k].label for k in _HEAT_METRICS if k not in measured]
    note = ("Colour scaled per panel; darker is better (more utilization, less memory). Grey: n/a "
            "(not run, not measured, or the cell failed).")
    if unmeasured:
        note += " Not measured in any cell, so not drawn: " + ", ".join(unmeasured) + "."
    caption = "Optimizer × strategy grid per model"
    if not measured:
        return FigureView(id="heatmap-grid", caption=caption, svg=None, note=note)
    panels = []
    for model in models:
        by_cell = {(r.optimizer, r.strategy): r for r in groups[model]}
        row = []
        for key in measured:
            metric = METRICS[key]
            values, texts = [], []
            for opt in optimizers_of[model]:
                cells = [by_cell.get((opt, st)) for st in strategies]
                vals = [analysis.metric_value(c, metric) if c is not None and c.status == "ok" else None
                        for c in cells]
                values.append(tuple(vals))
                texts.append(tuple(_heat_text(c, v, metric) for c, v in zip(cells, vals, strict=True)))
            row.append(plots.HeatPanel(
                title=f"{_shorten(first_word(display_name(MODELS, model)))}: {_HEAT_METRICS[key]}",
                rows=tuple(optimizers_of[model]), columns=tuple(strategies), values=tuple(values), texts=tuple(texts),
                higher_is_better=metric.goal == "max"))
        panels.append(row)
    svg = plots.heatmap_grid_svg(panels, uid="heatmap-grid", title=caption)
    return FigureView(id="heatmap-grid", caption=caption, svg=Markup(svg), note=note)


def accuracy_curves_figure(groups: Mapping[tuple[str, str], Sequence[CellRecord]],
                           strategy: str = "standard") -> FigureView:
    """Held-out accuracy per epoch: a panel per backbone (rows) and dataset (columns), a line per method.

    Args:
        groups: ``(backbone, dataset)`` → its records, in the study's order.
        strategy: the strategy whose cells are drawn (one line per method stays readable).

    Returns:
        The figure, the Bayes accuracy of each panel's split dashed; its note names the cells it
        could not draw.
    """
    models = analysis.order_keys((m for m, _ in groups), MODELS)
    datasets = analysis.order_keys((d for _, d in groups), TASKS)
    methods = analysis.order_keys((r.method for group in groups.values() for r in group), METHODS)
    panels, undrawn, ceilings = [], [], {}
    for model in models:
        row = []
        for dataset in datasets:
            group = groups.get((model, dataset), ())
            curves = []
            for record in group:
                if record.strategy != strategy:
                    continue
                points = [(e.epoch + 1, 100 * e.heldout_accuracy) for e in record.epochs
                          if as_number(e.heldout_accuracy) is not None and as_number(e.epoch) is not None]
                if not points:
                    undrawn.append(f"{record.cell} ({status_text(record)})")
                    continue
                curves.append(plots.Curve(
                    label=display_name(METHODS, record.method), color_index=methods.index(record.method),
                    epochs=tuple(float(x) for x, _ in points), values=tuple(float(y) for _, y in points),
                    failed=record.status in FAILED_STATUSES))
            bayes = sorted({b for b in (peft_analysis.bayes_accuracy(r) for r in group) if b is not None})
            ceiling = bayes[0] if len(bayes) == 1 else None
            ceilings[(model, dataset)] = ceiling
            title = f"{_shorten(display_name(MODELS, model), 26)} · {first_word(display_name(TASKS, dataset))}"
            row.append(plots.CurvePanel(title=title if group else f"{title} (not run)", curves=tuple(curves),
                                        ceiling=ceiling))
        panels.append(row)
    caption = f"Held-out top-1 accuracy per epoch, strategy {strategy}, one line per method"
    drawn = any(panel.curves for row in panels for panel in row)
    notes = ["Dashed: the Bayes classifier's accuracy on the same held-out split, the ceiling"
             + (": " + ", ".join(f"{model} / {dataset} {format_percent(c)}" for (model, dataset), c in
                                 ceilings.items() if c is not None) if any(ceilings.values()) else " (unknown here)")
             + ". A cross marks a cell that stopped early."]
    if undrawn:
        notes.append("No held-out accuracy: " + ", ".join(undrawn) + ".")
    svg = plots.accuracy_panels_svg(panels, title=caption, uid="peft-curves") if drawn else None
    return FigureView(id="peft-curves", caption=caption, svg=Markup(svg) if svg else None, note=" ".join(notes))


def _tradeoff_point(record: CellRecord, reference: CellRecord) -> tuple[float, float] | None:
    x = peft_analysis.ratio(record, reference, "epoch_seconds")
    y = peft_analysis.ratio(record, reference, ma.DEVICE_MEMORY)
    return None if x is None or y is None else (x, y)


def tradeoff_figure(slug: str, title: str, records: Sequence[CellRecord], reference: CellRecord | None) -> FigureView:
    """Memory against time per epoch, both over the standard cell's: one marker per strategy (memory study).

    Every point is read on one quantity, the breakdown sum (:data:`gradeff.analysis.memory.DEVICE_MEMORY`),
    which compiled cells have too; the budget levels of each kind are joined by a line, standard sits
    at (1, 1), checkpoint and offload are labelled.

    Args:
        slug: the group's HTML id prefix.
        title: the group's heading (the model's name).
        records: the group's cells, in study order.
        reference: its standard cell, or ``None``.

    Returns:
        The figure (without SVG when there is no standard to divide by); its note names what is not drawn.
    """
    caption = (f"{title}: training memory against time per epoch, both over standard's. Memory is the breakdown "
               "sum (parameters + gradients + optimizer state + activations saved for backward) for every point, "
               "compiled cells included; the live peak is in the table")
    figure_id = f"{slug}-tradeoff"
    if reference is None or _tradeoff_point(reference, reference) is None:
        why = ("no standard cell" if reference is None else f"standard ended {reference.status}"
               if reference.status != "ok" else "standard's time or memory was not measured")
        return FigureView(id=figure_id, caption=caption, svg=None,
                          note=f"n/a: {why}, so there is nothing to divide by.")
    singles: list[plots.TradeoffSeries] = []
    levels: dict[str, list[tuple[float, tuple[float, float]]]] = {}
    left_out, others = [], 0
    for record in records:
        point = _tradeoff_point(record, reference)
        if point is None:
            left_out.append(f"{record.strategy} ({status_text(record) if record.status != 'ok' else 'not measured'})")
            continue
        kind, level = ma.budget_kind(record), ma.budget_level(record)
        if kind in _KIND_STYLES and level is not None:
            levels.setdefault(kind, []).append((level, point))
            continue
        if record is reference:
            style = _STANDARD_STYLE
        elif record.strategy in _SINGLE_STYLES:
            style = _SINGLE_STYLES[record.strategy]
        else:
            style, others = 5 + others, others + 1
        singles.append(plots.TradeoffSeries(label=record.strategy, points=(point,), texts=(record.strategy,),
                                            style_index=style))
    for kind in (ma.ADAPTIVE, ma.COMPILER):
        if kind in levels:
            # Most memory first: the line runs from the mildest budget to the tightest.
            ordered = sorted(levels[kind], key=lambda item: -item[0])
            singles.append(plots.TradeoffSeries(
                label=f"{_KIND_LABELS[kind]} (level %)", points=tuple(p for _, p in ordered),
                texts=tuple(f"{level * 100:.0f}" for level, _ in ordered), joined=True,
                style_index=_KIND_STYLES[kind]))
    svg = plots.tradeoff_svg(singles, title=caption, uid=figure_id, xlabel="time per epoch / standard's",
                             ylabel="training memory (breakdown sum) / standard's")
    notes = ["Dashed: standard's time and memory. Numbers by the lines: the budget level, from every block "
             "checkpointed (0) to none (100). Compile time is not part of the time per epoch."]
    if any(ma.host_copies_bytes(r) for r in records):
        notes.append("Offload's host copies are counted: on this device the host memory is the device memory.")
    if left_out:
        notes.append("Not drawn: " + ", ".join(left_out) + ".")
    return FigureView(id=figure_id, caption=caption, svg=Markup(svg), note=" ".join(notes))


def _heat_text(record: CellRecord | None, value: float | None, metric: Metric) -> str:
    if record is not None and record.status != "ok":
        return record.status  # the panel is small: "diverged", the step is in the tables
    return format_value(value, metric.unit)


def _shorten(text: str, limit: int = 22) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
