"""Real faults injected into real tiny cells, judged by the gate with its default rules."""

import re
from dataclasses import replace

import pytest
import torch

from gradeff.compare import main
from gradeff.grid import Cell
from gradeff.hparams import hparams_for
from gradeff.results import append_record
from gradeff.runner import RunConfig, run_cell

CELL = Cell("llm", "adam", "standard")
CONFIG = RunConfig(profile="tiny", seed=0, epochs=2, device="cpu")


def write(path, record) -> str:
    append_record(path, record)
    return str(path)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """One recorded run of the tiny llm cell (two epochs), on one torch thread like a pytest-xdist worker."""
    return _run(tmp_path_factory.mktemp("lr"), "base")


def _run(tmp_path, name: str, config: RunConfig = CONFIG) -> str:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return write(tmp_path / f"{name}.jsonl", run_cell(CELL, config))
    finally:
        torch.set_num_threads(threads)


def test_an_unchanged_rerun_repeats_every_loss(baseline, tmp_path, capsys):
    """Same code, seed and versions on CPU: no loss, held-out or memory figure moves beyond 1e-6."""
    assert main([baseline, _run(tmp_path, "rerun"), "--ignore", "time_per_epoch"]) == 0
    assert "no change beyond tolerance" in capsys.readouterr().out


@pytest.mark.parametrize("factor", [1.01, 0.99], ids=["lr+1%", "lr-1%"])
def test_a_one_percent_learning_rate_change_is_caught(baseline, tmp_path, capsys, factor):
    """The profile's learning rate 1 % higher or lower moves the training losses beyond the default
    tolerance (1e-6 relative, what seeded CPU reruns repeat to); the old rtol 1e-3 passed it."""
    lr = hparams_for(CELL.model, CONFIG.profile).lr * factor
    changed = _run(tmp_path, "changed", replace(CONFIG, lr=lr))
    code = main([baseline, changed, "--ignore", "time_per_epoch"])
    gate = capsys.readouterr().out
    print(gate)
    rows = re.findall(r"^llm-adam-standard\s+(final_loss|mean_loss|heldout_loss)\s.*\s(regression|improvement)\s",
                      gate, flags=re.MULTILINE)
    assert {metric for metric, _ in rows} >= {"final_loss", "mean_loss"}, gate
    # A higher loss fails the gate; a lower one is an improvement the table shows (exit 0).
    assert code == (1 if any(verdict == "regression" for _, verdict in rows) else 0)
    assert main([baseline, changed, "--ignore", "time_per_epoch", "--rule", "*_loss:rtol=1e-3"]) == 0
