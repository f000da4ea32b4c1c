"""The heat maps of the report: a grid of optimizer × strategy panels, one per model and metric, as inline SVG."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gradeff.report.svg_figure import report_figure, to_svg

__all__ = ["HeatPanel", "heatmap_grid_svg"]


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
    with report_figure(uid, (width, height), margins) as fig:
        axes = fig.subplots(max(n_rows, 1), max(n_cols, 1), squeeze=False)
        for r, row in enumerate(panels):
            for c in range(n_cols):
                if c < len(row):
                    _draw_heat_panel(axes[r][c], row[c], f"p{r}-{c}")
                else:
                    axes[r][c].set_axis_off()
        return to_svg(fig, uid, title)


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
