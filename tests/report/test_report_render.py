"""The HTML report: view model, units, escaping, strict templates, gaps, self-containment."""

import dataclasses
import re
from types import SimpleNamespace

import jinja2
import pytest

from gradeff.records.formatting import (
    NA,
    format_bytes,
    format_joules,
    format_loss,
    format_percent,
    format_ratio,
    format_seconds,
    format_value,
)
from gradeff.report import build_view, jinja_environment, render_html, status_text, write_report
from gradeff.report.context import methods
from tests.report.conftest import Page, self_contained_page, without_own_script

SCRIPT = "<script>alert(1)</script>"


def test_units_are_human_readable_and_missing_is_na():
    """Bytes, seconds, joules, percent, loss and ratio formatting; None/NaN/bool/strings are n/a, never 0."""
    assert format_bytes(512) == "512 B" and format_bytes(3 * 2**20) == "3.00 MiB"
    assert format_bytes(1.5 * 2**30) == "1.50 GiB" and format_bytes(123.4 * 2**10) == "123 KiB"
    assert format_seconds(0.0525) == "52.5 ms" and format_seconds(3.21) == "3.21 s"
    assert format_seconds(75) == "1 min 15 s" and format_seconds(7260) == "2 h 1 min"
    assert format_joules(49.9) == "49.9 J" and format_joules(12_300) == "12.3 kJ"
    assert format_percent(97.25) == "97.2 %" and format_loss(0.021347) == "0.02135"
    assert format_ratio(0.5) == "0.50×" and format_value(7, "bytes") == "7 B"
    for missing in (None, float("nan"), float("inf"), True, "12", {}):
        assert {format_bytes(missing), format_seconds(missing), format_joules(missing),
                format_percent(missing), format_loss(missing), format_ratio(missing)} == {NA}


def test_status_text_names_the_failure(make_record):
    """Failed cells read 'diverged at step 37', 'oom', 'error', 'skipped'."""
    assert status_text(make_record(status="diverged", failed_step=37)) == "diverged at step 37"
    assert status_text(make_record(status="diverged")) == "diverged"
    assert status_text(make_record(status="oom", failed_step=2)) == "oom"
    assert status_text(make_record(status="skipped")) == "skipped"


def test_grid_table_highlights_the_best_cell_and_shows_status(make_record):
    """Tables 4–7: the lowest final loss is 'best' (one seed: the other is open); a diverged cell shows its status,
    a missing one n/a."""
    records = [
        make_record("llm-sgd-standard", losses=(3.0, 2.0)),
        make_record("llm-sgd-accum", losses=(3.0, 1.0)),
        make_record("llm-adam-standard", "diverged", losses=(3.0,), seconds=(1.0,), failed_step=37),
    ]
    view = build_view(records)
    (model,) = view.models
    table = next(t for t in model.tables if t.id.endswith("-final_loss"))
    assert table.header == ("optimizer", "standard", "accum")
    sgd, adam = table.rows
    assert [c.text for c in sgd.cells] == ["2", "1"] and [c.css for c in sgd.cells] == ["open", "best"]
    assert adam.cells[0].text == "diverged at step 37" and "diverged" in adam.cells[0].css
    assert adam.cells[1].text == NA and adam.cells[1].title == "cell not in the results"


def test_model_named_script_is_escaped_everywhere(make_record, tmp_path):
    """A record whose model is <script>alert(1)</script> renders escaped: in tables, figures, ids."""
    records = [make_record(f"{SCRIPT}-sgd-standard", detail=SCRIPT),
               make_record(f"{SCRIPT}-adam-standard", "error", losses=(), seconds=(), detail=SCRIPT)]
    html = write_report(records, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<script" not in without_own_script(html).lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    ids = Page(html).ids
    assert all(re.fullmatch(r"[A-Za-z0-9_.:-]+", i) for i in ids), [i for i in ids if "<" in i]


def test_templates_autoescape_and_strict_undefined():
    """The .html.j2 templates autoescape; a view missing a field the template prints raises."""
    env = jinja_environment()
    assert env.autoescape("report.html.j2") is True and env.undefined is jinja2.StrictUndefined
    view = build_view([])
    fields = {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}
    del fields["notices"]
    with pytest.raises(jinja2.UndefinedError, match="notices"):
        render_html(SimpleNamespace(**fields))
    assert "No records" in render_html(view)


def test_partial_results_render_with_gaps_explained(make_record):
    """One model, failed cells and empty meters: statuses, n/a and the reasons are on the page."""
    records = [
        make_record("vit-sgd-standard", meters={}, losses=(2.0, 1.0)),
        make_record("vit-adam-standard", "diverged", losses=(2.0,), seconds=(1.0,), failed_step=37,
                    detail="loss became nan at step 37", meters={}),
        make_record("vit-adam-checkpoint", "oom", losses=(), seconds=(), failed_step=1,
                    detail="CUDA out of memory", meters={}),
        make_record("vit-sgd-accum", "skipped", losses=(), seconds=(), detail="incompatible", meters={}),
    ]
    view = build_view(records)
    html = render_html(view)
    assert "diverged at step 37" in html and ">oom<" in html and "CUDA out of memory" in html
    # The per-model tables are the flat table's now; their notes still say what was not measured.
    assert any("not measured for any cell of this model" in t.note for m in view.models for t in m.tables)
    assert "No completed epoch: sgd/accum (skipped), adam/checkpoint (oom)." in html
    assert any("no memory breakdown recorded" in m.memory.note for m in view.models)
    assert "nan" not in re.sub(r"<svg.*?</svg>", "", html, flags=re.S).replace("became nan", "")
    # Nothing was measured by a GPU or energy meter: no fake zeros anywhere in the tables.
    assert not re.search(r">0(\.0+)? ?(%|J|B|ms|s|MiB|GiB)<", html)


def test_report_is_self_contained_with_every_section(grid_records, tmp_path):
    """All sections present, figures inline SVG with unique ids, no external resource."""
    path = write_report(grid_records, tmp_path / "out" / "report.html", skipped_lines=["r.jsonl:3: bad"],
                        sources=["r.jsonl"])
    html = path.read_text(encoding="utf-8")
    self_contained_page(html)
    assert "@import" not in html and "url(http" not in html and "<?xml" not in html
    assert html.count("<svg ") == 4 * 2 + 1  # curves and Pareto per model + the heat-map grid
    assert "r.jsonl:3: bad" in html
    assert 'font-face' not in html and "<image" not in html  # text as text, vectors only
    assert len(html) < 2_000_000


def test_write_report_writes_csv_by_suffix(grid_records, tmp_path):
    """write_report(path='….csv') writes the CSV table instead of HTML (the plugin's one entry point)."""
    path = write_report(grid_records, tmp_path / "cells.csv")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("cell,model,optimizer,strategy,status") and len(lines) == 1 + 72


def test_ratio_table_marks_improvements(make_record):
    """Table 3: < 1 is bold ('better'), > 1 italic ('worse'), exactly as printed."""
    final_losses = {"sgd": (2.0, 1.0), "adam": (1.0, 2.0), "cgd": (1.0, 1.0004)}  # (standard, checkpoint)
    records = [make_record(f"vit-{opt}-{strategy}", losses=(3.0, pair[i]))
               for opt, pair in final_losses.items() for i, strategy in enumerate(("standard", "checkpoint"))]
    view = build_view(records)
    table = next(t for t in view.ratios if t.id == "ratio-checkpoint-final_loss")
    assert [(row.label, row.cells[0].text, row.cells[0].css) for row in table.rows] == [
        ("SGD", "0.50×", "better"), ("Adam", "2.00×", "worse"), ("Conjugate Gradient", "1.00×", "")]


def test_log_axes_print_plain_tick_labels():
    """A loss curve spanning decades gets a log axis whose labels are numbers, not raw mathtext."""
    from gradeff.report.plots import Series, loss_curves_svg

    series = Series(label="adam/standard", color_index=0, style_index=0, epochs=(1, 2, 3), losses=(100.0, 10.0, 0.1),
                    failed=False)
    svg = loss_curves_svg([series], loss_floor=0.05, title="decades", uid="t")
    assert "$10" not in svg and "^{" not in svg
    ticks = re.findall(r">([^<>]+)</text>", svg)
    assert {"0.1", "1", "10", "100"} <= set(ticks)  # one label per decade: the axis is logarithmic


def test_malformed_meters_render_as_not_measured(make_record, make_meters):
    """A record whose meters are a list, or whose GPU section is a string, renders as n/a, not a crash."""
    good = make_record("llm-sgd-standard", meters=make_meters(util=50.0))
    as_list = make_record("llm-adam-standard", meters=[])
    broken_gpu = make_record("llm-adamw-standard", meters={"gpu": "broken"})
    html = render_html(build_view([good, as_list, broken_gpu]))
    assert "Adam" in html and "AdamW" in html and NA in html


def test_methods_state_the_recorded_metering_cost(make_record, make_meters):
    """The methods section quotes the median and the largest metering cost the records carry."""
    records = [make_record(f"llm-{opt}-standard", meters=make_meters(cost_fraction=f))
               for opt, f in (("sgd", 0.002), ("adam", 0.004), ("adamw", 0.009))]
    text = dict(methods(records))["Metering cost"]
    assert "0.40% of epoch time at the median cell and 0.90% at most" in text
    assert "do not carry it" in dict(methods([make_record()]))["Metering cost"]


def test_csv_meter_columns_follow_the_meters_records():
    """The CSV's documented meter columns are exactly the scalar fields of the meters' records, in order."""
    from gradeff.meters import EnergyRecord, GpuRecord, MemoryBreakdown, RamRecord
    from gradeff.report.csv_export import _METER_COLUMNS

    for meter, record in (("ram", RamRecord), ("gpu", GpuRecord), ("energy", EnergyRecord),
                          ("memory", MemoryBreakdown)):
        columns = [c.split(".", 2)[2] for c in _METER_COLUMNS if c.startswith(f"meters.{meter}.")]
        # Mapping fields (the per-device peak) flatten into a column per key instead.
        assert columns == [f.name for f in dataclasses.fields(record) if not f.type.startswith("dict")], meter
