"""The results store under damage: torn tails, bytes that are not UTF-8, non-finite numbers."""

import json
import math

import pytest

from gradeff.gate.compare import load_results as gate_load
from gradeff.gate.comparison import UnusableInput
from gradeff.records.loading import ResultsFileError, load_results
from gradeff.records.results import CellRecord, EpochRecord, Summary
from gradeff.records.store import append_record, read_records
from gradeff.records.strict_json import NONFINITE_KEY


def make_record(cell="llm-adam-standard", loss=1.5) -> CellRecord:
    model, optimizer, strategy = cell.split("-")
    epochs = (EpochRecord(epoch=0, loss=2.0, seconds=1.0, optimizer_steps=8, closure_calls=8, samples=64, targets=64),
              EpochRecord(epoch=1, loss=loss, seconds=1.0, optimizer_steps=8, closure_calls=8, samples=64,
                          targets=64))
    return CellRecord(cell=cell, model=model, optimizer=optimizer, strategy=strategy, profile="tiny", seed=0,
                      device="cpu", status="ok", epochs=epochs, summary=Summary.of(list(epochs), 2.0))


def test_an_append_after_a_torn_tail_starts_its_own_line(tmp_path):
    """A record cut short without its newline (a crash mid-write) costs only itself: the next append adds the
    newline first, so no record is glued onto the torn one."""
    path = tmp_path / "r.jsonl"
    append_record(path, make_record())
    torn = make_record("vit-sgd-accum").to_json()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(torn[: len(torn) // 2])
    append_record(path, make_record("llm-sgd-accum"))
    append_record(path, make_record("vit-adam-accum"))
    errors: list[str] = []
    assert [r.cell for r in read_records(path, errors=errors)] == ["llm-adam-standard", "llm-sgd-accum",
                                                                  "vit-adam-accum"]
    assert len(errors) == 1 and errors[0].startswith(f"{path}:2: ")


def test_bytes_that_are_not_utf8_cost_only_their_line(tmp_path):
    """An invalid byte in line 2 and another in line 4: both lines named with their numbers, the rest read, by
    the report's loader and by the gate's, each listing every bad line."""
    path = tmp_path / "r.jsonl"
    good = [make_record(c).to_json().encode() for c in ("llm-adam-standard", "llm-sgd-accum", "vit-adam-accum")]
    path.write_bytes(b"\n".join([good[0], b"{\"cell\": \"\xff\xfe\"}", good[1], b"\xc3\x28garbage", good[2]]) + b"\n")
    loaded = load_results([path])
    assert [r.cell for r in loaded.records] == ["llm-adam-standard", "llm-sgd-accum", "vit-adam-accum"]
    assert [line.split(": ")[0] for line in loaded.skipped_lines] == [f"{path}:2", f"{path}:4"]
    assert all("not UTF-8 text" in line for line in loaded.skipped_lines)
    records, warnings = gate_load(path)
    assert len(records) == 3 and f"{path}:2:" in warnings[0] and f"{path}:4:" in warnings[0]
    with pytest.raises(UnusableInput, match=f"{path}:2: .*; {path}:4: "):
        gate_load(path, strict=True)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\xff\n\xfe\nnot json\n")
    with pytest.raises(ResultsFileError, match=r":1: .*\(and 2 more bad lines: .*:2: .*; .*:3: "):
        load_results([garbage])


def test_non_finite_numbers_are_stored_as_null_and_flagged(tmp_path):
    """NaN and infinities become null, named by JSON Pointer under ``nonfinite``; any strict JSON reader
    reads the line, and reading it back restores the values."""
    record = make_record(loss=math.nan)
    record = CellRecord(**{**{f: getattr(record, f) for f in record.__dataclass_fields__},
                           "meters": {"energy": {"joules": math.inf}, "gpu": {"power": -math.inf}}})
    path = tmp_path / "r.jsonl"
    append_record(path, record)
    line = path.read_text()

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    data = json.loads(line, parse_constant=refuse)
    assert data[NONFINITE_KEY] == {"/epochs/1/loss": "NaN", "/summary/final_loss": "NaN",
                                   "/summary/mean_loss": "NaN",
                                   "/meters/energy/joules": "Infinity", "/meters/gpu/power": "-Infinity"}
    assert data["epochs"][1]["loss"] is None
    (back,) = read_records(path)
    assert math.isnan(back.epochs[1].loss) and back.meters["energy"]["joules"] == math.inf
    assert back.meters["gpu"]["power"] == -math.inf


@pytest.mark.slow
def test_a_torn_tail_then_a_resumed_run_loses_nothing(grid_pytester):
    """Two cells recorded, the second record torn (the writer killed mid-line); --gradeff-resume keeps the
    first, re-runs the second, and every cell ends with exactly one readable record."""
    results = grid_pytester.path / "r.jsonl"
    args = ("-p", "gradeff.pytest_plugin", "-p", "no:cacheprovider", "--benchmark-disable", "--gradeff-epochs", "1",
            "-k", "vit-sgd-standard or vit-sgd-accum", f"--gradeff-results={results}")
    grid_pytester.runpytest_subprocess(*args).assert_outcomes(passed=2)
    first, second = results.read_text().splitlines()
    results.write_text(first + "\n" + second[: len(second) // 2])
    resumed = grid_pytester.runpytest_subprocess(*args, "--gradeff-resume", "-rs")
    errors: list[str] = []
    records = list(read_records(results, errors=errors))
    assert len(errors) == 1 and f"{results}:2:" in errors[0]
    assert {r.cell for r in records} == {"vit-sgd-accum", "vit-sgd-standard"}, errors
    assert records[0].to_json() == first  # the record before the torn line is untouched
    if records[0].code_version == records[-1].code_version:
        # (A source file edited between the two runs changes the code version, and then resume rightly re-runs.)
        resumed.assert_outcomes(passed=1, skipped=1)
        assert [r.cell for r in records] == ["vit-sgd-standard", "vit-sgd-accum"]
