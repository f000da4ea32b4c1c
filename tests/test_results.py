"""Records and the JSON-lines store."""

import json
import subprocess
import sys

import pytest

from gradeff.results import SCHEMA_VERSION, CellRecord, EpochRecord, Summary, append_record, read_records


def make_record(cell="llm-adam-standard", status="ok", **overrides) -> CellRecord:
    model, optimizer, strategy = cell.split("-")
    epochs = (EpochRecord(epoch=0, loss=2.0, seconds=1.0, optimizer_steps=8, closure_calls=8, samples=64,
                          targets=64),
              EpochRecord(epoch=1, loss=1.5, seconds=3.0, optimizer_steps=8, closure_calls=8, samples=64,
                          targets=64))
    values = dict(cell=cell, model=model, optimizer=optimizer, strategy=strategy, profile="tiny", seed=0,
                  device="cpu", status=status, epochs=epochs, summary=Summary.of(list(epochs), 5.0))
    return CellRecord(**(values | overrides))


def test_record_round_trips_through_json():
    """to_json → from_dict gives an equal record."""
    record = make_record(meters={"ram": {"peak_rss_bytes": 123}}, loss_floor=0.5)
    assert CellRecord.from_dict(json.loads(record.to_json())) == record


def test_summary_of_epochs():
    """Summary: first/final/mean/best loss, mean epoch time and throughput from the epochs."""
    s = make_record().summary
    assert (s.first_loss, s.final_loss, s.mean_loss, s.best_loss) == (2.0, 1.5, 1.75, 1.5)
    assert s.mean_epoch_seconds == 2.0 and s.samples_per_second == 128 / 4.0
    assert s.optimizer_steps == 16 and s.total_seconds == 5.0
    empty = Summary.of([], 1.0)
    assert empty.final_loss is None and empty.samples_per_second is None


def test_invalid_records_are_refused():
    """Unknown status, a cell id that disagrees with its keys, other schema versions."""
    with pytest.raises(ValueError, match="valid statuses: ok, diverged, oom, error, skipped"):
        make_record(status="crashed")
    with pytest.raises(ValueError, match="does not match"):
        make_record(model="vit")
    data = json.loads(make_record().to_json()) | {"schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match="schema version"):
        CellRecord.from_dict(data)


def test_version_1_records_read_as_main_study_cells():
    """A schema-1 line (before grids, methods and held-out splits) reads as a full-training main-grid cell."""
    data = json.loads(make_record().to_json())
    for field in ("grid", "method", "dataset", "task", "parameters", "weights"):
        del data[field]
    for epoch in data["epochs"]:
        for field in ("heldout_loss", "heldout_accuracy", "eval_seconds"):
            del epoch[field]
    for field in ("final_heldout_loss", "final_heldout_accuracy", "best_heldout_accuracy"):
        del data["summary"][field]
    record = CellRecord.from_dict(data | {"schema_version": 1})
    assert (record.schema_version, record.grid, record.method, record.dataset) == (SCHEMA_VERSION, "main", "full", "")
    assert record.summary.final_heldout_accuracy is None and record.epochs[0].heldout_loss is None


def test_peft_record_checks_its_id_against_its_grid():
    """A PEFT cell's id is model-method-strategy-dataset; one naming another method is refused."""
    values = dict(grid="peft", model="vit_s", optimizer="adamw", strategy="standard", dataset="dtd", profile="tiny",
                  seed=0, device="cpu", status="ok", summary=Summary.of([], 1.0))
    record = CellRecord(cell="vit_s-lora-standard-dtd", method="lora", **values)
    assert CellRecord.from_dict(json.loads(record.to_json())) == record
    with pytest.raises(ValueError, match="expected 'vit_s-qlora-standard-dtd'"):
        CellRecord(cell="vit_s-lora-standard-dtd", method="qlora", **values)


def test_summary_reads_the_last_heldout_epoch():
    """Held-out summary: the last epoch's loss and accuracy, and the best accuracy of any epoch."""
    epochs = [EpochRecord(epoch=i, loss=1.0, seconds=1.0, optimizer_steps=1, closure_calls=1, samples=4, targets=4,
                          heldout_loss=loss, heldout_accuracy=acc)
              for i, (loss, acc) in enumerate([(2.0, 0.5), (1.8, 0.75), (1.9, 0.625)])]
    summary = Summary.of(epochs, 3.0)
    assert (summary.final_heldout_loss, summary.final_heldout_accuracy, summary.best_heldout_accuracy) == \
        (1.9, 0.625, 0.75)


def test_store_appends_and_reports_bad_lines(tmp_path):
    """Records append one per line; a corrupt line is reported with its number, or raises."""
    path = tmp_path / "r.jsonl"
    append_record(path, make_record())
    with open(path, "a") as handle:
        handle.write('{"truncated": \n')
    append_record(path, make_record("vit-sgd-accum"))
    errors: list[str] = []
    assert [r.cell for r in read_records(path, errors=errors)] == ["llm-adam-standard", "vit-sgd-accum"]
    assert len(errors) == 1 and f"{path}:2:" in errors[0]
    with pytest.raises(ValueError, match=":2:"):
        list(read_records(path))


_WRITER = """
import sys
from gradeff.results import CellRecord, Summary, append_record
for i in range(50):
    append_record(sys.argv[1], CellRecord(cell="llm-adam-standard", model="llm", optimizer="adam",
        strategy="standard", profile="tiny", seed=0, device="cpu", status="ok", detail=sys.argv[2] * 2000,
        summary=Summary.of([], 0.0)))
"""


def test_concurrent_appends_never_interleave(tmp_path):
    """Four processes appending long lines at once leave 200 whole, parseable lines."""
    path = tmp_path / "r.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)]) for w in range(4)]
    assert [p.wait() for p in procs] == [0, 0, 0, 0]
    records = list(read_records(path))
    assert len(records) == 200
    assert all(set(r.detail) <= set("0123") and len(set(r.detail)) == 1 for r in records)


def test_summary_times_the_target_from_the_untrained_evaluation():
    """Untrained held-out loss 4.0, floor 1.0: target 2.5, reached in the second epoch (16 steps, 2 s, 3 J)."""
    from types import SimpleNamespace

    epochs = [EpochRecord(epoch=i, loss=1.0, seconds=1.0, optimizer_steps=8, closure_calls=8, samples=4, targets=4,
                          heldout_loss=loss, meters={"energy": {"joules": 1.5}})
              for i, loss in enumerate([3.0, 2.4, 2.0])]
    summary = Summary.of(epochs, 4.0, untrained=SimpleNamespace(loss=4.0, accuracy=None), floor=1.0)
    assert (summary.initial_heldout_loss, summary.target_loss) == (4.0, 2.5)
    assert (summary.steps_to_target, summary.seconds_to_target, summary.joules_to_target) == (16, 2.0, 3.0)
    never = Summary.of(epochs[:1], 1.0, untrained=SimpleNamespace(loss=4.0, accuracy=None), floor=1.0)
    assert never.steps_to_target is None and never.target_loss == 2.5
