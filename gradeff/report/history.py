"""The history page (``gradeff history report``): history store → view model → ``history.html.j2``.

One trend per machine, cell and metric (time per optimizer step, final losses, test accuracy, peak memory counted
from tensors) in commit order, each point with its interval; the change points found in it
(:func:`gradeff.gate.change_points.change_points`) drawn as dashed lines before their commits and listed, with the
size of each step and its interval, in one table on top. A figure that never moved is listed in a line instead of drawn.
The page is self-contained like the report: inline SVG, no network, the report's stylesheet (``base.html.j2``).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from markupsafe import Markup

from gradeff.gate.change_points import ChangePoint, change_points
from gradeff.gate.history import METRICS, HistoryStore, Point
from gradeff.report.render import jinja_environment
from gradeff.report.trend_plot import TrendLevel, TrendPoint, trend_svg
from gradeff.report.view import Section, html_id

__all__ = ["HISTORY_SECTIONS", "HISTORY_TEMPLATE", "ChangeRow", "HistoryView", "TrendView", "build_history_view",
           "render_history"]

HISTORY_TEMPLATE = "history.html.j2"
HISTORY_SECTIONS = (
    Section("overview", "Overview", ""),
    Section("changes", "Change points", ""),
    Section("trends", "Trends", ""),
    Section("commits", "Commits", ""),
    Section("method", "How the change points are found", ""),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeRow:
    """One change point as the page lists it."""

    trend_id: str
    cell: str
    metric: str
    machine: str
    commit: str
    date: str
    message: str
    before: str
    after: str
    size: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TrendView:
    """One series: its figure (``None`` when it never moved: ``note`` says so) and its change points."""

    id: str
    cell: str
    metric: str
    machine: str
    setting: str
    points: int
    figure: Markup | None
    changes: tuple[ChangeRow, ...]
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryView:
    """The whole page."""

    title: str
    generated_at: str
    sections: tuple[Section, ...]
    overview: tuple[tuple[str, str], ...]
    changes: tuple[ChangeRow, ...]
    trends: tuple[TrendView, ...]
    commits: tuple[tuple[str, str, str], ...]
    method: str


# A commit's subject is shown up to this many characters (the full subject is in the commits table).
_SUBJECT = 140


def _subject(message: str) -> str:
    return message if len(message) <= _SUBJECT else message[:_SUBJECT - 1].rstrip() + "…"


def _date(iso: str) -> str:
    """``2026-12-03T01:03:02+00:00`` → ``2026-12-03 01:03`` (the store keeps the full committer date)."""
    return iso[:16].replace("T", " ") if len(iso) >= 16 else iso


def _value(metric: str, value: float) -> str:
    if metric == "time_per_step":
        return f"{value * 1000:.3g} ms"
    if metric == "peak_bytes":
        return f"{value / 2**20:.4g} MiB"
    return f"{value:.6g}"


def _size(metric: str, change: ChangePoint) -> str:
    if change.log:
        return f"x{change.size:.3f} (x{change.low:.3f} - x{change.high:.3f})"
    return f"{change.size:+.4g} ({change.low:+.4g} - {change.high:+.4g})"


def _levels(points: list[Point], changes: list[ChangePoint]) -> tuple[TrendLevel, ...]:
    bounds = [0, *(c.index for c in changes), len(points)]
    levels = []
    for i, (first, end) in enumerate(zip(bounds, bounds[1:])):
        value = changes[i].before if i < len(changes) else (changes[-1].after if changes else None)
        if value is None:
            value = sum(p.value for p in points) / len(points)
        levels.append(TrendLevel(first=first, last=end - 1, value=value))
    return tuple(levels)


def _trend(store: HistoryStore, key: tuple[str, str, int, str, str], index: int) -> TrendView:
    machine, cell, seed, metric, setting = key
    spec = METRICS[metric]
    points = store.series(machine, cell, metric, seed, setting)
    trend_id = html_id(f"{cell}-{metric}", index, prefix="trend-")
    label = f"{spec.label} of {cell}" + (f" (seed {seed})" if seed else "") + f" [{setting}]"
    if len({p.value for p in points}) == 1:
        return TrendView(id=trend_id, cell=cell, metric=spec.label, machine=machine, setting=setting,
                         points=len(points), figure=None, changes=(),
                         note=f"{label}: {_value(metric, points[0].value)} at every one of {len(points)} commits")
    found = change_points(points, log=spec.log)
    rows = tuple(ChangeRow(trend_id=trend_id, cell=cell, metric=spec.label, machine=machine,
                           commit=c.commit.commit[:10], date=_date(c.commit.date), message=_subject(c.commit.message),
                           before=_value(metric, c.before), after=_value(metric, c.after), size=_size(metric, c))
                 for c in found)
    scale = {"time_per_step": 1000.0, "peak_bytes": 1 / 2**20}.get(metric, 1.0)
    trend = [TrendPoint(label=p.commit.commit[:8], value=p.value * scale,
                        low=(p.low if p.low is not None else p.value) * scale,
                        high=(p.high if p.high is not None else p.value) * scale) for p in points]
    levels = tuple(TrendLevel(first=lv.first, last=lv.last, value=lv.value * scale) for lv in _levels(points, found))
    unit = {"time_per_step": " (ms)", "peak_bytes": " (MiB)"}.get(metric, "")
    figure = trend_svg(trend, levels, [(c.index, c.commit.commit[:8]) for c in found], title=label, uid=trend_id,
                       ylabel=f"{spec.label}{unit}")
    note = (f"{len(found)} change point(s)" if found else "no change point") + f" over {len(points)} commits"
    return TrendView(id=trend_id, cell=cell, metric=spec.label, machine=machine, setting=setting,
                     points=len(points), figure=Markup(figure), changes=rows, note=note)


_METHOD = ("Each series is one cell's figure on one machine, in commit order (committer date). Its change points "
           "are found by PELT (ruptures) with a cost that weighs each point by its own interval: the weighted "
           "squared distance to its segment's weighted mean, a point's weight 1 / (its standard error² + the "
           "series' own noise beyond the intervals, estimated from successive differences in a way a step does "
           "not inflate). The penalty per change point is 5 × ln n in those chi-square units. Time is compared "
           "in logs: a change point's size is the ratio of the two levels' weighted means with its 95 % "
           "interval; a loss, an accuracy or a byte count, exact on one machine, changes when it moves beyond "
           "1e-6 relative, and its size is the difference of the levels. Times measured side by side in one run "
           "(gradeff history run) compare; times from different runs carry each run's load. Each commit of a run "
           "trains in a worker process of its own, whose memory layout can make it a few percent faster or slower "
           "whatever the rounds: a time change point of a few percent found in one run is worth a second run (or "
           "gradeff ab between its two commits) before it is believed.")


def build_history_view(store: HistoryStore, *, title: str = "gradeff history",
                       generated_at: str | None = None) -> HistoryView:
    """The page's view model from every series in ``store`` (metric order as :data:`METRICS`)."""
    order = list(METRICS)
    keys = sorted(store.keys(), key=lambda k: (k[0], k[4], k[1], k[2], order.index(k[3]) if k[3] in order else 99))
    trends = tuple(_trend(store, key, i) for i, key in enumerate(keys) if key[3] in METRICS)
    commits = store.commits()
    machines = store.machines()
    overview = (
        ("commits", f"{len(commits)}" + (f": {commits[0].commit[:10]} ({_date(commits[0].date)}) to "
                                         f"{commits[-1].commit[:10]} ({_date(commits[-1].date)})" if commits else "")),
        ("cells", str(len({t.cell for t in trends}))),
        ("series", f"{len(trends)}, {sum(t.figure is not None for t in trends)} of which moved"),
        ("change points", str(sum(len(t.changes) for t in trends))),
        *((f"machine {key}", description) for key, description in machines.items()),
    )
    return HistoryView(
        title=title, generated_at=generated_at or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        sections=HISTORY_SECTIONS, overview=overview, changes=tuple(row for t in trends for row in t.changes),
        trends=trends, commits=tuple((c.commit[:10], _date(c.date), c.message) for c in commits), method=_METHOD)


def render_history(view: HistoryView) -> str:
    """The page's HTML."""
    return jinja_environment().get_template(HISTORY_TEMPLATE).render(view=view)
