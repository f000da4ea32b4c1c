"""The report over seeds: intervals with n in every table, paired winners, ties and identical cells, every seed kept."""

from gradeff.report import build_view, render_html
from tests.analysis.factories import run


def _runs(cell, tests, seconds=(1.0, 1.0), **kwargs):
    return [run(cell, seed, test=test, seconds=s, **kwargs) for seed, (test, s) in enumerate(zip(tests, seconds))]


def _table(view, key):
    (model,) = view.models
    return next(t for t in model.tables if t.id.endswith(key))


def _cell(table, optimizer, strategy):
    row = next(r for r in table.rows if r.label.lower() == optimizer)
    return row.cells[table.header.index(strategy) - 1]


def test_grid_tables_show_mean_and_interval_and_mark_open_cells():
    """adam and adamw overlap (open: adamw marked as still in contention); sgd is clearly worse; n=2 under each mean."""
    records = [*_runs("llm-adam-standard", (1.50, 1.52)), *_runs("llm-adamw-standard", (1.40, 1.70)),
               *_runs("llm-sgd-standard", (1.90, 1.92))]
    view = build_view(records, generated_at="now")
    table = _table(view, "test_loss")
    adam, adamw, sgd = (_cell(table, o, "standard") for o in ("adam", "adamw", "sgd"))
    # mean 1.51, s = 0.01414, t(0.975, 1) = 12.706: half-width 0.127
    assert adam.text.startswith("1.51") and adam.sub.startswith("± 0.127") and adam.sub.endswith("(n=2)")
    assert adam.css == "best" and adamw.css == "open" and sgd.css == ""
    assert "neither separated from it nor shown equivalent" in adamw.title and "95 % Student-t interval" in table.note
    assert dict(view.overview)["cells"] == "3 (6 runs over seeds)"
    assert any("several seeds" in notice for notice in view.notices)
    quality = view.recommendations.rows[0].cells[0]
    assert quality.text.startswith("open: Adam + Standard 1.51 ± 0.1271 (n=2) against AdamW + Standard")
    assert quality.sub == "Test loss" and quality.title.startswith("open")
    html = render_html(view)
    assert "± 0.127" in html and "(n=2)" in html


def test_a_separated_winner_is_named_alone_and_shared_places_are_tallied_as_shared():
    records = [*_runs("llm-adam-standard", (1.50, 1.52)), *_runs("llm-sgd-accum", (1.90, 1.93))]
    view = build_view(records, generated_at="now")
    quality, memory = view.recommendations.rows[0].cells[0], view.recommendations.rows[0].cells[2]
    assert quality.text.startswith("winner Adam + Standard 1.51 ± ") and "ahead of every other cell" in quality.text
    assert quality.title == "every other cell significantly worse"
    # Equal peaks on every seed but other runs: equivalent (no difference at all is within any margin), a first place
    # shared by two optimizers and two strategies, tallied as shared.
    assert memory.text.startswith("equivalent ")
    assert view.wins == ("Optimizer wins (2 best paths): Adam 1, shared 1", "Strategy wins: Standard 1, shared 1")


def test_identical_cells_are_one_entry():
    """Checkpointing gives the same numbers on every seed: one entry, labelled identical, not a tie."""
    records = [*_runs("llm-adam-standard", (1.50, 1.52)), *_runs("llm-adam-checkpoint", (1.50, 1.52)),
               *_runs("llm-sgd-standard", (2.5, 2.6))]
    view = build_view(records, generated_at="now")
    quality = view.recommendations.rows[0].cells[0]
    assert quality.text.startswith("winner Adam + Standard ≡ Adam + Activation checkpointing (identical) 1.51")
    checkpoint = _cell(_table(view, "test_loss"), "adam", "checkpoint")
    assert checkpoint.css == "best" and checkpoint.title == "the same numbers as the best on every seed"
    ratio = next(t for t in view.ratios if t.id == "ratio-checkpoint-quality")
    cell = next(r for r in ratio.rows if r.label == "Adam").cells[0]
    assert (cell.text, cell.sub, cell.css) == ("1.00×", "identical (n=2)", "identical")


def test_one_seed_leaves_every_question_open():
    records = [run("llm-adam-standard", test=1.5), run("llm-sgd-standard", test=1.9, joules=20.0)]
    view = build_view(records, generated_at="now")
    adam = _cell(_table(view, "test_loss"), "adam", "standard")
    assert adam.css == "best" and "(n=" not in adam.sub
    assert _cell(_table(view, "test_loss"), "sgd", "standard").css == "open"
    assert "One seed per cell: every question is open" in view.recommendations.note
    assert view.recommendations.rows[0].cells[0].text == \
        "open: Adam + Standard 1.5 against SGD + Standard (n=1; one seed cannot be tested)"
    assert dict(view.overview)["cells"] == "2"


def test_csv_has_a_row_per_seed():
    import csv
    import io

    from gradeff.report.csv_export import write_csv

    out = io.StringIO()
    write_csv(_runs("llm-adam-standard", (1.50, 1.52)), out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["cell"], r["seed"]) for r in rows] == [("llm-adam-standard", "0"), ("llm-adam-standard", "1")]
