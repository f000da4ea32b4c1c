"""The history's trend figure: one measure across commits, with its intervals, levels and change points, as
inline SVG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradeff.report.svg_figure import fit_y, report_figure, to_svg

__all__ = ["TrendLevel", "TrendPoint", "trend_svg"]


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
    with report_figure(uid, (width, height), dict(left=0.1, right=0.98, bottom=0.3, top=0.9)) as fig:
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
        fit_y(ax, [*values, *(p.low for p in points), *(p.high for p in points)])
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        return to_svg(fig, uid, title)
