"""scripts/harness_overhead.py: harness ÷ bare loop on the grid's own tiny cells."""

import importlib.util
from pathlib import Path

import pytest

# Their figures are times and meter readings: run while no other test does (tests/conftest.py).
pytestmark = pytest.mark.serial

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "harness_overhead.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("harness_overhead", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_round_times_both_loops_on_the_grid_cells_epoch(script):
    """The tiny llm cell's 24 steps, both loops timed every round, the ratio's interval around its median."""
    result = script.measure("llm", rounds=3)
    assert result["steps_per_epoch"] == 24 and result["rounds"] == 3
    assert result["bare_ms"] > 0 and result["harness_ms"] > 0
    median, low, high = result["ratio"]
    assert 0 < low <= median <= high
    assert len(result["seconds"]["bare"]) == len(result["seconds"]["harness"]) == 3


def test_fresh_processes_are_pooled_round_by_round(script):
    """Each process's rounds come back whole, and the pooled ratio rests on all of them, paired as measured."""
    pooled, each = script.in_fresh_processes("llm", rounds=2, processes=2, threads=1)
    assert [result["rounds"] for result in each] == [2, 2] and pooled["rounds"] == 4
    for name in ("bare", "harness"):
        assert pooled["seconds"][name] == each[0]["seconds"][name] + each[1]["seconds"][name]
    ratios = sorted(h / b for h, b in zip(pooled["seconds"]["harness"], pooled["seconds"]["bare"]))
    assert pooled["ratio"][0] == pytest.approx((ratios[1] + ratios[2]) / 2)


def test_too_few_rounds_and_unknown_models_are_refused_with_the_choices(script, capsys):
    with pytest.raises(SystemExit) as refused:
        script.main(["--rounds", "1"])
    assert refused.value.code == 2 and "--rounds must be at least 2" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        script.main(["--processes", "0"])
    assert refused.value.code == 2 and "--processes must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--model", "resnet"])
    assert "choose from 'vit', 'llm', 'modernbert', 'vlm'" in capsys.readouterr().err
