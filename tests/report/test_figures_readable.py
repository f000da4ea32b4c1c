"""Figures a person can read, checked on the SVGs a full report embeds: at most six data series per axes, no text
drawn over other text, and a linear axis unless the values span two decades."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from gradeff.report import write_report
from gradeff.report.plots import Point, Series, loss_curves_svg, pareto_svg
from gradeff.report.svg_figure import MAX_SERIES
from tests.report.test_report_memory import llm_cells, memory_record  # noqa: F401  (fixtures)

SVG = "{http://www.w3.org/2000/svg}"
# matplotlib's own names of artists drawn without a series tag: each would be one series of its axes.
_UNTAGGED_DATA = re.compile(r"-(line2d|PathCollection|QuadMesh|LineCollection|PolyCollection)_\d+$")
_TAGGED = re.compile(r"-series-(\d+)")


def series_per_axes(svg: str) -> list[int]:
    """The number of data series of each axes of an SVG: distinct ``series-K`` groups among its direct children,
    plus every untagged line or collection (ticks and legends are not direct children of the axes group)."""
    root = ET.fromstring(svg)
    counts = []
    for group in root.iter(f"{SVG}g"):
        if not re.search(r"-axes_\d+$", group.get("id", "")):
            continue
        tagged, untagged = set(), 0
        for child in group:
            name = child.get("id", "")
            if found := _TAGGED.search(name):
                tagged.add(found.group(1))
            elif _UNTAGGED_DATA.search(name):
                untagged += 1
        counts.append(len(tagged) + untagged)
    return counts


def _style(element, rules: dict[str, str]) -> dict[str, str]:
    """The element's style: its inline one, else its class's rule in the SVG's <style>."""
    declared = element.get("style") or rules.get(element.get("class") or "", "")
    pairs = (part.split(":", 1) for part in declared.split(";") if ":" in part)
    return {key.strip(): value.strip() for key, value in pairs}


def _class_rules(root) -> dict[str, str]:
    css = "".join("".join(style.itertext()) for style in root.iter(f"{SVG}style"))
    return dict(re.findall(r"\.([\w-]+)\{([^}]*)\}", css))


def text_boxes(svg: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Every text of an SVG with its box ``(x0, y0, x1, y1)`` in SVG units, measured with matplotlib's own font
    metrics (the SVG keeps text as text: its size, anchor, position and rotation are attributes)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    measure = TextToPath()
    boxes = []
    root = ET.fromstring(svg)
    rules = _class_rules(root)
    for element in root.iter(f"{SVG}text"):
        text = "".join(element.itertext())
        if not text.strip():
            continue
        style = _style(element, rules)
        size = float(style["font-size"].removesuffix("px"))
        width, height, descent = measure.get_text_width_height_descent(
            text, FontProperties(family="DejaVu Sans", size=size), ismath=False)
        x, y = float(element.get("x")), float(element.get("y"))
        anchor = style.get("text-anchor", "start")
        x0 = x - {"start": 0.0, "middle": width / 2, "end": width}[anchor]
        corners = [(x0, y - (height - descent)), (x0 + width, y + descent)]
        rotation = re.match(r"rotate\((-?[\d.]+)", element.get("transform") or "")
        angle = math.radians(float(rotation.group(1))) if rotation else 0.0
        if angle:
            # SVG rotates about (x, y): turn the box's corners and take their bounds.
            points = [(cx, cy) for cx in (corners[0][0], corners[1][0]) for cy in (corners[0][1], corners[1][1])]
            turned = [(x + (px - x) * math.cos(angle) - (py - y) * math.sin(angle),
                       y + (px - x) * math.sin(angle) + (py - y) * math.cos(angle)) for px, py in points]
            corners = [(min(p[0] for p in turned), min(p[1] for p in turned)),
                       (max(p[0] for p in turned), max(p[1] for p in turned))]
        boxes.append((text, (corners[0][0], corners[0][1], corners[1][0], corners[1][1])))
    return boxes


def overlapping_texts(svg: str, slack: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes overlap by more than ``slack`` SVG units both ways."""
    boxes = text_boxes(svg)
    pairs = []
    for i, (a, (ax0, ay0, ax1, ay1)) in enumerate(boxes):
        for b, (bx0, by0, bx1, by1) in boxes[i + 1:]:
            if min(ax1, bx1) - max(ax0, bx0) > slack and min(ay1, by1) - max(ay0, by0) > slack:
                pairs.append((a, b))
    return pairs


@pytest.fixture
def report_svgs(grid_records, llm_cells, make_peft_record, tmp_path):  # noqa: F811
    """Every figure of a report of the main grid, the PEFT study (five methods) and the memory study."""
    peft = [make_peft_record(method=m) for m in ("full", "lora", "adalora", "qlora", "bitfit")]
    html = write_report([*grid_records, *peft, *llm_cells], tmp_path / "report.html").read_text(encoding="utf-8")
    svgs = re.findall(r"<svg .*?</svg>", html, re.S)
    # Per model curves and Pareto; heat maps; PEFT accuracy per epoch and against its costs; the memory trade-off.
    assert len(svgs) == 4 * 2 + 1 + 2 + 1
    return svgs


def test_no_axes_holds_more_than_six_series(report_svgs):
    """Every axes of every figure draws at most six series (the loss curves are small multiples by optimizer)."""
    counts = {_label(svg): series_per_axes(svg) for svg in report_svgs}
    assert all(counts.values()), "an SVG without any axes: the counter found nothing to check"
    assert max(max(c) for c in counts.values()) <= MAX_SERIES, counts
    title = ": training loss per epoch, a panel per optimizer, a line per strategy"
    (curves,) = [found for label, found in counts.items() if label.startswith("ViT-shaped") and label.endswith(title)]
    assert curves == [3] * 6  # six optimizers, three strategies each


def _label(svg: str) -> str:
    return re.search(r'aria-label="([^"]*)"', svg).group(1)


def test_no_text_overlaps_another(report_svgs):
    """No label, tick, title or legend entry of any figure is drawn over another."""
    assert all(len(text_boxes(svg)) > 5 for svg in report_svgs), "text drawn as paths: nothing to measure"
    overlaps = {_label(svg): overlapping_texts(svg) for svg in report_svgs}
    assert not {key: pairs for key, pairs in overlaps.items() if pairs}


def test_overlap_check_catches_overprinted_labels():
    """Control: labels of neighbouring points written at one offset overlap, and the check says so; the same
    points through the report's placement do not."""
    points = [Point(label=f"adam/standard-{i}", color_index=i, style_index=0, x=1.0 + 0.001 * i, y=2.0 - 0.001 * i,
                    on_front=True) for i in range(4)]
    far = Point(label="sgd/standard", color_index=5, style_index=1, x=3.0, y=5.0, on_front=False)
    near = Point(label="sgd/accum", color_index=5, style_index=2, x=0.2, y=0.5, on_front=False)
    placed = pareto_svg([*points, far, near], title="t", uid="placed")
    assert not overlapping_texts(placed)
    assert sum(f">{p.label}<" in placed for p in points) >= 2  # placed, not merely dropped
    from gradeff.report.svg_figure import report_figure, to_svg

    with report_figure("naive", (4, 3), {}) as fig:  # the report's style: text kept as text
        ax = fig.subplots()
        for p in [*points, far, near]:
            ax.plot([p.x], [p.y], "o")
            ax.annotate(p.label, (p.x, p.y), textcoords="offset points", xytext=(5, 4))
        naive = to_svg(fig, "naive", "t")
    assert overlapping_texts(naive)


def test_series_counter_counts_untagged_artists():
    """Control: a plot of eight lines drawn without series tags counts eight."""
    from gradeff.report.svg_figure import report_figure, to_svg

    with report_figure("plain", (4, 3), {}) as fig:
        ax = fig.subplots()
        for i in range(8):
            ax.plot([0, 1], [i, i + 1])
        assert series_per_axes(to_svg(fig, "plain", "t")) == [8]


def _y_ticks(svg: str) -> list[float]:
    # The y axis's tick labels: texts anchored at their end (right-aligned, left of the axes).
    values = []
    root = ET.fromstring(svg)
    rules = _class_rules(root)
    for element in root.iter(f"{SVG}text"):
        if _style(element, rules).get("text-anchor") != "end":
            continue
        try:
            values.append(float("".join(element.itertext()).replace("\u2212", "-")))
        except ValueError:
            pass
    return values


@pytest.mark.parametrize(("losses", "floor", "log"), [
    ((2.3, 0.9, 0.3, 0.1), 0.06, False),  # 38x: a linear axis keeps the curves apart
    ((100.0, 10.0, 0.1), 0.05, True),  # 2000x: decades, a log axis
])
def test_axis_is_linear_unless_the_values_span_decades(losses, floor, log):
    """The loss curves' axis is logarithmic only from two decades on."""
    series = [Series(label="standard", color_index=0, style_index=0, epochs=tuple(range(1, len(losses) + 1)),
                     losses=losses, panel="Adam")]
    svg = loss_curves_svg(series, loss_floor=floor, title="t", uid="t")
    ticks = sorted(set(_y_ticks(svg)))
    assert len(ticks) >= 3, ticks
    steps = {round(b - a, 6) for a, b in zip(ticks, ticks[1:])}
    assert (len(steps) > 1) == log, ticks  # a linear axis's ticks are evenly spaced
