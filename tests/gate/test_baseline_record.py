"""`gradeff baseline record`'s checks before it writes anything: every run ok, every perturbation of every cell, one
code version, one numerics probe."""

import pytest

from gradeff.gate.baseline_record import DEFAULT_SLICE, BaselineNotRecorded, _check, check_command
from tests.conftest import build_record


def _record(cell="llm-adam-standard", *, probe="v1:a", version="c1", status="ok", threads=1):
    return build_record(cell, status, code_version=version,
                        environment={"python": "3.11", "torch": "2.13.0+cpu", "numerics_probe": probe,
                                     "torch_threads": threads})


def _perturbed(cell="llm-adam-standard", version="c1"):
    return [_record(cell, probe=f"v1:p{i}", version=version, threads=i) for i in range(1, 4)]


def test_a_sound_recording_gives_its_probe():
    assert _check([_record()], _perturbed()) == "v1:a"


@pytest.mark.parametrize(("primary", "perturbed", "why"), [
    ([], [], "ran no cell"),
    ([_record(status="diverged")], _perturbed(), r"did not end ok: llm-adam-standard \(diverged\)"),
    ([_record()], _perturbed(version="c2"), "the code changed while recording"),
    ([_record()], _perturbed()[:2], "without a run of every perturbation: llm-adam-standard"),
    ([_record(), _record("llm-sgd-standard", probe="v1:b")], [*_perturbed(), *_perturbed("llm-sgd-standard")],
     "2 numerics probes"),
])
def test_a_recording_that_does_not_hold_together_is_refused(primary, perturbed, why):
    with pytest.raises(BaselineNotRecorded, match=why):
        _check(primary, perturbed)


def test_the_check_runs_the_slice_as_it_was_recorded_and_gates_it_strictly():
    command = check_command("b.jsonl", gate_args=["--ignore", "time_per_epoch"])
    assert command[1:3] == ["-m", "pytest"] and command[3:3 + len(DEFAULT_SLICE)] == list(DEFAULT_SLICE)
    assert "--gradeff-threads=1" in command and "--gradeff-baseline=b.jsonl" in command
    assert command[-1] == "--gradeff-compare-args=--strict --ignore time_per_epoch"
