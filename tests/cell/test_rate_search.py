"""The tuned table's search: cells × seeds × rates on the validation split, with a stand-in for training."""

import math

import pytest

from gradeff.axes.optim import OPTIMIZERS
from gradeff.cell.rate_search import SearchSettings, search_cell, tunable_cells
from gradeff.studies.grid import Cell, cells


def _fake_trial(best: float, fail_above: float = math.inf, fail_seed: int | None = None):
    """Validation loss as a parabola in log10(lr) around ``best``, plus a per-seed offset; above ``fail_above`` the
    run fails (``None``), for every seed or only for ``fail_seed``."""
    calls = []

    def trial(cell, settings, lr, seed):
        calls.append((lr, seed))
        if lr > fail_above and fail_seed in (None, seed):
            return None
        return (math.log10(lr) - math.log10(best)) ** 2 + 0.01 * seed

    trial.calls = calls
    return trial


def test_every_rate_is_trained_once_per_seed_and_scored_by_the_mean():
    """Five rates × two seeds; the best is inside the grid; each score is the mean of the seeds' losses."""
    trial = _fake_trial(best=1e-3)
    row = search_cell(Cell("llm", "adam", "standard"), SearchSettings(profile="tiny"), "s1", trial=trial)
    assert row.lr == pytest.approx(1e-3) and row.at_edge is None and row.seeds == (0, 1)
    assert len(trial.calls) == 10 and {seed for _, seed in trial.calls} == {0, 1}
    assert row.scores[row.grid.index(row.lr)] == pytest.approx(0.005)
    assert (row.profile, row.model, row.optimizer, row.method, row.dataset) == \
        ("tiny", "llm", "adam", "full", "causal_lm")


def test_the_search_widens_past_an_edge_and_a_seed_that_fails_disqualifies_its_rate():
    """SGD's grid (0.01 … 1) ends below the best rate (3); seed 1 diverges above 5. The search widens to 3.16, then
    to 10, where seed 1 fails, and keeps 3.16, inside the rates tried."""
    centre = OPTIMIZERS["sgd"].lr_centre
    trial = _fake_trial(best=3.0, fail_above=5.0, fail_seed=1)
    row = search_cell(Cell("llm", "sgd", "standard"), SearchSettings(profile="tiny", widen=4), "s1", trial=trial)
    assert max(row.grid) == pytest.approx(centre * 100) and row.lr == pytest.approx(10**0.5)
    assert row.at_edge is None and row.scores[-1] is None and len(row.grid) == 7


def test_a_spent_widening_leaves_the_edge_flag_on_the_row():
    """No widening allowed and the loss still falling at the grid's top: the row says it sits at the high edge."""
    row = search_cell(Cell("llm", "adam", "standard"), SearchSettings(profile="tiny", widen=0), "s1",
                      trial=_fake_trial(best=1.0))
    assert row.at_edge == "high" and row.lr == max(row.grid)


def test_a_tuning_free_optimizer_gets_its_reason_and_no_trials():
    """CG: no trial runs; the row keeps the shared rate and the spec's reason."""
    trial = _fake_trial(best=1e-3)
    row = search_cell(Cell("llm", "cgd", "standard"), SearchSettings(profile="tiny"), "s1", trial=trial)
    assert trial.calls == [] and row.grid == () and "line search" in row.tuning_free


def test_a_cell_no_rate_can_score_is_an_error():
    """Every rate failing is not a choice: the search says so instead of writing a row."""
    with pytest.raises(RuntimeError, match="no rate"):
        search_cell(Cell("llm", "adam", "standard"), SearchSettings(profile="tiny", widen=0), "s1",
                    trial=_fake_trial(best=1e-3, fail_above=0.0))


def test_accumulation_is_searched_on_its_own_and_checkpointing_is_not():
    """The main grid's strategies give two searches per (model, optimizer): standard (checkpointing trains its very
    steps) and accum (another batch, other steps); the rows say which."""
    found = tunable_cells(cells("main", models=["llm"], optimizers=["adam"]))
    assert sorted(c.strategy for c in found) == ["accum", "standard"]
    trial = _fake_trial(best=1e-3)
    row = search_cell(next(c for c in found if c.strategy == "accum"), SearchSettings(profile="tiny"), "s1",
                      trial=trial)
    assert row.strategy == "accum" and row.key[-1] == "accum"


def test_one_cell_per_axes_that_can_run():
    """The standard cell stands for every strategy; cells that cannot run (BitFit without biases) are left out."""
    found = tunable_cells(cells("peft", models=["vit_s", "vim_s"], methods=["full", "bitfit"], datasets=["cifar100"]))
    keys = {(c.model, c.method) for c in found}
    assert all(c.strategy == "standard" for c in found)
    assert ("vit_s", "bitfit") in keys and len(found) == len(keys)


def test_the_command_line_refuses_a_single_seed():
    """A tuned rate rests on two or more seeds: the script refuses one before training anything."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "scripts" / "tune_rates.py"
    spec = importlib.util.spec_from_file_location("tune_rates", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--seeds", "0"])
    assert exit_info.value.code == 2
