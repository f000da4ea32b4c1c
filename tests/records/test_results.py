"""Records and the JSON-lines store."""

import json
import subprocess
import sys

import pytest

from gradeff.records.results import SCHEMA_VERSION, CellRecord, EpochRecord, Summary
from gradeff.records.store import append_record, read_records


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


def test_records_of_unknown_grids_and_without_epochs_are_kept():
    """A grid or model this gradeff does not know (a newer one's record) keeps its cell id unchecked; a line
    without an ``epochs`` field reads as a cell that completed none."""
    values = dict(grid="future", model="mystery", optimizer="adam", strategy="standard", profile="tiny", seed=0,
                  device="cpu", status="ok", summary=Summary.of([], 1.0))
    assert CellRecord(cell="any-id-at-all", **values).cell == "any-id-at-all"
    data = json.loads(make_record().to_json())
    del data["epochs"]
    assert CellRecord.from_dict(data).epochs == ()


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
from gradeff.records.results import CellRecord, Summary
from gradeff.records.store import append_record
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


# --- summaries, the store and its damage, pinned whole -------------------------------------------------------------

def epoch(i: int, loss: float, seconds: float, **figures) -> EpochRecord:
    """Epoch ``i``: 8 steps, 16 closure calls, 64 samples of 10 targets each, unless ``figures`` say otherwise."""
    values = dict(epoch=i, loss=loss, seconds=seconds, optimizer_steps=8, closure_calls=16, samples=64, targets=640)
    return EpochRecord(**(values | figures))


def test_summary_of_three_epochs_whole():
    """Every figure of a summary: first, last, mean and best loss (all different), per-epoch and total time, summed
    steps and closure calls, samples and targets per second, the last held-out figures, the best accuracy of any
    epoch and the share of time spent waiting for data."""
    epochs = [epoch(0, 2.0, 1.0, heldout_loss=2.0, heldout_accuracy=0.5, data_seconds=0.25),
              epoch(1, 1.0, 2.0, heldout_loss=1.8, heldout_accuracy=0.75, data_seconds=0.5),
              epoch(2, 1.5, 1.0, heldout_loss=1.9, heldout_accuracy=0.625, data_seconds=0.25, optimizer_steps=4,
                    closure_calls=9, samples=32, targets=320)]
    assert Summary.of(epochs, 6.0) == Summary(
        first_loss=2.0, final_loss=1.5, mean_loss=1.5, best_loss=1.0, mean_epoch_seconds=4 / 3, total_seconds=6.0,
        optimizer_steps=20, closure_calls=41, samples_per_second=160 / 4, targets_per_second=1600 / 4,
        final_heldout_loss=1.9, final_heldout_accuracy=0.625, best_heldout_accuracy=0.75, data_fraction=0.25)


def test_summary_of_epochs_that_took_no_time():
    """Epochs of 0 s (a clock that did not tick) have no rates and no data share, rather than a division by zero;
    an epoch that did not measure its data wait leaves the share unknown."""
    still = Summary.of([epoch(0, 1.0, 0.0, data_seconds=0.0)], 1.0)
    assert (still.samples_per_second, still.targets_per_second, still.data_fraction, still.mean_epoch_seconds) == \
        (None, None, None, 0.0)
    partial = Summary.of([epoch(0, 1.0, 1.0, data_seconds=0.5), epoch(1, 1.0, 1.0)], 2.0)
    assert partial.data_fraction is None and partial.best_heldout_accuracy is None
    quick = Summary.of([epoch(0, 1.0, 0.5, data_seconds=0.125)], 1.0)  # any time at all gives rates
    assert (quick.samples_per_second, quick.targets_per_second, quick.data_fraction) == (128.0, 1280.0, 0.25)


def test_summary_of_a_cell_that_trained_nothing():
    """No epoch (a zero-shot baseline): the untrained evaluation is the held-out result, and nothing else is
    known; without one, nothing at all."""
    from types import SimpleNamespace

    summary = Summary.of([], 2.5, untrained=SimpleNamespace(loss=3.0, accuracy=0.25))
    assert summary == Summary(first_loss=None, final_loss=None, mean_loss=None, best_loss=None,
                              mean_epoch_seconds=None, total_seconds=2.5, optimizer_steps=0, closure_calls=0,
                              samples_per_second=None, targets_per_second=None, final_heldout_loss=3.0,
                              final_heldout_accuracy=0.25, best_heldout_accuracy=0.25, initial_heldout_loss=3.0)
    assert Summary.of([], 2.5) == Summary(first_loss=None, final_loss=None, mean_loss=None, best_loss=None,
                                          mean_epoch_seconds=None, total_seconds=2.5, optimizer_steps=0,
                                          closure_calls=0, samples_per_second=None, targets_per_second=None)


def test_time_to_target_without_an_energy_meter_or_untrained_loss():
    """Joules to target need every epoch's energy reading; an untrained evaluation without a loss sets no target."""
    from types import SimpleNamespace

    epochs = [epoch(0, 1.0, 1.0, heldout_loss=2.0, meters={"energy": {"joules": 5.0}}),
              epoch(1, 1.0, 1.0, heldout_loss=1.0, meters={"energy": None})]
    summary = Summary.of(epochs, 2.0, untrained=SimpleNamespace(loss=4.0, accuracy=None))
    assert (summary.target_loss, summary.steps_to_target, summary.seconds_to_target, summary.joules_to_target) == \
        (2.0, 8, 1.0, 5.0)
    summary = Summary.of(epochs, 2.0, untrained=SimpleNamespace(loss=3.0, accuracy=None))
    assert (summary.target_loss, summary.steps_to_target, summary.joules_to_target) == (1.5, 16, None)
    unmetered = [epoch(0, 1.0, 1.0, heldout_loss=1.0, meters="unavailable")]
    assert Summary.of(unmetered, 1.0, untrained=SimpleNamespace(loss=3.0, accuracy=None)).joules_to_target is None
    summary = Summary.of(epochs, 2.0, untrained=SimpleNamespace(loss=None, accuracy=0.5))
    assert (summary.target_loss, summary.steps_to_target, summary.initial_heldout_loss) == (None, None, None)


@pytest.mark.parametrize("status", ["ok", "diverged", "oom", "error", "skipped", "interrupted"])
def test_every_status_round_trips(status):
    """Each of the six statuses (Ctrl-C's ``interrupted`` included) is a valid record that reads back equal."""
    record = make_record(status=status, detail="" if status == "ok" else "why")
    assert CellRecord.from_json(record.to_json()) == record


def test_a_diverged_record_round_trips_through_the_store(tmp_path):
    """A diverged cell's NaN and infinite losses are written as strict JSON and read back as the same values,
    wherever they sit: an epoch, the summary, a meter under a key holding '/' and '~'."""
    import math

    epochs = (EpochRecord(epoch=0, loss=math.inf, seconds=1.0, optimizer_steps=8, closure_calls=8, samples=64,
                          targets=64),
              EpochRecord(epoch=1, loss=-math.inf, seconds=1.0, optimizer_steps=8, closure_calls=8, samples=64,
                          targets=64, meters={"ratio 1/2": {"a~b": math.nan}}))
    record = make_record(status="diverged", epochs=epochs, summary=Summary.of(list(epochs), 2.0))
    line = record.to_json()
    strict = json.loads(line, parse_constant=lambda token: pytest.fail(f"{token} in strict JSON"))
    assert strict["nonfinite"]["/epochs/1/meters/ratio 1~12/a~0b"] == "NaN"
    append_record(tmp_path / "r.jsonl", record)
    (back,) = read_records(tmp_path / "r.jsonl")
    assert back.epochs[0].loss == math.inf and back.epochs[1].loss == -math.inf
    assert math.isnan(back.epochs[1].meters["ratio 1/2"]["a~b"]) and math.isnan(back.summary.mean_loss)
    assert back.summary.first_loss == math.inf and back.summary.final_loss == -math.inf


def test_non_finite_tokens_are_read_only_from_old_versions():
    """A version-2 line may hold NaN/Infinity tokens (as versions 1 and 2 wrote them); a version-3 line may not."""
    import math

    data = json.loads(make_record().to_json()) | {"schema_version": 2}
    data["epochs"][1]["loss"] = float("nan")
    old = CellRecord.from_json(json.dumps(data))
    assert math.isnan(old.epochs[1].loss) and old.schema_version == SCHEMA_VERSION
    with pytest.raises(ValueError, match="^NaN is not JSON: a version-3 record stores a non-finite number as null "
                                         "and names it under 'nonfinite'$"):
        CellRecord.from_json(json.dumps(data | {"schema_version": 3}))
    data["epochs"][1]["loss"] = float("-inf")
    with pytest.raises(ValueError, match="^-Infinity is not JSON"):
        CellRecord.from_json(json.dumps(data | {"schema_version": 3}))


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda d: [d], "^a record is a JSON object, got list$"),
    (lambda d: d | {"schema_version": 6}, "^record schema version 6; this gradeff reads versions 1, 2, 3, 4, 5$"),
    (lambda d: d | {"schema_version": "3"}, "^record schema version '3'"),
    (lambda d: d | {"speed": 1, "colour": 2}, r"^unknown record fields: \['colour', 'speed'\]$"),
    (lambda d: d | {"schema_version": 2, "nonfinite": {}}, r"^unknown record fields: \['nonfinite'\]$"),
    (lambda d: d | {"nonfinite": []}, "^nonfinite must be an object of JSON Pointers, got list$"),
    (lambda d: d | {"nonfinite": {"/summary/final_loss": "nan"}},
     "^nonfinite: '/summary/final_loss' is 'nan'; expected one of NaN, Infinity, -Infinity$"),
    (lambda d: d | {"nonfinite": {"summary/final_loss": "NaN"}},
     "^nonfinite: 'summary/final_loss' is not a JSON Pointer$"),
    (lambda d: d | {"nonfinite": {"/summary/final_loss": "NaN"}},
     "^nonfinite: '/summary/final_loss' holds 1.5, not null$"),
    (lambda d: d | {"nonfinite": {"/summary/no_such": "NaN"}},
     r"^nonfinite: '/summary/no_such' names no value \(KeyError: 'no_such'\)$"),
    (lambda d: d | {"nonfinite": {"/epochs/7/loss": "NaN"}},
     r"^nonfinite: '/epochs/7/loss' names no value \(IndexError: "),
])
def test_malformed_records_are_refused_with_the_reason(mangle, message):
    """Each way a line can be a wrong record is refused, saying which."""
    with pytest.raises(ValueError, match=message):
        CellRecord.from_dict(mangle(json.loads(make_record().to_json())))


def test_the_store_keeps_one_line_per_record(tmp_path):
    """Appends create the folders, write exactly one newline-terminated line of compact JSON each (no blank line
    between records of an intact file) and leave the file readable by others (0o644 less the umask)."""
    import os
    import stat

    path = tmp_path / "new" / "results" / "r.jsonl"
    first, second = make_record(), make_record("vit-sgd-accum")
    append_record(path, first)
    append_record(path, second)
    assert path.read_bytes() == (first.to_json() + "\n" + second.to_json() + "\n").encode()
    assert first.to_json() == json.dumps(json.loads(first.to_json()), separators=(",", ":"))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~umask


def test_a_one_byte_torn_tail_gets_its_newline(tmp_path):
    """Even a torn line of a single byte is ended before the next record, which then reads."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"{")
    append_record(path, make_record())
    errors: list[str] = []
    assert [r.cell for r in read_records(path, errors=errors)] == ["llm-adam-standard"]
    assert [e.split(": ")[0] for e in errors] == [f"{path}:1"]


def test_reading_a_record_leaves_its_data_alone():
    """from_dict restores non-finite values into a copy: the parsed line it was given still holds its nulls."""
    import math

    record = make_record(meters={"trace": {"losses": [1.0, math.nan, math.inf]}})
    data = json.loads(record.to_json())
    before = json.dumps(data)
    back = CellRecord.from_dict(data)
    assert json.dumps(data) == before
    assert back.meters["trace"]["losses"][0] == 1.0 and math.isnan(back.meters["trace"]["losses"][1])
    assert back.meters["trace"]["losses"][2] == math.inf


def test_blank_lines_are_skipped_not_the_end(tmp_path):
    """A blank line (an editor's, or a torn write's newline) is neither a record nor an error, and the records
    after it are read."""
    path = tmp_path / "r.jsonl"
    lines = [make_record().to_json(), "", "   ", make_record("vit-sgd-accum").to_json(), ""]
    path.write_text("\n".join(lines) + "\n")
    errors: list[str] = []
    assert [r.cell for r in read_records(path, errors=errors)] == ["llm-adam-standard", "vit-sgd-accum"]
    assert errors == []


def test_every_kind_of_bad_line_is_reported_and_skipped(tmp_path):
    """Bad JSON, absurdly deep JSON, a record missing its summary, a summary that is not an object, bytes that are
    not UTF-8: each costs only its line, named with its number and reason."""
    path = tmp_path / "r.jsonl"
    good = make_record().to_json()
    data = json.loads(good)
    no_summary = {k: v for k, v in data.items() if k != "summary"}
    lines = [b"{not json", b"[" * 100_000 + b"]" * 100_000, json.dumps(no_summary).encode(),
             json.dumps(data | {"summary": [1, 2]}).encode(), b"\xc3\x28", good.encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    errors: list[str] = []
    assert [r.cell for r in read_records(path, errors=errors)] == ["llm-adam-standard"]
    assert [e.split(": ")[0] for e in errors] == [f"{path}:{n}" for n in range(1, 6)]
    assert errors[0].startswith(f"{path}:1: Expecting property name enclosed in double quotes")
    assert errors[2] == f"{path}:3: summary is missing"
    assert errors[4] == f"{path}:5: not UTF-8 text (invalid continuation byte at byte 0)"
    with pytest.raises(ValueError, match=f"^{path}:1: "):
        list(read_records(path))


def test_latest_record_wins_in_order_of_first_appearance():
    """latest_by_cell keeps each cell's last record at its first position; latest_by_run does so per seed."""
    from gradeff.records.store import latest_by_cell, latest_by_run

    a0, b0, a1, a0_again = (make_record(), make_record("vit-sgd-accum"), make_record(seed=1),
                            make_record(detail="rerun"))
    assert list(latest_by_cell([a0, b0, a1, a0_again]).items()) == [("llm-adam-standard", a0_again),
                                                                    ("vit-sgd-accum", b0)]
    assert list(latest_by_run([a0, b0, a1, a0_again]).items()) == [(("llm-adam-standard", 0), a0_again),
                                                                   (("vit-sgd-accum", 0), b0),
                                                                   (("llm-adam-standard", 1), a1)]


def test_version_4_records_are_read_with_no_experiment_fingerprint():
    """A record written before fingerprints (version 4: no experiment and no seeding section) reads as it was, its
    experiment section empty, so --gradeff-resume never keeps such a record (nothing says which experiment it was)."""
    from pathlib import Path

    baseline = Path(__file__).parents[2] / "baselines" / "tiny-cpu.jsonl"
    current = json.loads(baseline.read_text(encoding="utf-8").splitlines()[0])
    assert current["schema_version"] == SCHEMA_VERSION == 5 and current["experiment"]["fingerprint"]
    old = {key: value for key, value in current.items() if key not in ("experiment", "seeding")} | {"schema_version": 4}
    record = CellRecord.from_json(json.dumps(old))
    assert record.schema_version == SCHEMA_VERSION and record.experiment == {}
    assert record.epochs == CellRecord.from_json(json.dumps(current)).epochs
