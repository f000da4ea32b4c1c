"""Records as a set: one per (cell, seed), canonical order, cells over their seeds; study scoping; the metrics."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradeff.analysis import metrics, scope
from gradeff.analysis.runs import by_cell, canonical, canonical_key
from tests.analysis.factories import run


def _mixed():
    return [run("llm-adam-standard", 0, test=2.0), run("llm-adam-standard", 1, test=2.2),
            run("llm-sgd-standard", 0, test=3.0), run("vit-adam-accum", 0, test=1.0),
            run("vit_s-lora-standard-cifar100", 0, grid="peft", accuracy=0.5),
            run("llm-budget40", 0, grid="memory"), run("vit-adamw-digits", 0, grid="real", accuracy=0.3),
            run("mystery-adam-standard", 0, grid="elsewhere")]


def test_canonical_keeps_the_newest_record_of_a_cell_and_seed():
    """A rerun of the same seed supersedes by time, whatever order the records come in; other seeds stay."""
    old, new = run("llm-adam-standard", 0, test=2.0, finished_at=5.0), run("llm-adam-standard", 0, test=1.0,
                                                                            finished_at=9.0)
    other_seed = run("llm-adam-standard", 1, test=3.0, finished_at=1.0)
    for order in ([old, new, other_seed], [new, other_seed, old]):
        kept, superseded = canonical(order)
        assert kept == [new, other_seed] and superseded == 1
    # Equal times: the record's own text decides, never the reading order.
    a, b = run("llm-adam-standard", 0, test=2.0), run("llm-adam-standard", 0, test=2.5)
    assert canonical([a, b])[0] == canonical([b, a])[0]
    # Same finish, different start: the later start is the later run.
    early, late = (run("llm-adam-standard", 0, started_at=t, test=x) for t, x in ((1.0, 2.0), (2.0, 2.5)))
    assert canonical([late, early])[0] == [late] and canonical([early, late])[0] == [late]


def test_canonical_order_is_the_registries_then_unknown_keys_then_seed():
    """Grid, model, optimizer and strategy in registry order; unknown keys after; seeds ascending."""
    kept, _ = canonical(reversed(_mixed()))
    assert [(r.cell, r.seed) for r in kept] == [
        ("vit-adam-accum", 0), ("llm-sgd-standard", 0), ("llm-adam-standard", 0), ("llm-adam-standard", 1),
        ("vit_s-lora-standard-cifar100", 0), ("llm-budget40", 0), ("vit-adamw-digits", 0),
        ("mystery-adam-standard", 0)]
    assert canonical_key(kept[0]) < canonical_key(kept[1])


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_canonical_is_a_function_of_the_set(rng):
    """Any order of the same records gives the same list."""
    records = _mixed() + [run("llm-adam-standard", 0, test=2.0, finished_at=3.0)]
    shuffled = list(records)
    rng.shuffle(shuffled)
    assert canonical(shuffled) == canonical(records)


def test_a_cell_over_its_seeds():
    """Values of ok seeds only, a status over seeds, a mean and interval, and the fingerprint of the runs."""
    records = [run("llm-adam-standard", 2, test=3.0), run("llm-adam-standard", 0, test=1.0),
               run("llm-adam-standard", 1, status="diverged")]
    cell = by_cell(records)["llm-adam-standard"]
    assert cell.seeds == (0, 1, 2) and cell.first.seed == 0 and len(cell.ok) == 2
    assert cell.values("test_loss") == {0: 1.0, 2: 3.0} and cell.mean("test_loss") == 2.0
    assert cell.interval("test_loss").n == 2 and cell.status == "2 ok, 1 diverged"
    assert by_cell([run()])["llm-adam-standard"].status == "ok"
    assert cell.interval("gpu_util") is None and cell.mean("gpu_util") is None
    twin = by_cell([run("llm-adam-checkpoint", s, test=v) for s, v in ((0, 1.0), (2, 3.0))] +
                   [run("llm-adam-checkpoint", 1, status="diverged")])["llm-adam-checkpoint"]
    assert twin.fingerprint() == cell.fingerprint()
    assert by_cell([run(test=1.5)])["llm-adam-standard"].fingerprint() != cell.fingerprint()


def test_mean_series_reads_ok_seeds_and_falls_back_to_failed_ones():
    """Per epoch, the mean of the ok seeds; a cell with no ok seed draws what its failed seeds recorded."""
    cell = by_cell([run(seed=0, train=1.0), run(seed=1, train=2.0)])["llm-adam-standard"]
    assert cell.mean_series(lambda e: e.loss) == ((0, 2.5), (1, 1.5))
    failed = run(status="diverged")
    failed = type(failed)(**{**{f: getattr(failed, f) for f in failed.__slots__},
                             "epochs": run(train=4.0).epochs[:1]})
    assert by_cell([failed])["llm-adam-standard"].mean_series(lambda e: e.loss) == ((0, 5.0),)
    assert cell.mean_series(lambda e: None) == ()


def test_each_grid_belongs_to_the_study_it_names_and_an_unknown_grid_is_refused():
    """The scope's split: main (and fixture cells), PEFT, baselines, memory, real; every study listed. A record of a
    grid no study reads is refused with the grids that are read, never folded into the main study."""
    with pytest.raises(scope.UnknownGridError, match="'elsewhere', which no study.*the grids read: main, custom, peft"):
        scope.split(_mixed())
    with pytest.raises(scope.UnknownGridError, match="'elsewhere'"):
        scope.of_study(_mixed(), "main")
    known = [r for r in _mixed() if r.grid != "elsewhere"]
    found = scope.split(known)
    assert list(found) == list(scope.STUDIES)
    assert [r.cell for r in found["main"]] == ["llm-adam-standard", "llm-adam-standard", "llm-sgd-standard",
                                               "vit-adam-accum"]  # the order given
    assert [r.cell for r in found["real"]] == ["vit-adamw-digits"]
    assert [r.cell for r in found["memory"]] == ["llm-budget40"]
    assert [r.grid for r in found["peft"]] == ["peft"] and found["baselines"] == []
    assert scope.study_of(run(grid="custom")) == "main"
    assert [r.cell for r in scope.of_study(known, "real", "memory")] == ["llm-budget40", "vit-adamw-digits"]
    assert scope.grids_of("main", "real") == ("main", "custom", "real")
    assert scope.grids_of("peft", "baselines") == ("peft", "baselines")
    with pytest.raises(KeyError, match="valid studies: main, peft"):
        scope.of_study(known, "nonsense")


def test_the_quality_metric_follows_the_task():
    """Test loss for language and captioning, test top-1 for classification, F1 for multi-label."""
    assert metrics.quality_metric([run("llm-adam-standard")]).key == "test_loss"
    assert metrics.quality_metric([run("vlm-adam-standard")]).key == "test_loss"
    assert metrics.quality_metric([run("modernbert-adam-standard")]).key == "test_loss"
    vit = run("vit-adam-standard", accuracy=0.25)
    assert (metrics.quality_metric([vit]).key == "heldout_accuracy"
            and metrics.metric_value(vit, "heldout_accuracy") == 25)
    assert metrics.quality_metric([run("vit-adamw-digits", grid="real")]).key == "heldout_accuracy"
    assert metrics.quality_metric([run("llm-adamw-pydoc", grid="real")]).key == "test_loss"
    labels = run("vit-adam-standard", task={"info": {"multi_label": True}})
    assert metrics.task_kind(labels) == "multi_label" and metrics.quality_metric([labels]).key == "test_f1"
    assert metrics.quality_metric([]).key == "test_loss"
    unknown = run("mystery-adam-standard", grid="elsewhere")
    assert metrics.task_kind(unknown) == "causal_lm"
    assert metrics.task_kind(run("mystery-adam-standard", grid="elsewhere", accuracy=0.5)) == "image_classification"
    with pytest.raises(ValueError, match="causal_lm, image_classification"):
        metrics.quality_metric([run("llm-adam-standard"), vit])
    assert metrics.headline(vit) == ("Test top-1 accuracy", 25.0)


def test_f1_reads_the_last_epochs_micro_f1():
    """Multi-label quality: micro-F1 of the last epoch, in percent."""
    record = run("vit-adam-standard")
    epochs = tuple(type(e)(**{**{f: getattr(e, f) for f in e.__slots__}, "heldout_f1_micro": f1})
                   for e, f1 in zip(record.epochs, (0.2, 0.4)))
    record = type(record)(**{**{f: getattr(record, f) for f in record.__slots__}, "epochs": epochs})
    assert metrics.task_kind(record) == "multi_label" and metrics.metric_value(record, "test_f1") == 40.0
    assert metrics.metric_value(run(status="oom"), "test_f1") is None


def test_memory_is_the_live_peak_and_rss_only_when_every_cell_ran_isolated():
    """Live peak first; RSS only under isolation (with its resolution); else nothing."""
    assert metrics.memory_metric([run()]).key == "peak"
    shared = [run(peak=None), run("llm-sgd-standard", peak=None)]
    assert metrics.memory_metric(shared) is None
    isolated = [run(peak=None, environment={"process": "isolated"}),
                run("llm-sgd-standard", peak=None, environment={"process": "isolated"})]
    found = metrics.memory_metric(isolated)
    assert found.key == "ram_peak" and found.resolution == metrics.RSS_RESOLUTION_BYTES
    assert metrics.memory_metric([run(peak=None, status="oom", environment={"process": "isolated"})]) is None
    assert metrics.objective_metric("memory", isolated).key == "ram_peak"
    assert metrics.objective_metric("speed", isolated).key == "seconds_to_target"
    assert metrics.objective_metric("energy", isolated).key == "joules_to_target"
    with pytest.raises(KeyError, match="valid: quality, speed"):
        metrics.objective_metric("beauty", isolated)


def test_a_metric_with_a_resolution_only_beats_by_more_than_it():
    """better() is strict beyond the resolution, both ways."""
    ram = metrics.METRICS["ram_peak"]
    assert not ram.better(100, 100 + ram.resolution) and ram.better(100, 101 + ram.resolution)
    accuracy = metrics.METRICS["heldout_accuracy"]
    assert accuracy.better(2, 1) and not accuracy.better(1, 1)


def test_time_to_target_tells_not_reached_from_not_applicable():
    """reached (with its cost), not reached (a target, never met), n/a (no target)."""
    reached = run(summary={"target_loss": 3.0, "steps_to_target": 8, "seconds_to_target": 1.0,
                           "joules_to_target": 2.0})
    assert metrics.target_reading(reached) == metrics.TargetReading("reached", 8, 1.0, 2.0, 3.0)
    assert metrics.target_reading(run(summary={"target_loss": 3.0})).state == "not reached"
    assert metrics.target_reading(run()).state == "n/a"


def test_forward_backward_passes_count_each_micro_batch():
    """Closure calls × micro-batches per closure: an accumulation step's closure runs 4 passes."""
    assert metrics.forward_backward_passes(run("llm-sgd-standard")) == 16
    assert metrics.forward_backward_passes(run("llm-sgd-accum")) == 64
    assert metrics.forward_backward_passes(run("llm-sgd-accum", hparams={})) == 16
    assert metrics.forward_backward_passes(run("mystery-sgd-somehow", grid="elsewhere")) is None


def test_the_report_order_is_a_function_of_the_set_with_several_seeds():
    """by_cell over shuffled records: the same cells, seeds and order."""
    records = _mixed() + [run("llm-sgd-standard", 1, test=3.1), run("llm-sgd-standard", 2, test=2.9)]
    shuffled = list(records)
    random.Random(7).shuffle(shuffled)
    assert list(by_cell(shuffled).items()) == list(by_cell(records).items())
