"""The analysis behind the report: metrics, best cells, strategy ratios, Pareto fronts, recommendations."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff import analysis
from gradeff.analysis import (
    best_cell,
    latest_records,
    meter_value,
    metric_value,
    pareto_cells,
    pareto_front,
    recommendations,
    sort_records,
    strategy_ratios,
    tally_wins,
    training_memory_bytes,
)


def test_meter_values_are_none_when_missing_partial_or_not_numbers(make_record):
    """Empty, partial or garbage meters read as None, never 0; real numbers pass through."""
    assert meter_value(make_record(meters={}), "ram", "peak_rss_bytes") is None
    assert meter_value(make_record(meters={"ram": {}}), "ram", "peak_rss_bytes") is None
    assert meter_value(make_record(meters={"ram": "broken"}), "ram", "peak_rss_bytes") is None
    assert meter_value(make_record(meters={"gpu": {"available": True}}), "gpu", "available") is None
    assert meter_value(make_record(meters={"ram": {"peak_rss_bytes": "12"}}), "ram", "peak_rss_bytes") is None
    assert meter_value(make_record(meters={"energy": {"joules": math.nan}}), "energy", "joules") is None
    assert meter_value(make_record(meters={"ram": {"peak_rss_bytes": 0}}), "ram", "peak_rss_bytes") == 0


def test_training_memory_is_the_sum_of_four_parts_or_none(make_record):
    """Parameters + gradients + optimizer state + activations; any missing part gives None."""
    memory = {"parameter_bytes": 100, "trainable_parameter_bytes": 100, "gradient_bytes": 100,
              "optimizer_state_bytes": 200, "activation_bytes": 50}
    assert training_memory_bytes(make_record(meters={"memory": memory})) == 450
    partial = dict(memory, activation_bytes=None)
    assert training_memory_bytes(make_record(meters={"memory": partial})) is None


def test_best_cell_only_among_ok_cells_and_first_wins_a_tie(make_record):
    """A diverged cell's lower loss does not win; equal losses go to the first record."""
    diverged = make_record("llm-sgd-standard", "diverged", losses=(2.0, 0.1), failed_step=3)
    tied_first = make_record("llm-adam-standard", losses=(2.0, 0.9))
    tied_second = make_record("llm-adam-accum", losses=(2.0, 0.9))
    worse = make_record("llm-adagrad-standard", losses=(2.0, 1.4))
    assert best_cell([diverged, worse, tied_first, tied_second], "final_loss") is tied_first
    assert best_cell([diverged], "final_loss") is None
    assert analysis.best_value([worse, tied_first], "final_loss") == 0.9


def test_best_cell_maximises_utilization(make_record):
    """GPU utilization is a 'higher is better' metric."""
    low = make_record("vit-sgd-standard", meters={"gpu": {"util_mean_percent": 40.0}})
    high = make_record("vit-adam-standard", meters={"gpu": {"util_mean_percent": 90.0}})
    unmeasured = make_record("vit-cgd-standard", meters={})
    assert best_cell([low, unmeasured, high], "gpu_util") is high


def test_strategy_ratios_checkpoint_over_standard(make_record):
    """Table 3: checkpoint/standard per model and optimizer, seed by seed; None where a side is missing or failed."""
    records = [
        make_record("vit-sgd-standard", losses=(3.0, 2.0), seconds=(1.0, 1.0)),
        make_record("vit-sgd-checkpoint", losses=(3.0, 1.0), seconds=(1.5, 1.5)),
        make_record("vit-sgd-standard", losses=(3.0, 4.0), seconds=(1.0, 1.0), seed=1),
        make_record("vit-sgd-checkpoint", losses=(3.0, 4.0), seconds=(2.5, 2.5), seed=1),
        make_record("vit-adam-standard", losses=(3.0, 2.0)),  # no checkpoint cell
        make_record("vit-cgd-standard", "diverged", losses=(3.0,), seconds=(1.0,), failed_step=2),
        make_record("vit-cgd-checkpoint", losses=(3.0, 1.0)),
        make_record("vit-adagrad-standard", losses=(3.0, 0.0)),  # zero denominator
        make_record("vit-adagrad-checkpoint", losses=(3.0, 1.0)),
    ]
    loss = strategy_ratios(records, "final_loss")
    assert loss[("vit", "sgd")].interval.mean == pytest.approx(0.75) and loss[("vit", "sgd")].seeds == (0, 1)
    assert not loss[("vit", "sgd")].identical
    assert loss[("vit", "adam")] is None and loss[("vit", "cgd")] is None and loss[("vit", "adagrad")] is None
    assert strategy_ratios(records, "epoch_seconds")[("vit", "sgd")].interval.mean == pytest.approx(2.0)
    accum = strategy_ratios(records, "final_loss", numerator="accum")
    assert accum[("vit", "sgd")] is None
    # The same records in another order: the same ratios (no seed overwrites another).
    assert strategy_ratios(records[::-1], "epoch_seconds") == strategy_ratios(records, "epoch_seconds")


def test_pareto_front_by_hand():
    """Minimising both: dominated points drop out, identical points both stay, order is by x."""
    points = [("A", 1, 5), ("B", 2, 3), ("C", 3, 4), ("D", 4, 1), ("E", 2, 3), ("F", 5, 1), ("G", 1, 6)]
    # C is dominated by B; F by D (same loss, slower); G by A (same time, higher loss).
    assert pareto_front(points) == ["A", "B", "E", "D"]
    assert pareto_front([]) == []


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=25))
def test_pareto_front_law(coordinates):
    """No front point is dominated, and every other point is dominated by a front point."""
    points = [(i, x, y) for i, (x, y) in enumerate(coordinates)]
    front = set(pareto_front(points))

    def dominates(a, b):
        return a[1] <= b[1] and a[2] <= b[2] and (a[1] < b[1] or a[2] < b[2])

    for p in points:
        if p[0] in front:
            assert not any(dominates(q, p) for q in points)
        else:
            assert any(dominates(q, p) for q in points if q[0] in front)


def test_pareto_cells_skip_failed_and_unmeasured(make_record):
    """Figure 4 uses the means over ok seeds of both metrics; a metric to maximise is read as its negative."""
    fast_bad = make_record("llm-sgd-standard", losses=(3.0, 2.0), seconds=(1.0, 1.0))
    slow_good = make_record("llm-adam-standard", losses=(3.0, 1.0), seconds=(2.0, 2.0))
    dominated = make_record("llm-adagrad-standard", losses=(3.0, 2.5), seconds=(3.0, 3.0))
    diverged_fast = make_record("llm-cgd-standard", "diverged", losses=(0.5,), seconds=(0.1,), failed_step=1)
    no_epochs = make_record("llm-sgd-accum", losses=(), seconds=())
    runs = analysis.by_cell([fast_bad, slow_good, dominated, diverged_fast, no_epochs])
    front = pareto_cells(runs, "epoch_seconds", "final_loss")
    assert [r.cell for r in front] == ["llm-sgd-standard", "llm-adam-standard"]
    assert [r.cell for r in pareto_cells(runs, "epoch_seconds", "gpu_util")] == []
    utilised = analysis.by_cell([make_record("llm-sgd-standard", seconds=(1.0, 1.0),
                                             meters={"gpu": {"util_mean_percent": 10.0}}),
                                 make_record("llm-adam-standard", seconds=(2.0, 2.0),
                                             meters={"gpu": {"util_mean_percent": 90.0}})])
    assert [r.cell for r in pareto_cells(utilised, "epoch_seconds", "gpu_util")] == ["llm-sgd-standard",
                                                                                      "llm-adam-standard"]


def test_recommendations_per_objective(make_record, make_meters):
    """Quality, speed, memory and energy per model: test loss, time to target, live peak, joules to target."""
    from dataclasses import replace

    def cell(name, test, seconds, peak, seed=0):
        record = make_record(name, losses=(3, 2), meters=make_meters(joules=seconds), seed=seed)
        record.meters["memory"]["peak_bytes"] = peak
        summary = replace(record.summary, final_heldout_loss=test + seed / 100, target_loss=5.0, steps_to_target=8,
                          seconds_to_target=seconds + seed / 100, joules_to_target=seconds)
        return replace(record, summary=summary)

    a = [cell("llm-sgd-standard", 2.0, 1.0, 300, seed) for seed in (0, 1)]
    b = [cell("llm-adam-accum", 1.0, 2.0, 500, seed) for seed in (0, 1)]
    recs = recommendations([*a, *b])["llm"]
    assert recs["quality"].best.cell == "llm-adam-accum" and recs["speed"].best.cell == "llm-sgd-standard"
    assert recs["memory"].metric.key == "peak" and recs["memory"].best.cell == "llm-sgd-standard"
    # An energy estimate (CPU time × a fixed power) follows time: no winner of its own.
    assert recs["energy"].ranking is None and recs["energy"].reason == "estimate, follows time"
    # Nothing measured: no winner rather than a fake one.
    bare = recommendations([make_record("llm-sgd-standard", meters={})])["llm"]
    assert bare["energy"].ranking is None and bare["memory"].metric is None and bare["quality"].ranking is None
    optimizers, strategies = tally_wins(recommendations([*a, *b]))
    assert optimizers == {"sgd": 2, "adam": 1} and strategies == {"standard": 2, "accum": 1}
    # A shared first place counts for no one (one seed each: every place is open, so shared).
    twin = cell("llm-adam-standard", 2.0, 1.0, 300)
    optimizers, _ = tally_wins(recommendations([a[0], twin]))
    assert optimizers["shared"] >= 1


def test_latest_record_of_a_cell_wins(make_record):
    """A re-run replaces the earlier record (the newest by time, whatever the order read)."""
    first = make_record("llm-sgd-standard", losses=(3, 2), finished_at=1.0)
    other = make_record("llm-adam-standard")
    rerun = make_record("llm-sgd-standard", losses=(3, 1), finished_at=2.0)
    kept, superseded = latest_records([first, other, rerun])
    assert kept == [rerun, other] and superseded == 1
    assert latest_records([rerun, other, first]) == (kept, 1)


def test_sort_records_in_registry_order_with_unknown_keys_last(make_record):
    """Models, optimizers and strategies in registry order; unknown keys after, alphabetically."""
    cells = ["zeta-sgd-standard", "llm-adam-accum", "vit-sgd-accum", "llm-adam-standard", "alpha-sgd-standard",
             "llm-sgd-checkpoint"]
    ordered = [r.cell for r in sort_records(make_record(c) for c in cells)]
    assert ordered == ["vit-sgd-accum", "llm-sgd-checkpoint", "llm-adam-standard", "llm-adam-accum",
                       "alpha-sgd-standard", "zeta-sgd-standard"]


def test_metric_value_accepts_key_or_metric(make_record):
    """metric_value takes a METRICS key or a Metric; summary metrics read the summary."""
    record = make_record(losses=(2.0, 1.0), seconds=(1.0, 3.0))
    assert metric_value(record, "final_loss") == 1.0
    assert metric_value(record, analysis.METRICS["epoch_seconds"]) == 2.0


def test_mfu_is_a_percent_shown_only_where_a_peak_made_it_measurable(make_record):
    """MFU reads meters.compute.mfu as a percent, higher is better; a model's MFU table exists only if measured."""
    from gradeff.analysis import METRICS
    from gradeff.report import build_view
    from tests.conftest import meters

    metric = METRICS["mfu"]
    assert metric.goal == "max" and metric.unit == "percent"
    gpu = meters(util=90.0) | {"compute": {"mfu": 0.329, "flops_per_sample": 3.9e12}}
    cpu = meters() | {"compute": {"mfu": None, "flops_per_sample": 1.7e7}}
    unmeasured = meters() | {"compute": {"not_measured": "AssertionError: shapes"}}
    llm = make_record("llm-adam-standard", meters=gpu, device="cuda:0")
    assert metric_value(llm, "mfu") == pytest.approx(32.9)
    assert metric_value(make_record("vit-adam-standard", meters=cpu), "mfu") is None
    assert metric_value(make_record("vit-sgd-standard", meters=unmeasured), "mfu") is None
    view = build_view([llm, make_record("vit-adam-standard", meters=cpu)])
    ids = {m.key: [t.id for t in m.tables] for m in view.models}
    assert any(i.endswith("-mfu") for i in ids["llm"]) and not any(i.endswith("-mfu") for i in ids["vit"])
    table = next(t for m in view.models for t in m.tables if t.id.endswith("-mfu"))
    assert table.rows[0].cells[0].text == "32.9 %"
