"""gradeff.cell.record: the fields every record shares, filled one way for the runner, the fixtures and a sharded
run."""

from types import SimpleNamespace

import pytest
import torch

from gradeff.axes.data import make_dataset
from gradeff.axes.data.trivial import trivial_baselines
from gradeff.cell.record import cell_record, task_record
from gradeff.records.results import Summary
from gradeff.studies.grid import Cell
from gradeff.studies.hparams import hparams_for

CONFIG = SimpleNamespace(profile="tiny", seed=3, session="s1", process="shared", trial=False, cache_dir=None)


def test_the_shared_fields_come_from_the_cell_the_data_and_the_model():
    cell = Cell("vit_s", "adamw", "standard", method="lora", dataset="dtd", grid="peft")
    data = make_dataset("dtd", hparams_for("vit_s", "tiny", dataset="dtd"), 0)
    model = torch.nn.Linear(3, 2)
    model.weight.requires_grad_(False)
    record = cell_record(cell, CONFIG, device="cpu", started=1.0, finished=2.5, dataset=data, model=model,
                         status="ok", summary=Summary.of([], 1.5))
    assert (record.cell, record.grid, record.model, record.optimizer, record.strategy, record.method,
            record.dataset) == (cell.id, "peft", "vit_s", "adamw", "standard", "lora", "dtd")
    assert (record.profile, record.seed, record.session, record.device) == ("tiny", 3, "s1", "cpu")
    # The task's trivial baselines on the very splits the cell read (computed once per machine for them).
    # The solver's last digits depend on how BLAS meets the arrays in memory: equal to its tolerance.
    baselines, recorded = trivial_baselines(data, "image_classification"), record.task["trivial_baselines"]
    assert set(recorded) == set(baselines) == {"pixel_1nn", "logistic_regression"}
    for name, baseline in baselines.items():
        assert {k: v for k, v in recorded[name].items() if k not in ("value", "loss")} == \
            {k: v for k, v in baseline.items() if k not in ("value", "loss")}
        assert [recorded[name]["value"], recorded[name].get("loss", 0)] == \
            pytest.approx([baseline["value"], baseline.get("loss", 0)], rel=1e-6)
    assert record.loss_floor == data.loss_floor and record.task == task_record(cell, data, trivial_baselines=recorded)
    assert record.task["heldout_samples"] == len(data.heldout) and record.task["name"].startswith("DTD")
    assert record.parameters["total"] == 8 and record.parameters["trainable"] == 2
    assert record.environment["process"] == "shared" and record.weights == {}
    assert (record.started_at, record.finished_at) == (1.0, 2.5)


def test_without_data_or_model_those_fields_are_empty_and_a_caller_may_rename_the_cell():
    cell = Cell("llm", "adam", "accum")
    record = cell_record(cell, CONFIG, device="cpu", started=0.0, finished=0.0, process="sharded",
                         cell="bench-llm", grid="custom", strategy="mine", status="error",
                         summary=Summary.of([], 0.0), hparams={"precision": "fp32"})
    assert (record.cell, record.grid, record.strategy, record.model) == ("bench-llm", "custom", "mine", "llm")
    assert record.loss_floor is None and record.task == {} and record.parameters == {}
    assert record.environment["process"] == "sharded" and record.hparams == {"precision": "fp32"}


def test_a_tuning_trial_records_no_trivial_baselines():
    """A trial is read for its validation loss alone: nothing of the test split is computed for it."""
    cell = Cell("llm", "adam", "standard")
    data = make_dataset("causal_lm", hparams_for("llm", "tiny"), 0)
    trial = SimpleNamespace(**vars(CONFIG) | {"trial": True})
    record = cell_record(cell, trial, device="cpu", started=0.0, finished=0.0, dataset=data, status="ok",
                         summary=Summary.of([], 0.0))
    assert record.task["trivial_baselines"] is None
    full = cell_record(cell, CONFIG, device="cpu", started=0.0, finished=0.0, dataset=data, status="ok",
                       summary=Summary.of([], 0.0))
    assert set(full.task["trivial_baselines"]) == {"unigram", "bigram"}
