"""The report's time-to-target tables and the two protocols' rankings."""

import dataclasses

from gradeff.analysis import by_cell
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
    table = target_table("m0-llm", by_cell(records), ["adam", "sgd"], ["standard", "checkpoint"])
    (adam, sgd) = table.rows
    assert [c.text for c in adam.cells] == ["24 steps", "36 steps"] and adam.cells[0].css == "best"
    assert [c.text for c in sgd.cells] == ["not reached", "n/a"]
    assert "target test loss 1.25" in table.note and "every 12 optimizer steps" in table.note
    assert "2 of 4 runs (4 cells) reached it" in table.note


def test_steps_to_target_read_every_seed(make_record):
    """Over seeds: the mean steps of the seeds that got there, with how many did where not all; a cell that only
    some seeds brought to the target is never the fastest."""
    records = [_reached(dataclasses.replace(make_record("llm-adam-standard"), seed=seed), steps=steps)
               for seed, steps in ((0, 24), (1, 48))]
    records += [_reached(dataclasses.replace(make_record("llm-sgd-standard"), seed=0), steps=12),
                _reached(dataclasses.replace(make_record("llm-sgd-standard"), seed=1), reached=False)]
    table = target_table("m0-llm", by_cell(records), ["adam", "sgd"], ["standard"])
    (adam,), (sgd,) = (row.cells for row in table.rows)
    assert (adam.text, adam.css) == ("36 steps", "best")
    assert (sgd.text, sgd.css) == ("12 steps (1 of 2 seeds)", "")
    assert "3 of 4 runs (2 cells) reached it" in table.note


def test_both_protocols_are_ranked_side_by_side_only_when_both_ran(make_record):
    """Each model's optimizers by their best final test loss, per protocol; one protocol alone: no table."""
    tuned = [_reached(make_record("llm-adam-standard"), loss=1.0), _reached(make_record("llm-sgd-standard"), loss=1.5)]
    shared = [_reached(make_record("llm-adam-standard"), loss=1.2, protocol="shared"),
              _reached(make_record("llm-sgd-standard"), loss=1.1, protocol="shared")]
    assert protocol_tables(tuned) == ()
    (table,) = protocol_tables(tuned + shared)
    assert table.header == ("model", "tuned", "shared")
    assert [c.text for c in table.rows[0].cells] == ["Adam < SGD", "SGD < Adam"]
    view = build_view(tuned + shared)
    html = render_html(view)
    assert "Optimizers ranked by test quality under each learning-rate protocol" in html
    assert any(t.caption.startswith("Optimizer steps to the target test loss") for m in view.models for t in m.tables)


def test_a_classifier_s_protocols_rank_by_test_accuracy(make_record):
    """The same metric as every other table: a classifier's optimizers by test top-1, highest first."""
    def vit(optimizer, accuracy, protocol):
        record = _reached(make_record(f"vit-{optimizer}-standard"),
                          loss=1.0, protocol=protocol)
        return dataclasses.replace(record, summary=dataclasses.replace(record.summary,
                                                                        final_heldout_accuracy=accuracy))
    (table,) = protocol_tables([vit("adam", 0.9, "tuned"), vit("sgd", 0.5, "tuned"),
                                vit("adam", 0.4, "shared"), vit("sgd", 0.6, "shared")])
    assert [c.text for c in table.rows[0].cells] == ["Adam < SGD", "SGD < Adam"]
    assert table.rows[0].cells[0].sub.startswith("Test top-1 accuracy: 90")
