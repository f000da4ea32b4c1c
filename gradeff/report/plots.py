"""The main study's figures as inline SVG strings: loss curves, the Pareto and trade-off scatters, held-out
accuracy curves and memory bars.

Functions here take plain, already-selected data (no records) and return an ``<svg>`` element to
embed in the HTML; they draw on :mod:`gradeff.report.svg_figure` (its style, its SVG). The heat maps are
:mod:`gradeff.report.heat_maps`', the history's trend :mod:`gradeff.report.trend_plot`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gradeff.report.svg_figure import (
    LEGEND_RIGHT,
    MAX_SERIES,
    fit_y,
    log_y,
    place_labels,
    report_figure,
    spans_decades,
    tab10_colors,
    to_svg,
)

__all__ = [
    "Bar", "Curve", "CurvePanel", "Point", "Series", "TradeoffSeries", "accuracy_panels_svg", "loss_curves_svg",
    "memory_bars_svg", "pareto_svg", "tradeoff_svg",
]

_STRATEGY_STYLES = (("-", "o"), ("-.", "s"), (":", "^"), ((0, (1, 1)), "D"), ((0, (5, 1, 1, 1)), "v"))
_MEMORY_PARTS = (("parameters", "#4c72b0"), ("gradients", "#dd8452"), ("optimizer state", "#55a868"),
                 ("activations", "#c44e52"))


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
    with report_figure(uid, (width, height), margins) as fig:
        axes = fig.subplots(n_rows, n_cols, squeeze=False)
        colors = tab10_colors()
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
        return to_svg(fig, uid, title)


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

    with report_figure(uid, (7.6, 4.2), LEGEND_RIGHT) as fig:
        ax = fig.subplots()
        colors = tab10_colors()
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
        return to_svg(fig, uid, title)


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
    with report_figure(uid, (width, height), margins) as fig:
        axes = fig.subplots(n_rows, n_cols, squeeze=False, sharex=True, sharey=True)
        colors = tab10_colors()
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
        fit_y(axes[0][0], values)  # shared: one scale for every panel; the floor kept off the bottom spine
        if loss_floor is not None:
            entries["loss floor (Bayes-optimal)"] = Line2D([], [], color="black", linestyle="--", linewidth=1)
        if entries:
            fig.legend(list(entries.values()), list(entries), loc="upper center", bbox_to_anchor=(0.5, 1.0),
                       ncols=min(len(entries), 5), frameon=False)
        return to_svg(fig, uid, title)


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

    with report_figure(uid, (7.6, 3.9), LEGEND_RIGHT) as fig:
        ax = fig.subplots()
        colors = tab10_colors()
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
        if spans_decades([p.y for p in points]):
            log_y(ax)
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
        return to_svg(fig, uid, title)


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
    with report_figure(uid, (7.6, height), margins) as fig:
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
        return to_svg(fig, uid, title)


