"""Panels of labelled scatter points as inline SVG: the PEFT study's accuracy against a cost.

Kept apart from :mod:`gradeff.report.plots` (which holds the main study's figures) but drawn with the same figure
setup, SVG export and label placement (:mod:`gradeff.report.svg_figure`), so every figure of the page reads the same
and passes the same checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gradeff.report.svg_figure import place_labels, report_figure, tab10_colors, to_svg

__all__ = ["ScatterPanel", "ScatterPoint", "scatter_panels_svg"]

_MARKERS = ("o", "s", "^", "D", "v", "P")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScatterPoint:
    """One cell: where it is drawn, its colour (the method) and marker (the backbone)."""

    x: float
    y: float
    color_index: int
    marker_index: int
    label: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScatterPanel:
    """One axes: its title, axis titles (with units) and points; ``log_x`` for a cost spanning decades."""

    title: str
    xlabel: str
    ylabel: str
    points: tuple[ScatterPoint, ...]
    log_x: bool = False


def scatter_panels_svg(panels: Sequence[Sequence[ScatterPanel]], *, title: str, uid: str,
                       colors_named: Sequence[str], markers_named: Sequence[str]) -> str:
    """Rows of scatter panels sharing one legend: colours name ``colors_named``, markers ``markers_named``.

    Points are labelled where a label fits without overlapping other text
    (:func:`~gradeff.report.svg_figure.place_labels`); the legend below the panels says what colour and marker mean,
    so an unlabelled point still reads.
    """
    from matplotlib.lines import Line2D

    n_rows = max(len(panels), 1)
    n_cols = max((len(row) for row in panels), default=1)
    width, height = 7.6, 1.2 + 2.3 * n_rows
    margins = dict(left=0.75 / width, right=0.98, bottom=1.25 / height, top=1 - 0.35 / height, wspace=0.3,
                   hspace=0.6)
    with report_figure(uid, (width, height), margins) as fig:
        axes = fig.subplots(n_rows, n_cols, squeeze=False)
        colors = tab10_colors()
        used_colors, used_markers = set(), set()
        for r, row in enumerate(panels):
            for c in range(n_cols):
                ax = axes[r][c]
                if c >= len(row) or not row[c].points:
                    ax.set_axis_off()
                    continue
                panel = row[c]
                by_marker: dict[int, list[ScatterPoint]] = {}
                for p in panel.points:
                    by_marker.setdefault(p.marker_index, []).append(p)
                # One collection per marker, coloured point by point: one marker shape in the SVG, not one per point.
                for k, (marker, members) in enumerate(sorted(by_marker.items())):
                    ax.scatter([p.x for p in members], [p.y for p in members], marker=_MARKERS[marker % len(_MARKERS)],
                               s=30, zorder=3, color=[colors[p.color_index % len(colors)] for p in members],
                               gid=f"p{r}-{c}-series-{k}")
                    used_colors.update(p.color_index for p in members)
                    used_markers.add(marker)
                if panel.log_x and _positive_span(p.x for p in panel.points) >= 10:
                    _log_x(ax)
                ax.set_title(panel.title, fontsize=8)
                ax.set_xlabel(panel.xlabel)
                ax.set_ylabel(panel.ylabel)
                ax.grid(True, alpha=0.3)
                place_labels(fig, ax, [(p.x, p.y, p.label) for p in panel.points if p.label], fontsize=6.5)
        handles = [Line2D([], [], marker="o", linestyle="", color=colors[i % len(colors)]) for i in sorted(used_colors)]
        labels = [colors_named[i] if i < len(colors_named) else f"colour {i}" for i in sorted(used_colors)]
        handles += [Line2D([], [], marker=_MARKERS[i % len(_MARKERS)], linestyle="", color="#555555")
                    for i in sorted(used_markers)]
        labels += [markers_named[i] if i < len(markers_named) else f"marker {i}" for i in sorted(used_markers)]
        if handles:
            fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=min(len(handles), 4),
                       frameon=False)
        return to_svg(fig, uid, title)


def _log_x(ax) -> None:
    # Plain-number tick labels: math parsing is off (see svg_figure.log_y), so "$10^{4}$" would print literally.
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _positive_span(values) -> float:
    positive = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return max(positive) / min(positive) if positive else 1.0
