"""Whether a heat map's panel shows a difference worth a colour scale, or only noise.

A colour scale stretches whatever spread there is from light to dark: a 3 % difference in process memory looked
as decisive as a tenfold one. A panel is coloured only where its best and worst cells differ by more than the
metric's noise, the practical-equivalence margin the Answer uses (:mod:`gradeff.analysis.margins`): ±2 % for
memory; utilization, which follows time per step, takes the speed margin (±5 %). The process's RSS (RAM peak)
is noise by construction when the cells shared one long process: the first cell paid for every import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gradeff import analysis
from gradeff.analysis import Metric
from gradeff.analysis.margins import Margin, margin_for
from gradeff.records.results import CellRecord

__all__ = ["noise_margin", "within_noise"]


def noise_margin(metric: Metric) -> Margin:
    """The spread below which ``metric``'s differences are noise: the memory margin for bytes, else speed's."""
    return margin_for("memory" if metric.unit == "bytes" else "speed", metric.unit)


def within_noise(metric: Metric, values: Sequence[float | None], records: Iterable[CellRecord]) -> str:
    """Why a panel of ``values`` gets no colour scale (``""``: its spread exceeds the noise, so it does).

    Args:
        metric: the panel's metric.
        values: its cells' means (``None``: not measured).
        records: the records behind them (their isolation decides whether an RSS compares at all).
    """
    if metric.key == "ram_peak" and not all(analysis.isolated(r) for r in records):
        return "process RSS of cells that shared one process"
    found = [v for v in values if v is not None]
    if len(found) < 2:
        return "fewer than two cells measured"
    best = max(found) if metric.goal == "max" else min(found)
    margin = noise_margin(metric)
    if max(found) - min(found) <= margin.size(best):
        spread = (max(found) - min(found)) / abs(best) if best else 0.0
        return f"spread {spread:.1%} within {margin.text}"
    return ""
