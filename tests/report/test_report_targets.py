"""The report's time-to-target tables and the two protocols' rankings."""

import dataclasses

from gradeff.report import build_view, render_html
from gradeff.report.tables import protocol_tables, target_table


def _reached(record, steps=None, reached=None, loss=1.0, protocol="tuned"):
    summary = dataclasses.replace(record.summary, steps_to_target=steps, seconds_to_target=steps and steps / 10,
                                  target_reached=reached if steps is None else True, target_loss=1.25,
                                  final_heldout_loss=loss)
    return dataclasses.replace(record, summary=summary, evaluation={"every_steps": 12},
                               hparams=record.hparams | {"protocol": protocol})


def test_steps_to_target_not_reached_and_na_read_apart(make_record):
    """Reached cells show their steps (the fewest highlighted), a cell that never got there `not reached`, a cell
    without a test split `n/a`; the note gives the target and the evaluation interval."""
    records = [_reached(make_record("llm-adam-standard"), steps=24),
               _reached(make_record("llm-adam-checkpoint"), steps=36),
               _reached(make_record("llm-sgd-standard"), reached=False, loss=2.0),
               _reached(make_record("llm-sgd-checkpoint"))]
    table = target_table("m0-llm", records, ["adam", "sgd"], ["standard", "checkpoint"])
    (adam, sgd) = table.rows
    assert [c.text for c in adam.cells] == ["24 steps", "36 steps"] and adam.cells[0].css == "best"
    assert [c.text for c in sgd.cells] == ["not reached", "n/a"]
    assert "target test loss 1.25" in table.note and "every 12 optimizer steps" in table.note
    assert "2 of 4 cells reached it" in table.note


def test_both_protocols_are_ranked_side_by_side_only_when_both_ran(make_record):
    """Each model's optimizers by their best final test loss, per protocol; one protocol alone: no table."""
    tuned = [_reached(make_record("llm-adam-standard"), loss=1.0), _reached(make_record("llm-sgd-standard"), loss=1.5)]
    shared = [_reached(make_record("llm-adam-standard"), loss=1.2, protocol="shared"),
              _reached(make_record("llm-sgd-standard"), loss=1.1, protocol="shared")]
    assert protocol_tables(tuned) == ()
    (table,) = protocol_tables(tuned + shared)
    assert table.header == ("model", "tuned", "shared")
    assert [c.text for c in table.rows[0].cells] == ["Adam < SGD", "SGD < Adam"]
    html = render_html(build_view(tuned + shared))
    assert "Optimizers ranked by final test loss under each learning-rate protocol" in html
    assert "Optimizer steps to the target test loss" in html
