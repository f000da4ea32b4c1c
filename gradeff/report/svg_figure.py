"""The common ground of the report's matplotlib figures: their style, a Figure under it, the axes' scales and
colours, labels placed where they overlap nothing, and the inline SVG a figure is saved as.

matplotlib is imported inside the functions: collecting the benchmark grid or running ``gradeff list`` must not
pay for it. Figures are built with ``matplotlib.figure.Figure`` and saved straight to SVG, so no GUI backend is
ever selected and the process-wide pyplot state (and whatever backend a user's session chose) is left alone.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gradeff.report.svg_compact import compact_svg

__all__ = [
    "DECADES_FOR_LOG", "LEGEND_RIGHT", "MAX_SERIES", "fit_y", "log_y", "place_labels", "report_figure",
    "spans_decades", "tab10_colors", "to_svg",
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


# Fixed margins, not constrained layout: that re-lays out every text several times and made the
# full grid's report 1.5x slower to build (7.7 s against 5.0 s). The right 26 % holds the legend.
LEGEND_RIGHT = dict(left=0.09, right=0.74, bottom=0.12, top=0.97)


@contextmanager
def report_figure(uid: str, size: tuple[float, float], margins: dict) -> Iterator:
    """A matplotlib Figure under the report's style; ``uid`` salts its SVG ids (several per page)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    with rc_context(_RC | {"svg.hashsalt": uid}):
        fig = Figure(figsize=size)
        fig.subplots_adjust(**margins)
        yield fig


def log_y(ax) -> None:
    """A log y axis with plain-number tick labels.

    Math parsing is off (model names may hold "$"), so matplotlib's default "$10^{0}$" labels
    would print literally.
    """
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())

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


def tab10_colors() -> list[str]:
    from matplotlib import colormaps

    return [colormaps["tab10"](i) for i in range(10)]


def fit_y(ax, values: Sequence[float]) -> None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return
    low, high = min(values), max(values)
    if spans_decades(values):
        log_y(ax)
        ax.set_ylim(low / 1.25, high * 1.25)
    else:
        pad = (high - low) * 0.06 or abs(high) * 0.05 or 1.0
        ax.set_ylim(low - pad, high + pad)


def spans_decades(values: Sequence[float]) -> bool:
    # A log axis only once positive values span two decades (a diverging CGD run at 996 next to a floor at 0.06):
    # below that a linear axis keeps the curves' differences readable, where a log one squeezes them in one band.
    values = [v for v in values if v is not None and math.isfinite(v)]
    return bool(values) and min(values) > 0 and max(values) / min(values) >= DECADES_FOR_LOG


_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.DOTALL)
_ID_REFERENCES = re.compile(r'(\bid="|\bxlink:href="#|\bhref="#|url\(#)([^"\)]+)')


def to_svg(fig, uid: str, title: str) -> str:
    # Dates and creator would make every report differ byte-wise and add nothing.
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = _PROLOG.sub("", buffer.getvalue(), count=1)  # drop <?xml …?> and the DOCTYPE: invalid inside HTML
    # matplotlib numbers ids per figure (figure_1, axes_1, clip paths): prefix them so that several
    # figures in one page neither share nor clash.
    svg = compact_svg(_ID_REFERENCES.sub(lambda m: f"{m.group(1)}{uid}-{m.group(2)}", svg))
    label = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return svg.replace("<svg ", f'<svg role="img" aria-label="{label}" class="figure" ', 1)
