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
from gradeff.analysis.metrics import quality_metric
from gradeff.analysis.runs import CellRuns
from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.records.formatting import as_number, format_loss, format_percent, format_value
from gradeff.records.results import FAILED_STATUSES
from gradeff.report import heat_maps, heat_noise, plots, scatter_plots
from gradeff.report.view import FigureView, config_label, display_name, first_word, short_label

__all__ = ["accuracy_curves_figure", "heatmap_figure", "loss_curves_figure", "memory_figure", "pareto_figure",
           "peft_costs_figure", "tradeoff_figure"]

# The memory study's figure: colour and marker index per kind of strategy; other strategies follow.
_STANDARD_STYLE, _KIND_STYLES = 0, {ma.ADAPTIVE: 3, ma.COMPILER: 4}
_KIND_LABELS = {ma.ADAPTIVE: "adaptive", ma.COMPILER: "torch.compile"}  # the legend is 2 in wide
_SINGLE_STYLES = {"checkpoint": 1, "offload": 2}
_HEAT_METRICS = {"gpu_util": "GPU util.", "gpu_mem": "GPU memory", "ram_peak": "RAM peak",
                 "activation": "activations"}  # metric → short panel title (panels are 2.7 in wide)


def loss_curves_figure(slug: str, name: str, runs: Mapping[str, CellRuns], optimizers: Sequence[str],
                       strategies: Sequence[str]) -> FigureView:
    """Per-epoch training loss of every cell of a model, mean over its ok seeds, the loss floor dashed (paper Figure 2).

    Args:
        slug: the model's HTML id prefix.
        name: the model's display name.
        runs: the model's cells over their seeds.
        optimizers: every optimizer key of the report, in order (fixes each one's colour).
        strategies: every strategy key of the report, in order (fixes each one's line style).

    Returns:
        The figure; its note names cells without a completed epoch.
    """
    drawn: dict[tuple, list[CellRuns]] = {}  # (panel, epochs, losses, failed) → the cells drawing that very curve
    empty = []
    for cell_runs in runs.values():
        record = cell_runs.first
        points = cell_runs.mean_series(lambda e: e.loss)
        if not points:
            empty.append(f"{short_label(record)} ({cell_runs.status})")
            continue
        failed = not cell_runs.ok and record.status in FAILED_STATUSES
        key = (display_name(OPTIMIZERS, record.optimizer), tuple(float(e + 1) for e, _ in points),
               tuple(float(v) for _, v in points), failed)
        drawn.setdefault(key, []).append(cell_runs)
    # Strategies that train the same steps (checkpointing recomputes, it does not change the loss) give the very
    # same curve: drawn once, labelled "standard ≡ checkpoint", in a style of its own.
    merged = list(dict.fromkeys(" ≡ ".join(c.first.strategy for c in cells) for cells in drawn.values()
                                if len(cells) > 1))
    series = []
    for (panel, epochs, losses, failed), cells in drawn.items():
        label = " ≡ ".join(c.first.strategy for c in cells)
        style = strategies.index(cells[0].first.strategy) if len(cells) == 1 else len(strategies) + merged.index(label)
        # A panel per optimizer, a curve per strategy: the legend names strategies once for every panel.
        series.append(plots.Series(label=label, color_index=optimizers.index(cells[0].first.optimizer),
                                   style_index=style, epochs=epochs, losses=losses, failed=failed, panel=panel))
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    floors = sorted({f for f in (as_number(r.loss_floor) for r in records) if f is not None})
    floor = floors[0] if len(floors) == 1 else None
    notes = ["Training loss, a diagnostic (the answer reads the test split); mean over the seeds that ended ok. "
             "One panel per optimizer, all on the same axes; a cross marks a cell that stopped early."]
    if floor is not None:
        notes.append(f"Dashed line: the task's loss floor, {format_loss(floor)}.")
    elif floors:
        notes.append("The seeds disagree on the loss floor (each draws its own data): no floor drawn.")
    else:
        notes.append("Loss floor unknown for this task: no floor drawn.")
    if merged:
        notes.append("'a ≡ b': those strategies' curves are identical to the last digit, so drawn once.")
    if empty:
        notes.append("No completed epoch: " + ", ".join(empty) + ".")
    caption = f"{name}: training loss per epoch, a panel per optimizer, a line per strategy"
    svg = plots.loss_curves_svg(series, loss_floor=floor, title=caption, uid=f"{slug}-curves") \
        if series else None
    return FigureView(id=f"{slug}-curves", caption=caption, svg=Markup(svg) if svg else None, note=" ".join(notes))


def pareto_figure(slug: str, name: str, runs: Mapping[str, CellRuns], optimizers: Sequence[str],
                  strategies: Sequence[str]) -> tuple[FigureView, tuple[str, ...]]:
    """Test quality vs time per epoch, means over seeds, Pareto frontier highlighted (paper Figure 4).

    Args:
        slug: the model's HTML id prefix.
        name: the model's display name.
        runs: the model's cells over their seeds.
        optimizers: every optimizer key of the report, in order.
        strategies: every strategy key of the report, in order.

    Returns:
        The figure, and one line per Pareto-optimal cell.
    """
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    quality, seconds = quality_metric(records), METRICS["epoch_seconds"]
    front_cells = analysis.pareto_cells(runs, seconds, quality)
    front = {r.cell for r in front_cells}
    points, left_out = [], []
    for cell_runs in runs.values():
        record = cell_runs.first
        x, y = cell_runs.mean(seconds), cell_runs.mean(quality)
        if x is None or y is None:
            left_out.append(f"{short_label(record)} ({cell_runs.status})")
            continue
        # Drawn in its own units, up or down as the metric reads: the staircase joins the front either way.
        points.append(plots.Point(label=short_label(record), color_index=optimizers.index(record.optimizer),
                                  style_index=strategies.index(record.strategy), x=x, y=y,
                                  on_front=record.cell in front))
    unit = {"percent": " (%)", "loss": " (cross-entropy per target)"}.get(quality.unit, "")
    better = "higher" if quality.goal == "max" else "lower"
    axis = f"{quality.label.lower()}{unit}, {better} is better"
    caption = f"{name}: {quality.label.lower()} vs time per epoch (means over seeds)"
    svg = plots.pareto_svg(points, title=caption, uid=f"{slug}-pareto", ylabel=axis,
                           colors_named=[display_name(OPTIMIZERS, o) for o in optimizers],
                           markers_named=list(strategies)) if points else None
    note = ("Ringed points joined by the staircase are Pareto-optimal: no other cell is both faster per epoch and "
            f"better on the test split. Better is to the left and {'up' if quality.goal == 'max' else 'down'}.")
    if left_out:
        note += " Not plotted (failed or unmeasured): " + ", ".join(left_out) + "."
    front_text = tuple(
        f"{config_label(r.first)}: {quality.label.lower()} {format_value(r.mean(quality), quality.unit)}, "
        f"{format_value(r.mean(seconds), 'seconds')} per epoch" for r in front_cells)
    return FigureView(id=f"{slug}-pareto", caption=caption, svg=Markup(svg) if svg else None, note=note), front_text


def memory_figure(slug: str, name: str, runs: Mapping[str, CellRuns]) -> FigureView:
    """Stacked bars of parameters, gradients, optimizer state and activations per cell (mean over its ok seeds).

    Args:
        slug: the model's HTML id prefix.
        name: the model's display name.
        runs: the model's cells over their seeds.

    Returns:
        The figure; its note names cells without a memory breakdown.
    """
    bars, missing = [], []
    for cell_runs in runs.values():
        parts = [analysis.memory_parts(r) for r in cell_runs.ok]
        parts = [p for p in parts if p is not None]
        if not parts:
            missing.append(short_label(cell_runs.first))
            continue
        bars.append(plots.Bar(label=short_label(cell_runs.first),
                              parts=tuple(sum(p[i] for p in parts) / len(parts) for i in range(len(parts[0])))))
    caption = f"{name}: memory per cell (parameters, gradients, optimizer state, activations)"
    svg = plots.memory_bars_svg(bars, title=caption, uid=f"{slug}-memory") if bars else None
    note = "" if not missing else "n/a (no memory breakdown recorded): " + ", ".join(missing) + "."
    return FigureView(id=f"{slug}-memory", caption=caption, svg=Markup(svg) if svg else None, note=note)


def heatmap_figure(models: Sequence[str], runs_by_model: Mapping[str, Mapping[str, CellRuns]],
                   optimizers_of: Mapping[str, list[str]], strategies: Sequence[str]) -> FigureView:
    """Optimizer × strategy heat maps of utilization and memory, a row per model (paper Figure 3), means over seeds.

    Args:
        models: model keys, in order.
        runs_by_model: model key → its cells over seeds.
        optimizers_of: model key → its optimizer keys, in order.
        strategies: every strategy key of the report, in order.

    Returns:
        The figure (without SVG when no cell measured any of the metrics); its note names what is missing.
    """
    records = [r for runs in runs_by_model.values() for cell_runs in runs.values() for r in cell_runs.runs]
    measured = [k for k in _HEAT_METRICS if any(analysis.metric_value(r, k) is not None for r in records)]
    unmeasured = [METRICS[k].label for k in _HEAT_METRICS if k not in measured]
    note = ("Colour scaled per panel; darker is better (more utilization, less memory). Grey: n/a "
            "(not run, not measured, or the cell failed). Means over seeds. A panel is drawn only where its best "
            f"and worst cells differ by more than the metric's noise: {heat_noise.noise_margin(METRICS['peak']).text} "
            f"for memory, {heat_noise.noise_margin(METRICS['gpu_util']).text} for utilization (the Answer's margins).")
    if unmeasured:
        note += " Not measured in any cell, so not drawn: " + ", ".join(unmeasured) + "."
    caption = "Optimizer × strategy grid per model"
    if not measured:
        return FigureView(id="heatmap-grid", caption=caption, svg=None, note=note)
    panels, quiet = [], []
    for model in models:
        by_cell = {(r.first.optimizer, r.first.strategy): r for r in runs_by_model[model].values()}
        model_records = [r for cell_runs in runs_by_model[model].values() for r in cell_runs.runs]
        row = []
        for key in measured:
            metric = METRICS[key]
            values, texts = [], []
            for opt in optimizers_of[model]:
                cells = [by_cell.get((opt, st)) for st in strategies]
                vals = [c.mean(metric) if c is not None and c.ok else None for c in cells]
                values.append(tuple(vals))
                texts.append(tuple(_heat_text(c, v, metric) for c, v in zip(cells, vals, strict=True)))
            title = f"{_shorten(first_word(display_name(MODELS, model)))}: {_HEAT_METRICS[key]}"
            why = heat_noise.within_noise(metric, [v for row_values in values for v in row_values], model_records)
            if why:
                quiet.append(f"{title} ({why})")
                continue
            row.append(heat_maps.HeatPanel(title=title, rows=tuple(optimizers_of[model]), columns=tuple(strategies),
                                       values=tuple(values), texts=tuple(texts),
                                       higher_is_better=metric.goal == "max"))
        if row:
            panels.append(row)
    if quiet:
        note += (" Not drawn, the differences being noise (their numbers are in the flat table of every cell): "
                 + "; ".join(quiet) + ".")
    if not panels:
        return FigureView(id="heatmap-grid", caption=caption, svg=None, note=note)
    svg = heat_maps.heatmap_grid_svg(panels, uid="heatmap-grid", title=caption)
    return FigureView(id="heatmap-grid", caption=caption, svg=Markup(svg), note=note)


def accuracy_curves_figure(groups: Mapping[tuple[str, str], Mapping[str, CellRuns]],
                           strategy: str = "standard") -> FigureView:
    """Test accuracy per epoch (mean over seeds): a panel per backbone (rows) and dataset (columns), a line per method.

    Args:
        groups: ``(backbone, dataset)`` → its cells over their seeds.
        strategy: the strategy whose cells are drawn (one line per method stays readable).

    Returns:
        The figure, the Bayes accuracy of each panel's split dashed; its note names the cells it
        could not draw.
    """
    models = analysis.order_keys((m for m, _ in groups), MODELS)
    datasets = analysis.order_keys((d for _, d in groups), TASKS)
    methods = analysis.order_keys((r.first.method for runs in groups.values() for r in runs.values()), METHODS)
    panels, undrawn, ceilings = [], [], {}
    for model in models:
        row = []
        for dataset in datasets:
            runs = groups.get((model, dataset), {})
            curves = []
            for cell_runs in runs.values():
                record = cell_runs.first
                if record.strategy != strategy:
                    continue
                points = cell_runs.mean_series(
                    lambda e: None if e.heldout_accuracy is None else 100 * e.heldout_accuracy)
                if not points:
                    undrawn.append(f"{record.cell} ({cell_runs.status})")
                    continue
                curves.append(plots.Curve(
                    label=display_name(METHODS, record.method), color_index=methods.index(record.method),
                    epochs=tuple(float(x + 1) for x, _ in points), values=tuple(float(y) for _, y in points),
                    failed=not cell_runs.ok and record.status in FAILED_STATUSES))
            records = [r for cell_runs in runs.values() for r in cell_runs.runs]
            bayes = sorted({b for b in (peft_analysis.bayes_accuracy(r) for r in records) if b is not None})
            ceiling = bayes[0] if len(bayes) == 1 else None
            ceilings[(model, dataset)] = ceiling
            title = f"{_shorten(display_name(MODELS, model), 26)} · {first_word(display_name(TASKS, dataset))}"
            row.append(plots.CurvePanel(title=title if runs else f"{title} (not run)", curves=tuple(curves),
                                        ceiling=ceiling))
        panels.append(row)
    caption = f"Test top-1 accuracy per epoch, strategy {strategy}, one line per method (mean over seeds)"
    drawn = any(panel.curves for row in panels for panel in row)
    notes = ["Dashed: the Bayes classifier's accuracy on the same test split, the ceiling"
             + (": " + ", ".join(f"{model} / {dataset} {format_percent(c)}" for (model, dataset), c in
                                 ceilings.items() if c is not None) if any(ceilings.values()) else " (unknown here)")
             + ". A cross marks a cell that stopped early."]
    if undrawn:
        notes.append("No test accuracy: " + ", ".join(undrawn) + ".")
    svg = plots.accuracy_panels_svg(panels, title=caption, uid="peft-curves") if drawn else None
    return FigureView(id="peft-curves", caption=caption, svg=Markup(svg) if svg else None, note=" ".join(notes))


def peft_costs_figure(groups: Mapping[tuple[str, str], Mapping[str, CellRuns]],
                      strategy: str = "standard") -> FigureView:
    """Test accuracy against trainable parameters and against energy (the PEFT paper's trade-offs): a row per
    dataset, a point per backbone and method (colour: method, marker: backbone), means over seeds.

    Args:
        groups: ``(backbone, dataset)`` → its cells over their seeds.
        strategy: the strategy whose cells are drawn (the others train the same parameters, more slowly).

    Returns:
        The figure; its note names the cells it could not place.
    """
    accuracy, energy = METRICS["heldout_accuracy"], METRICS["energy"]
    models = analysis.order_keys((m for m, _ in groups), MODELS)
    datasets = analysis.order_keys((d for _, d in groups), TASKS)
    methods = analysis.order_keys((r.first.method for runs in groups.values() for r in runs.values()), METHODS)
    rows, unplaced = [], []
    for dataset in datasets:
        by_params, by_energy = [], []
        for model in models:
            for cell_runs in groups.get((model, dataset), {}).values():
                record = cell_runs.first
                if record.strategy != strategy:
                    continue
                y = cell_runs.mean(accuracy)
                params, joules = cell_runs.mean(peft_analysis.TRAINABLE), cell_runs.mean(energy)
                if y is None or params is None or joules is None:
                    unplaced.append(f"{record.cell} ({cell_runs.status})")
                    continue
                style = dict(y=y, color_index=methods.index(record.method), marker_index=models.index(model))
                by_params.append(scatter_plots.ScatterPoint(x=params, **style))
                by_energy.append(scatter_plots.ScatterPoint(x=joules, **style))
        name = first_word(display_name(TASKS, dataset))
        rows.append((scatter_plots.ScatterPanel(title=f"{name}: accuracy vs trainable parameters",
                                                xlabel="trainable parameters", ylabel="test top-1 accuracy (%)",
                                                points=tuple(by_params), log_x=True),
                     scatter_plots.ScatterPanel(title=f"{name}: accuracy vs energy", xlabel="energy of the epochs (J)",
                                                ylabel="test top-1 accuracy (%)", points=tuple(by_energy))))
    caption = (f"Test top-1 accuracy against trainable parameters and against energy, strategy {strategy}: "
               "a point per backbone and method (mean over seeds)")
    drawn = any(panel.points for row in rows for panel in row)
    svg = scatter_plots.scatter_panels_svg(
        rows, title=caption, uid="peft-costs", colors_named=[display_name(METHODS, m) for m in methods],
        markers_named=[display_name(MODELS, m) for m in models]) if drawn else None
    note = ("Up and to the left is better: more accuracy for fewer trainable parameters or less energy. Colour: "
            "the method; marker: the backbone. Energy as the records' meter gave it (see 'How each number was "
            "measured').")
    if unplaced:
        note += " Not placed (no accuracy, parameter count or energy): " + ", ".join(unplaced) + "."
    return FigureView(id="peft-costs", caption=caption, svg=Markup(svg) if svg else None, note=note)


def _tradeoff_point(runs: CellRuns, reference: CellRuns) -> tuple[float, float] | None:
    x, y = ma.ratio_of(runs, reference, "epoch_seconds"), ma.ratio_of(runs, reference, ma.DEVICE_MEMORY)
    return None if x is None or y is None else (x.interval.mean, y.interval.mean)


def tradeoff_figure(slug: str, title: str, runs: Mapping[str, CellRuns], reference: CellRuns | None) -> FigureView:
    """Memory against time per epoch, both over the standard cell's (seed by seed, mean over seeds): one marker per
    strategy (memory study).

    Every point is read on one quantity, the breakdown sum (:data:`gradeff.analysis.memory.DEVICE_MEMORY`),
    which compiled cells have too; the budget levels of each kind are joined by a line (adaptive levels that
    made the same plan are one point), standard sits at (1, 1), checkpoint and offload are labelled.

    Args:
        slug: the group's HTML id prefix.
        title: the group's heading (the model's name).
        runs: the group's cells over their seeds, strategy → cell, in study order.
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
               if not reference.ok else "standard's time or memory was not measured")
        return FigureView(id=figure_id, caption=caption, svg=None,
                          note=f"n/a: {why}, so there is nothing to divide by.")
    singles: list[plots.TradeoffSeries] = []
    levels: dict[str, list[tuple[float, tuple[float, float], str]]] = {}
    seen_plans: dict[tuple, int] = {}
    left_out, others = [], 0
    for cell_runs in runs.values():
        record = cell_runs.first
        point = _tradeoff_point(cell_runs, reference)
        if point is None:
            left_out.append(f"{record.strategy} ({cell_runs.status if not cell_runs.ok else 'not measured'})")
            continue
        kind, level = ma.budget_kind(record), ma.budget_level(record)
        if kind in _KIND_STYLES and level is not None:
            plan = ma.plan_key(cell_runs) if kind == ma.ADAPTIVE else None
            if plan is not None and (kind, plan) in seen_plans:
                # The same plan as a milder level: the same training, one point labelled with both levels.
                index = seen_plans[(kind, plan)]
                first, where, text = levels[kind][index]
                levels[kind][index] = (first, where, f"{text}/{level * 100:.0f}")
                continue
            if plan is not None:
                seen_plans[(kind, plan)] = len(levels.get(kind, []))
            levels.setdefault(kind, []).append((level, point, f"{level * 100:.0f}"))
            continue
        if cell_runs is reference:
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
                label=f"{_KIND_LABELS[kind]} (level %)", points=tuple(p for _, p, _ in ordered),
                texts=tuple(text for _, _, text in ordered), joined=True, style_index=_KIND_STYLES[kind]))
    svg = plots.tradeoff_svg(singles, title=caption, uid=figure_id, xlabel="time per epoch / standard's",
                             ylabel="training memory (breakdown sum) / standard's")
    notes = ["Dashed: standard's time and memory. Numbers by the lines: the budget level, from every block "
             "checkpointed (0) to none (100); adaptive levels joined by '/' made the same plan. Ratios are taken seed "
             "by seed and averaged. Compile time is not part of the time per epoch."]
    if any(ma.host_copies_bytes(r.first) for r in runs.values()):
        notes.append("Offload's host copies are counted: on this device the host memory is the device memory.")
    if left_out:
        notes.append("Not drawn: " + ", ".join(left_out) + ".")
    return FigureView(id=figure_id, caption=caption, svg=Markup(svg), note=" ".join(notes))


def _heat_text(cell_runs: CellRuns | None, value: float | None, metric: Metric) -> str:
    if cell_runs is not None and not cell_runs.ok:
        return cell_runs.runs[-1].status  # the panel is small: "diverged", the step is in the tables
    return format_value(value, metric.unit)


def _shorten(text: str, limit: int = 22) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
