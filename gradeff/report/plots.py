"""The report's figures as inline SVG strings, drawn with matplotlib.

Functions here take plain, already-selected data (no records) and return an ``<svg>`` element to
embed in the HTML. matplotlib is imported inside the functions: collecting the benchmark grid or
running ``gradeff list`` must not pay for it. Figures are built with ``matplotlib.figure.Figure``
and saved straight to SVG, so no GUI backend is ever selected and the process-wide pyplot state
(and whatever backend a user's session chose) is left alone.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from gradeff.report.svg_compact import compact_svg

__all__ = [
    "Bar", "Curve", "CurvePanel", "DECADES_FOR_LOG", "HeatPanel", "MAX_SERIES", "Point", "Series", "TradeoffSeries",
    "TrendLevel", "TrendPoint", "accuracy_panels_svg", "heatmap_grid_svg", "loss_curves_svg", "memory_bars_svg",
    "pareto_svg", "place_labels", "tradeoff_svg", "trend_svg",
]

# Text stays text (no embedded glyph outlines: the tiny grid's page is 1.8x smaller, and searchable); no mathtext,
# so a "$" in a model name is printed, not parsed.
_RC = {
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 8,
    "axes.titlesize": 9,
    "legend.fontsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
# At most this many data series share one axes: more are split into small multiples.
MAX_SERIES = 6
# The ratio of the largest to the smallest value from which an axis is logarithmic: two decades.
DECADES_FOR_LOG = 100.0
_STRATEGY_STYLES = (("-", "o"), ("-.", "s"), (":", "^"), ((0, (1, 1)), "D"), ((0, (5, 1, 1, 1)), "v"))
_MEMORY_PARTS = (("parameters", "#4c72b0"), ("gradients", "#dd8452"), ("optimizer state", "#55a868"),
                 ("activations", "#c44e52"))


# Fixed margins, not constrained layout: that re-lays out every text several times and made the
# full grid's report 1.5x slower to build (7.7 s against 5.0 s). The right 26 % holds the legend.
_LEGEND_RIGHT = dict(left=0.09, right=0.74, bottom=0.12, top=0.97)


@contextmanager
def _figure(uid: str, size: tuple[float, float], margins: dict) -> Iterator:
    """A matplotlib Figure under the report's style; ``uid`` salts its SVG ids (several per page)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    with rc_context(_RC | {"svg.hashsalt": uid}):
        fig = Figure(figsize=size)
        fig.subplots_adjust(**margins)
        yield fig


def _log_y(ax) -> None:
    """A log y axis with plain-number tick labels.

    Math parsing is off (model names may hold "$"), so matplotlib's default "$10^{0}$" labels
    would print literally.
    """
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """One cell's per-epoch loss curve.

    Attributes:
        label: legend text (the same label in several panels is one legend entry).
        color_index: index of the cell's optimizer (same colour for one optimizer everywhere).
        style_index: index of the cell's strategy (line style, marker and, within a panel, colour).
        epochs: x values (1-based epoch numbers).
        losses: y values (non-finite losses already dropped).
        failed: the cell stopped early (diverged, oom, error): its last point gets a cross.
        panel: the small multiple it is drawn in (its optimizer); ``""``: one panel.
    """

    label: str
    color_index: int
    style_index: int
    epochs: tuple[float, ...]
    losses: tuple[float, ...]
    failed: bool = False
    panel: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One cell in the loss vs time scatter."""

    label: str
    color_index: int
    style_index: int
    x: float
    y: float
    on_front: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class HeatPanel:
    """One optimizer × strategy grid of one metric of one model.

    Attributes:
        title: panel title.
        rows: row labels (optimizers), top to bottom.
        columns: column labels (strategies).
        values: ``values[row][column]``: the number to colour by, ``None`` where not measured.
        texts: the formatted text written in each cell.
        higher_is_better: darker colour for the better end.
    """

    title: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    values: tuple[tuple[float | None, ...], ...]
    texts: tuple[tuple[str, ...], ...]
    higher_is_better: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Bar:
    """One cell's memory breakdown in bytes (parameters, gradients, optimizer state, activations)."""

    label: str
    parts: tuple[float, float, float, float] = field(default=(0.0, 0.0, 0.0, 0.0))


@dataclass(frozen=True, slots=True, kw_only=True)
class Curve:
    """One cell's per-epoch held-out accuracy.

    Attributes:
        label: legend text (the same label in several panels is one legend entry).
        color_index: index of the cell's method (same colour for one method everywhere).
        epochs: x values (1-based epoch numbers).
        values: y values in percent.
        failed: the cell stopped early: its last point gets a cross.
    """

    label: str
    color_index: int
    epochs: tuple[float, ...]
    values: tuple[float, ...]
    failed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePanel:
    """One panel of :func:`accuracy_panels_svg`: a title, its curves and the ceiling (``None`` if unknown)."""

    title: str
    curves: tuple[Curve, ...]
    ceiling: float | None = None


def accuracy_panels_svg(panels: Sequence[Sequence[CurvePanel]], *, title: str, uid: str) -> str:
    """A grid of held-out accuracy curves, the ceiling dashed in each panel; one shared legend on top.

    Args:
        panels: ``panels[row][column]``; a short row leaves its last axes empty.
        title: what the figure shows: the SVG's accessible label (the page's figcaption prints it).
        uid: unique id prefix for this figure's SVG ids.

    Returns:
        An ``<svg>`` element.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    n_rows = max(len(panels), 1)
    n_cols = max((len(row) for row in panels), default=1) or 1
    width, height = 7.6, 0.75 + 2.1 * n_rows
    # Inches for the legend above, the axis labels left and below.
    margins = dict(left=0.65 / width, right=0.98, bottom=0.45 / height, top=1 - 0.6 / height, wspace=0.25,
                   hspace=0.55)
    with _figure(uid, (width, height), margins) as fig:
        axes = fig.subplots(n_rows, n_cols, squeeze=False)
        colors = _colors()
        entries: dict[str, object] = {}
        for r in range(n_rows):
            for c in range(n_cols):
                ax = axes[r][c]
                if r >= len(panels) or c >= len(panels[r]):
                    ax.set_axis_off()
                    continue
                panel = panels[r][c]
                where = f"p{r}-{c}"  # ids are unique in a page: the panel names its series
                for k, curve in enumerate(panel.curves):
                    color = colors[curve.color_index % len(colors)]
                    (line,) = ax.plot(curve.epochs, curve.values, marker="o", markersize=3, linewidth=1.2,
                                      color=color, gid=f"{where}-series-{k}")
                    entries.setdefault(curve.label, line)
                    if curve.failed and curve.epochs:
                        ax.plot([curve.epochs[-1]], [curve.values[-1]], marker="x", markersize=8, color=color,
                                linestyle="", gid=f"{where}-series-{k}-end")
                if panel.ceiling is not None:
                    ax.axhline(panel.ceiling, color="black", linestyle="--", linewidth=1,
                               gid=f"{where}-reference-ceiling")
                if not panel.curves:
                    ax.text(0.5, 0.5, "n/a", transform=ax.transAxes, ha="center", va="center", color="#656d76")
                    ax.set_xticks([])  # no data: ticks would suggest a scale that was measured
                values = [v for curve in panel.curves for v in curve.values]
                top = max([*values, panel.ceiling if panel.ceiling is not None else 0.0, 1.0])
                # From 0: the distance to the ceiling is the finding, and a zoomed axis would hide it.
                ax.set_ylim(0, min(100.0, top * 1.08) if top < 100 else 100.5)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
                ax.set_title(panel.title, fontsize=8)
                ax.grid(True, alpha=0.3)
                if c == 0:
                    ax.set_ylabel("held-out top-1 (%)")
                if r == n_rows - 1:
                    ax.set_xlabel("epoch")
        handles = list(entries.values())
        labels = list(entries)
        if any(p.ceiling is not None for row in panels for p in row):
            handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1))
            labels.append("Bayes accuracy (ceiling)")
        if handles:
            fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncols=min(len(handles), 4),
                       frameon=False)
        return _to_svg(fig, uid, title)


@dataclass(frozen=True, slots=True, kw_only=True)
class TradeoffSeries:
    """Cells of one kind in the memory vs time plane, both relative to a reference cell.

    Attributes:
        label: legend text.
        points: ``(x, y)`` per cell: time per epoch and memory, each over the reference's.
        texts: a short label written next to each point (``""``: none).
        joined: draw a line through the points in the order given (a kind's budget levels).
        style_index: fixes the colour and marker of the series.
    """

    label: str
    points: tuple[tuple[float, float], ...]
    texts: tuple[str, ...]
    joined: bool = False
    style_index: int = 0


_TRADEOFF_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")


def tradeoff_svg(series: Sequence[TradeoffSeries], *, title: str, uid: str, xlabel: str, ylabel: str) -> str:
    """Memory against time per epoch, both relative to a reference cell drawn at (1, 1).

    Each point is its own marker (an SVG group with id ``point-N``), so a page can be checked for
    what it draws; joined series get a thin line through their points underneath.

    Args:
        series: what to draw, in legend order.
        title: what the figure shows: the SVG's accessible label (the page's figcaption prints it).
        uid: unique id prefix for this figure's SVG ids.
        xlabel / ylabel: the axes' titles.

    Returns:
        An ``<svg>`` element.
    """
    from matplotlib.lines import Line2D

    with _figure(uid, (7.6, 4.2), _LEGEND_RIGHT) as fig:
        ax = fig.subplots()
        colors = _colors()
        handles, drawn, labels = [], 0, []
        # The one-point strategies (standard, checkpoint, offload) are one series of labelled points; each kind of
        # budget, a line through its levels, is a series of its own.
        numbers = iter(range(1, len(series) + 1))
        for s in series:
            k = 0 if len(s.points) == 1 and not s.joined else next(numbers)
            color = colors[s.style_index % len(colors)]
            marker = _TRADEOFF_MARKERS[s.style_index % len(_TRADEOFF_MARKERS)]
            if s.joined and len(s.points) > 1:
                ax.plot([x for x, _ in s.points], [y for _, y in s.points], color=color, linewidth=1.1, alpha=0.7,
                        zorder=2, gid=f"series-{k}-line")
            for (x, y), text in zip(s.points, s.texts, strict=True):
                ax.plot([x], [y], marker=marker, markersize=6, linestyle="", color=color, zorder=3,
                        gid=f"series-{k}-point-{drawn}")
                drawn += 1
                if text:
                    labels.append((x, y, text))
            handles.append(Line2D([], [], color=color, marker=marker, linestyle="-" if s.joined else "",
                                  label=s.label))
        # The reference's own lines: left of x = 1 is faster, below y = 1 holds less.
        ax.axhline(1.0, color="#999999", linestyle="--", linewidth=0.8, zorder=1)
        ax.axvline(1.0, color="#999999", linestyle="--", linewidth=0.8, zorder=1)
        xs = [x for s in series for x, _ in s.points] + [1.0]
        ys = [y for s in series for _, y in s.points] + [1.0]
        for values, setter in ((xs, ax.set_xlim), (ys, ax.set_ylim)):
            pad = (max(values) - min(values)) * 0.08 or 0.05
            setter(min(values) - pad, max(values) + pad)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if handles:
            ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        left_out = place_labels(fig, ax, labels)
        if left_out:
            # No free place by its point: the label goes in a list under the legend instead of over other text.
            fig.text(0.755, 0.12, "not labelled for space:\n" + "\n".join(left_out), fontsize=6.5, va="bottom")
        return _to_svg(fig, uid, title)


def loss_curves_svg(series: Sequence[Series], *, loss_floor: float | None, title: str, uid: str) -> str:
    """Per-epoch loss of every cell of one model, a small multiple per optimizer on shared axes, the task's loss
    floor dashed in each (paper Figure 2).

    One panel per :attr:`Series.panel` (at most :data:`MAX_SERIES` curves each: a larger group is split), three
    panels a row; within a panel a curve's colour and style say its strategy, the same in every panel.

    Args:
        series: the curves.
        loss_floor: Bayes-optimal loss of the task, or ``None`` if unknown.
        title: what the figure shows: the SVG's accessible label (the page's figcaption prints it).
        uid: unique id prefix for this figure's SVG ids (several figures share one HTML page).

    Returns:
        An ``<svg>`` element.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    panels = _small_multiples(series, lambda s: s.panel)
    n_cols = min(3, max(len(panels), 1))
    n_rows = max(1, math.ceil(len(panels) / n_cols))
    width, height = 7.6, 0.85 + 1.75 * n_rows
    margins = dict(left=0.65 / width, right=0.98, bottom=0.45 / height, top=1 - 0.6 / height, wspace=0.12,
                   hspace=0.4)
    with _figure(uid, (width, height), margins) as fig:
        axes = fig.subplots(n_rows, n_cols, squeeze=False, sharex=True, sharey=True)
        colors = _colors()
        entries: dict[str, object] = {}
        drawn = 0
        for index in range(n_rows * n_cols):
            ax = axes[index // n_cols][index % n_cols]
            if index >= len(panels):
                ax.set_axis_off()
                continue
            name, members = panels[index]
            for s in members:
                line, marker = _STRATEGY_STYLES[s.style_index % len(_STRATEGY_STYLES)]
                color = colors[s.style_index % len(colors)]
                (drawn_line,) = ax.plot(s.epochs, s.losses, linestyle=line, marker=marker, markersize=3,
                                        linewidth=1.2, color=color, gid=f"series-{drawn}")
                entries.setdefault(s.label, drawn_line)
                if s.failed and s.epochs:
                    ax.plot([s.epochs[-1]], [s.losses[-1]], marker="x", markersize=8, color=color, linestyle="",
                            gid=f"series-{drawn}-end")
                    entries.setdefault("stopped early", Line2D([], [], marker="x", color="#444444", linestyle=""))
                drawn += 1
            if loss_floor is not None:
                ax.axhline(loss_floor, color="black", linestyle="--", linewidth=1, gid=f"reference-floor-{index}")
            ax.set_title(name, fontsize=8)
            ax.grid(True, alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
            if index % n_cols == 0:
                ax.set_ylabel("cross-entropy / target")
            if index // n_cols == n_rows - 1 or index + n_cols >= len(panels):
                ax.set_xlabel("epoch")
                ax.xaxis.set_tick_params(labelbottom=True)  # sharex hides it on panels above an empty slot
        values = [v for s in series for v in s.losses] + ([loss_floor] if loss_floor is not None else [])
        _fit_y(axes[0][0], values)  # shared: one scale for every panel; the floor kept off the bottom spine
        if loss_floor is not None:
            entries["loss floor (Bayes-optimal)"] = Line2D([], [], color="black", linestyle="--", linewidth=1)
        if entries:
            fig.legend(list(entries.values()), list(entries), loc="upper center", bbox_to_anchor=(0.5, 1.0),
                       ncols=min(len(entries), 5), frameon=False)
        return _to_svg(fig, uid, title)


def _small_multiples(items: Sequence, panel_of) -> list[tuple[str, list]]:
    """Items grouped by panel in first-seen order, a group of more than :data:`MAX_SERIES` split in parts."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(panel_of(item), []).append(item)
    panels = []
    for name, members in groups.items():
        parts = [members[i:i + MAX_SERIES] for i in range(0, len(members), MAX_SERIES)]
        for number, part in enumerate(parts):
            panels.append((name if len(parts) == 1 else f"{name} ({number + 1}/{len(parts)})", part))
    return panels


def pareto_svg(points: Sequence[Point], *, title: str, uid: str, ylabel: str = "final loss",
               colors_named: Sequence[str] = (), markers_named: Sequence[str] = ()) -> str:
    """A quality against time per epoch in their own units, Pareto-optimal cells ringed and joined (paper Figure 4).

    One marker series per strategy (a point's colour is its optimizer), so the plot holds a few series whatever
    the number of optimizers; the legend names colours and markers once. Only the Pareto-optimal points are
    labelled, each where its text overlaps no other text (see :func:`place_labels`).

    Args:
        points: one per comparable cell.
        title: what the figure shows: the SVG's accessible label (the page's figcaption prints it).
        uid: unique id prefix for this figure's SVG ids.
        ylabel: the vertical axis's title.
        colors_named: the legend's name of each colour index (the optimizers).
        markers_named: the legend's name of each marker index (the strategies).

    Returns:
        An ``<svg>`` element.
    """
    from matplotlib.lines import Line2D

    with _figure(uid, (7.6, 3.9), _LEGEND_RIGHT) as fig:
        ax = fig.subplots()
        colors = _colors()
        by_style: dict[int, list[Point]] = {}
        for p in points:
            by_style.setdefault(p.style_index, []).append(p)
        for k, (style, members) in enumerate(sorted(by_style.items())):
            _, marker = _STRATEGY_STYLES[style % len(_STRATEGY_STYLES)]
            ax.scatter([p.x for p in members], [p.y for p in members], marker=marker, zorder=3,
                       s=[70 if p.on_front else 28 for p in members],
                       color=[colors[p.color_index % len(colors)] for p in members],
                       edgecolors=["black" if p.on_front else "none" for p in members], linewidths=1.2,
                       gid=f"series-{k}")
        front = sorted((p for p in points if p.on_front), key=lambda p: (p.x, p.y))
        if front:
            # The front as a staircase: everything above and to the right of it is dominated.
            ax.step([p.x for p in front], [p.y for p in front], where="post", color="black", linewidth=1,
                    alpha=0.6, zorder=2, gid=f"series-{len(by_style)}")
        if _spans_decades([p.y for p in points]):
            _log_y(ax)
        ax.set_xlabel("time per epoch (s)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        handles, labels = [], []
        used_colors = sorted({p.color_index for p in points})
        for index in used_colors:
            handles.append(Line2D([], [], marker="o", linestyle="", color=colors[index % len(colors)]))
            labels.append(colors_named[index] if index < len(colors_named) else f"colour {index}")
        for style in sorted(by_style):
            _, marker = _STRATEGY_STYLES[style % len(_STRATEGY_STYLES)]
            handles.append(Line2D([], [], marker=marker, linestyle="", color="#555555"))
            labels.append(markers_named[style] if style < len(markers_named) else f"marker {style}")
        if front:
            handles.append(Line2D([], [], color="black", alpha=0.6, linewidth=1))
            labels.append("Pareto frontier")
        if handles:
            ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        place_labels(fig, ax, [(p.x, p.y, p.label) for p in front])
        return _to_svg(fig, uid, title)


def heatmap_grid_svg(panels: Sequence[Sequence[HeatPanel]], *, uid: str, title: str) -> str:
    """A grid of optimizer × strategy heat maps: one row per model, one column per metric (paper Figure 3).

    Colours are scaled per panel (metrics have different units); cells without a measurement are
    grey and say ``n/a``.

    Args:
        panels: ``panels[model_row][metric_column]``; rows may have equal lengths only.
        uid: unique id prefix for this figure's SVG ids.
        title: figure title (for screen readers).

    Returns:
        An ``<svg>`` element.
    """
    n_rows = len(panels)
    n_cols = max((len(row) for row in panels), default=0)
    width, height = 2.7 * max(n_cols, 1) + 0.4, 2.3 * max(n_rows, 1)
    # Room in inches for the optimizer labels left, strategy labels below and titles above.
    margins = dict(left=0.7 / width, right=1 - 0.15 / width, bottom=0.35 / height, top=1 - 0.3 / height,
                   wspace=0.45, hspace=0.45)
    with _figure(uid, (width, height), margins) as fig:
        axes = fig.subplots(max(n_rows, 1), max(n_cols, 1), squeeze=False)
        for r, row in enumerate(panels):
            for c in range(n_cols):
                if c < len(row):
                    _draw_heat_panel(axes[r][c], row[c], f"p{r}-{c}")
                else:
                    axes[r][c].set_axis_off()
        return _to_svg(fig, uid, title)


def _draw_heat_panel(ax, panel: HeatPanel, where: str) -> None:
    import numpy as np
    from matplotlib import colormaps

    data = np.array([[math.nan if v is None else v for v in row] for row in panel.values], dtype=float)
    # Darker is better on every panel: reversed map when lower is better (memory).
    cmap = colormaps["Greens" if panel.higher_is_better else "Greens_r"].with_extremes(bad="#e6e6e6")
    finite = data[np.isfinite(data)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    # pcolormesh draws vector quads; imshow would embed a raster image in the SVG.
    ax.pcolormesh(np.ma.masked_invalid(data), cmap=cmap, vmin=low, vmax=high if high > low else low + 1,
                  edgecolors="white", linewidth=1, gid=f"{where}-series-0")
    for i, row in enumerate(panel.texts):
        for j, text in enumerate(row):
            value = data[i, j]
            share = (value - low) / (high - low) if np.isfinite(value) and high > low else 0.0
            dark = (share if panel.higher_is_better else 1 - share) > 0.6 if np.isfinite(value) else False
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=6.5,
                    color="white" if dark else "#222222")
    ax.set_xticks([j + 0.5 for j in range(len(panel.columns))], panel.columns, fontsize=7)
    ax.set_yticks([i + 0.5 for i in range(len(panel.rows))], panel.rows, fontsize=7)
    ax.invert_yaxis()  # first optimizer on top, as in the tables
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(panel.title, fontsize=8)


def memory_bars_svg(bars: Sequence[Bar], *, title: str, uid: str) -> str:
    """Stacked horizontal bars of each cell's memory: parameters, gradients, optimizer state, activations.

    Args:
        bars: one per cell, top to bottom.
        title: what the figure shows: the SVG's accessible label (the page's figcaption prints it).
        uid: unique id prefix for this figure's SVG ids.

    Returns:
        An ``<svg>`` element.
    """
    height = 0.9 + 0.2 * max(len(bars), 1)
    # Inches, not fractions: the cell labels need ~1.5 in whatever the number of bars.
    margins = dict(left=1.6 / 7.6, right=0.97, bottom=0.45 / height, top=1 - 0.35 / height)
    with _figure(uid, (7.6, height), margins) as fig:
        ax = fig.subplots()
        positions = list(range(len(bars)))
        left = [0.0] * len(bars)
        # MiB for tiny models, GiB once a bar passes 4 GiB (Llama-3.2-1B with Adam in float32: weights,
        # gradients and two moments of 1.24 B parameters, 16 B each, about 18 GiB).
        unit, scale = ("GiB", 2**30) if max((sum(b.parts) for b in bars), default=0) > 4 * 2**30 else ("MiB", 2**20)
        for index, (name, color) in enumerate(_MEMORY_PARTS):
            widths = [bar.parts[index] / scale for bar in bars]
            bars_drawn = ax.barh(positions, widths, left=left, color=color, label=name, height=0.7)
            for number, patch in enumerate(bars_drawn.patches):
                patch.set_gid(f"series-{index}-bar-{number}")
            left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.set_yticks(positions, [bar.label for bar in bars], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=4, frameon=False)
        return _to_svg(fig, uid, title)


# Where a label may sit around its point, in points (dx, dy), tried in order: right above, right below, left above…
# Beyond the first ring a thin leader line joins the label to its point.
_LABEL_OFFSETS = ((5, 4), (5, -10), (-5, 4), (-5, -10), (0, 8), (0, -14), (8, -3), (-8, -3), (12, 14), (-12, 14),
                  (12, -20), (-12, -20), (16, 26), (-16, 26), (16, -32), (-16, -32), (20, 38), (-20, 38))
_LEADER_FROM = 12


def place_labels(fig, ax, items: Sequence[tuple[float, float, str]], *, fontsize: float = 7) -> list[str]:
    """Write each ``(x, y, text)`` next to its point where it overlaps no other text of the figure and stays inside
    the axes: the first free place of :data:`_LABEL_OFFSETS` (greedy, in the order given).

    The figure is laid out once first, so tick labels, titles and the legend are obstacles too.

    Returns:
        The texts that found no free place (not drawn): the caller names them in the figure's note.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    if not items:
        return []
    # Text extents need a renderer; an Agg canvas gives one (savefig still writes SVG with its own).
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    taken = [t.get_window_extent(renderer) for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    inside = ax.get_window_extent(renderer)
    left_out = []
    for x, y, text in items:
        for dx, dy in _LABEL_OFFSETS:
            leader = dict(arrowstyle="-", linewidth=0.5, color="#888888", shrinkA=0, shrinkB=3) \
                if abs(dy) > _LEADER_FROM else None
            label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize,
                                ha="left" if dx > 0 else "right" if dx < 0 else "center", annotation_clip=False,
                                arrowprops=leader)
            box = label.get_window_extent(renderer)
            fits = (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1)
            if fits and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                break
            label.remove()
        else:
            left_out.append(text)
    return left_out


@dataclass(frozen=True, slots=True, kw_only=True)
class TrendPoint:
    """One commit's value in a trend, with its interval (``low == high == value`` for an exact figure)."""

    label: str
    value: float
    low: float
    high: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TrendLevel:
    """A segment between change points: its first and last point (indices) and its weighted mean."""

    first: int
    last: int
    value: float


def trend_svg(points: Sequence[TrendPoint], levels: Sequence[TrendLevel], changes: Sequence[tuple[int, str]], *,
              title: str, uid: str, ylabel: str) -> str:
    """A figure across commits: each point with its interval, the levels between change points as flat lines, and
    each change point as a dashed line before its commit, labelled with its size.

    Args:
        points: the series in commit order (x labels: the commits' short hashes).
        levels: the segments the change points cut the series into.
        changes: ``(index of the first point of the new level, label)``.
        title: the SVG's accessible label.
        uid: unique id prefix for this figure's SVG ids.
        ylabel: the y axis's label.

    Returns:
        An ``<svg>`` element.
    """
    width, height = 7.6, 2.5
    with _figure(uid, (width, height), dict(left=0.1, right=0.98, bottom=0.3, top=0.9)) as fig:
        ax = fig.subplots()
        xs = list(range(len(points)))
        values = [p.value for p in points]
        below = [p.value - p.low for p in points]
        above = [p.high - p.value for p in points]
        ax.errorbar(xs, values, yerr=[below, above], fmt="o", markersize=3.5, color="#4c72b0", ecolor="#8fa8d0",
                    elinewidth=1, capsize=2, gid="points")
        for i, level in enumerate(levels):
            ax.plot([level.first - 0.3, level.last + 0.3], [level.value, level.value], color="#55a868",
                    linewidth=1.5, gid=f"level-{i}")
        for i, (index, label) in enumerate(changes):
            ax.axvline(index - 0.5, color="#c44e52", linestyle="--", linewidth=1.2, gid=f"change-{i}")
            ax.annotate(label, (index - 0.5, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -2),
                        textcoords="offset points", va="top", fontsize=7, color="#c44e52")
        ax.set_xticks(xs, [p.label for p in points], rotation=60, fontsize=6.5, ha="right")
        ax.set_xlim(-0.6, len(points) - 0.4)
        _fit_y(ax, [*values, *(p.low for p in points), *(p.high for p in points)])
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        return _to_svg(fig, uid, title)


def _colors() -> list[str]:
    from matplotlib import colormaps

    return [colormaps["tab10"](i) for i in range(10)]


def _fit_y(ax, values: Sequence[float]) -> None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return
    low, high = min(values), max(values)
    if _spans_decades(values):
        _log_y(ax)
        ax.set_ylim(low / 1.25, high * 1.25)
    else:
        pad = (high - low) * 0.06 or abs(high) * 0.05 or 1.0
        ax.set_ylim(low - pad, high + pad)


def _spans_decades(values: Sequence[float]) -> bool:
    # A log axis only once positive values span two decades (a diverging CGD run at 996 next to a floor at 0.06):
    # below that a linear axis keeps the curves' differences readable, where a log one squeezes them in one band.
    values = [v for v in values if v is not None and math.isfinite(v)]
    return bool(values) and min(values) > 0 and max(values) / min(values) >= DECADES_FOR_LOG


_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)
_ID_REFERENCES = re.compile(r'(\bid="|\bxlink:href="#|\bhref="#|url\(#)([^"\)]+)')


def _to_svg(fig, uid: str, title: str) -> str:
    # Dates and creator would make every report differ byte-wise and add nothing.
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = _PROLOG.sub("", buffer.getvalue(), count=1)  # drop <?xml …?> and the DOCTYPE: invalid inside HTML
    # matplotlib numbers ids per figure (figure_1, axes_1, clip paths): prefix them so that several
    # figures in one page neither share nor clash.
    svg = compact_svg(_ID_REFERENCES.sub(lambda m: f"{m.group(1)}{uid}-{m.group(2)}", svg))
    label = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return svg.replace("<svg ", f'<svg role="img" aria-label="{label}" class="figure" ', 1)
