"""The grid's ``cgd`` on mini-batches: conjugate gradient, not steepest descent in disguise.

Each model family of the main grid runs tiny cells through :func:`gradeff.cell.run.run_cell`, the
way the grid runs them, for ``cgd`` and for ``sgd``. CG must restart on well under half of its
iterations and its loss series must differ from SGD's in every epoch, under the standard batch
(8 steps an epoch) and under accumulation (2 steps an epoch, the case where the first step is
most of an epoch).
"""

from __future__ import annotations

import functools
import math

import pytest

import gradeff.cell.build
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.optim.cg import cg_stats
from gradeff.cell.config import RunConfig
from gradeff.cell.run import run_cell
from gradeff.records.results import CellRecord
from gradeff.studies.grid import Cell

FAMILIES = ("vit", "modernbert", "llm", "vlm")
STRATEGIES = ("standard", "accum")
EPOCHS = 2
# The fixed-step variant the grid ran before: PR+ directions, Powell's restarts, lr as the step.
FIXED_STEP = {"beta": "pr+", "line_search": "fixed", "powell_restart": True}


def _run(model: str, optimizer: str, strategy: str, monkeypatch: pytest.MonkeyPatch,
         **overrides) -> tuple[CellRecord, dict | None]:
    """Run a tiny cell; return its record and its optimizer's CG counters (None for other optimizers)."""
    built = []
    build = gradeff.cell.build.build_optimizer

    def capture(key, params, lr, **kwargs):
        built.append(build(key, params, lr, **(kwargs | overrides)))
        return built[-1]

    with monkeypatch.context() as patch:
        patch.setattr(gradeff.cell.build, "build_optimizer", capture)
        # One shared rate for both optimizers: fixed-step CG equals SGD only at SGD's own rate.
        record = run_cell(Cell(model, optimizer, strategy),
                          RunConfig(profile="tiny", device="cpu", epochs=EPOCHS, protocol="shared"))
    assert record.status == "ok", record.detail
    return record, cg_stats(built[0])


@functools.cache
def _sgd_losses(model: str, strategy: str) -> tuple[float, ...]:
    with pytest.MonkeyPatch.context() as patch:
        record, _ = _run(model, "sgd", strategy, patch)
    return tuple(e.loss for e in record.epochs)


def test_grid_cgd_is_hager_zhang_cg_with_a_wolfe_search():
    """The registry's cgd: HZ directions, a strong-Wolfe search with σ = 0.9, no Powell restarts."""
    assert OPTIMIZERS["cgd"].kwargs == {"beta": "hz", "line_search": "strong_wolfe", "c2": 0.9,
                                        "powell_restart": False}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("model", FAMILIES)
@pytest.mark.slow
def test_cgd_restarts_rarely_and_leaves_the_sgd_path(model, strategy, monkeypatch):
    """Restart rate < 50 % and a loss series unlike SGD's in every epoch."""
    record, stats = _run(model, "cgd", strategy, monkeypatch)
    losses = [e.loss for e in record.epochs]
    sgd = _sgd_losses(model, strategy)
    assert len(losses) == len(sgd) == EPOCHS
    assert all(math.isfinite(loss) for loss in losses)
    assert all(abs(ours - theirs) > 1e-4 for ours, theirs in zip(losses, sgd)), (losses, sgd)
    # The counters cover the epochs and the memory meters' one step after them.
    steps = sum(e.optimizer_steps for e in record.epochs)
    assert stats["steps"] == stats["iterations"] == steps + 1
    assert stats["func_evals"] >= sum(e.closure_calls for e in record.epochs) + 1
    assert stats["restart_rate"] < 0.5, stats
    assert stats["restart_reasons"]["powell"] == stats["restart_reasons"]["clipped"] == 0
    # The record keeps the counters of the timed epochs alone: one step fewer than the optimizer's.
    recorded = record.meters["cg"]
    assert recorded["steps"] == steps and recorded["func_evals"] == sum(e.closure_calls for e in record.epochs)


def test_fixed_step_cg_is_sgd_under_accumulation(monkeypatch):
    """Why the grid's cgd has a line search: the fixed-step variant restarts on (nearly) every
    iteration of an accumulated mini-batch and its losses are SGD's to the last bit."""
    record, stats = _run("llm", "cgd", "accum", monkeypatch, **FIXED_STEP)
    assert tuple(e.loss for e in record.epochs) == _sgd_losses("llm", "accum")
    assert stats["restart_rate"] >= 0.5


def test_other_optimizers_record_no_cg_counters():
    """Only conjugate gradient has counters to record; SGD's record has no ``cg`` entry, not zeros."""
    record = run_cell(Cell("llm", "sgd", "standard"), RunConfig(profile="tiny", device="cpu", epochs=1))
    assert record.status == "ok" and "cg" not in record.meters
