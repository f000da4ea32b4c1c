"""The report over seeds: intervals with n in the grid tables, Welch-tested winners and ties, every seed kept."""

from gradeff.report import build_view, render_html


def _runs(make_record, make_meters, cell, finals, joules=(5.0, 5.0)):
    return [make_record(cell, losses=(2.0, final), seed=seed, meters=make_meters(joules=j))
            for seed, (final, j) in enumerate(zip(finals, joules, strict=True))]


def _table(view, key):
    (model,) = view.models
    return next(t for t in model.tables if t.id.endswith(key))


def _cell(table, optimizer, strategy):
    row = next(r for r in table.rows if r.label.lower() == optimizer)
    return row.cells[table.header.index(strategy) - 1]


def test_grid_tables_show_mean_and_interval_and_highlight_ties(make_record, make_meters):
    """adam and adamw overlap (tie, both highlighted); sgd is clearly worse; n=2 shown under each mean."""
    records = [*_runs(make_record, make_meters, "llm-adam-standard", (1.50, 1.52)),
               *_runs(make_record, make_meters, "llm-adamw-standard", (1.40, 1.70)),
               *_runs(make_record, make_meters, "llm-sgd-standard", (1.90, 1.92))]
    view = build_view(records, generated_at="now")
    table = _table(view, "final_loss")
    adam, adamw, sgd = (_cell(table, o, "standard") for o in ("adam", "adamw", "sgd"))
    # mean 1.51, s = 0.01414, t(0.975, 1) = 12.706: half-width 0.127
    assert adam.text.startswith("1.51") and adam.sub.startswith("± 0.127") and adam.sub.endswith("(n=2)")
    assert adam.css == adamw.css == "best" and sgd.css == ""
    assert "Welch" in adamw.title and "95 % Student-t interval" in table.note
    assert dict(view.overview)["cells"] == "3 (6 runs over seeds)"
    assert any("several seeds" in notice for notice in view.notices)
    loss = view.recommendations.rows[0].cells[0]
    assert loss.text == "Adam + Standard; tied: AdamW + Standard" and "(n=2)" in loss.sub
    assert "tied: Welch" in loss.title
    html = render_html(view)
    assert "± 0.127" in html and "(n=2)" in html


def test_a_separated_winner_is_named_alone_and_tallied(make_record, make_meters):
    records = [*_runs(make_record, make_meters, "llm-adam-standard", (1.50, 1.52), joules=(4.0, 4.1)),
               *_runs(make_record, make_meters, "llm-sgd-accum", (1.90, 1.92), joules=(4.0, 4.1))]
    view = build_view(records, generated_at="now")
    loss, energy = view.recommendations.rows[0].cells[0], view.recommendations.rows[0].cells[3]
    assert loss.text == "Adam + Standard" and not loss.title
    # Equal times and energies over seeds: ties between two optimizers and two strategies, tallied as ties.
    assert "tied" in energy.text
    assert view.wins == ("Optimizer wins (4 best paths): Adam 1, tied 3", "Strategy wins: Standard 1, tied 3")


def test_one_seed_names_single_draws_as_before(make_record, make_meters):
    records = [make_record("llm-adam-standard", losses=(2.0, 1.5), meters=make_meters()),
               make_record("llm-sgd-standard", losses=(2.0, 1.9), meters=make_meters(joules=20.0))]
    view = build_view(records, generated_at="now")
    adam = _cell(_table(view, "final_loss"), "adam", "standard")
    assert adam.css == "best" and "(n=" not in adam.sub
    assert "single draw" in view.recommendations.note
    assert view.recommendations.rows[0].cells[0].text == "Adam + Standard"
    assert dict(view.overview)["cells"] == "2"


def test_csv_has_a_row_per_seed(make_record, make_meters, tmp_path):
    import csv
    import io

    from gradeff.report.csv_export import write_csv

    out = io.StringIO()
    write_csv(_runs(make_record, make_meters, "llm-adam-standard", (1.50, 1.52)), out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["cell"], r["seed"]) for r in rows] == [("llm-adam-standard", "0"), ("llm-adam-standard", "1")]
