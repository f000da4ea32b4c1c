"""Sharded training (``fsdp``): W processes on gloo, each holding 1/W of the state, training as one process does."""

import multiprocessing
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gradeff.axes.models import MODELS, ModelSpec
from gradeff.axes.optim import OPTIMIZERS
from gradeff.cell import distributed
from gradeff.cell.config import RunConfig
from gradeff.cell.distributed import merge_ranks, read_world_size, validate_world_size
from gradeff.cell.plan import sharding_incompatibility
from gradeff.cell.run import run_cell
from gradeff.specs.registry import open_for_registration
from gradeff.studies.extend import reset
from gradeff.studies.grid import GRIDS, Cell, cells
from tests.conftest import build_record

CONFIG = RunConfig(profile="tiny", epochs=2, device="cpu")
# The all-reduced loss of two half micro-batches against the loss of the whole one: float32 sums in
# another order (measured on the tiny llm: 2.5e-8 relative).
LOSS_RTOL = 1e-6
SHARDED = ("parameter_bytes", "gradient_bytes")


@pytest.fixture(scope="module")
def llm_cells():
    """The tiny llm with Adam: unsharded, on two processes, and on one process under FSDP."""
    standard = run_cell(Cell("llm", "adam", "standard"), CONFIG)
    sharded = run_cell(Cell("llm", "adam", "fsdp"), CONFIG)
    # As many epochs as the standard cell: the warm-up spans the run's steps, so a shorter run differs from its first.
    single = run_cell(Cell("llm", "adam", "fsdp"), replace(CONFIG, world_size=1))
    return standard, sharded, single


def _losses(record):
    return [epoch.loss for epoch in record.epochs]


def _assert_sharded_law(standard, sharded, world_size):
    """Each rank holds 1/W of parameters, gradients and per-parameter state, within one row per parameter."""
    whole, ranks = standard.meters["memory"], sharded.meters["memory"]["ranks"]
    assert len(ranks) == world_size and all(rank is not None for rank in ranks)
    slack = sharded.plan["row_bytes"] * (world_size - 1) / world_size
    for key in SHARDED:
        # The shards partition the tensors exactly: nothing is duplicated or lost.
        assert sum(rank[key] for rank in ranks) == whole[key] > 0
        for rank in ranks:
            assert abs(rank[key] - whole[key] / world_size) <= slack, (key, rank[key], whole[key])
    # The state kept per parameter (Adam's m and v) is sharded with it; scalar step counters stay whole on
    # every rank: each rank's state is its parameters' times the tensors per parameter, plus the counters.
    per_param = OPTIMIZERS[standard.optimizer].state_per_param
    state = whole["optimizer_state_bytes"]
    counters = state - per_param * whole["parameter_bytes"]
    assert 0 <= counters < state / 100 + 1
    for rank in ranks:
        assert rank["optimizer_state_bytes"] == per_param * rank["parameter_bytes"] + counters
        assert abs(rank["optimizer_state_bytes"] - state / world_size) <= per_param * slack + counters


@pytest.mark.slow
def test_fsdp_on_two_processes_holds_half_the_state_and_trains_as_one_process(llm_cells):
    """The law of issue 17: per-rank parameter, gradient and optimizer-state bytes ≈ 1/2; the same loss series."""
    standard, sharded, _ = llm_cells
    assert standard.status == sharded.status == "ok", sharded.detail
    assert len(sharded.epochs) == len(standard.epochs) == 2
    np.testing.assert_allclose(_losses(sharded), _losses(standard), rtol=LOSS_RTOL, atol=0)
    _assert_sharded_law(standard, sharded, 2)
    # Each rank's activations are those of half a micro-batch (plus the gathered weights its backward keeps).
    assert all(rank["activation_bytes"] < standard.meters["memory"]["activation_bytes"]
               for rank in sharded.meters["memory"]["ranks"])
    assert sharded.plan["world_size"] == sharded.hparams["world_size"] == 2
    assert sharded.plan["backend"] == "gloo" and sharded.plan["devices"] == ["cpu", "cpu"]
    assert sharded.plan["sharded_blocks"] >= 1
    # The same number of optimizer steps over the same samples as the unsharded cell.
    assert [e.optimizer_steps for e in sharded.epochs] == [e.optimizer_steps for e in standard.epochs]
    assert [e.samples for e in sharded.epochs] == [e.samples for e in standard.epochs]


def test_fsdp_on_one_process_is_the_standard_cell(llm_cells):
    """W = 1: one shard holding everything, the standard cell's bytes and losses."""
    standard, _, single = llm_cells
    assert single.status == "ok", single.detail
    np.testing.assert_allclose(_losses(single), _losses(standard), rtol=LOSS_RTOL, atol=0)
    (rank,) = single.meters["memory"]["ranks"]
    for key in (*SHARDED, "optimizer_state_bytes"):
        assert rank[key] == standard.meters["memory"][key]


def test_fsdp_shards_a_vision_model_too():
    """A ViT (another family) under the same law, its uneven cuts within one row.

    With SGD the update is proportional to the gradient, so gradients averaged over the ranks instead of
    summed would change the loss series (Adam's normalised update would hide it).
    """
    config = replace(CONFIG, epochs=1)
    standard = run_cell(Cell("vit", "sgd", "standard"), config)
    sharded = run_cell(Cell("vit", "sgd", "fsdp"), config)
    assert standard.status == sharded.status == "ok", sharded.detail
    np.testing.assert_allclose(_losses(sharded), _losses(standard), rtol=LOSS_RTOL, atol=0)
    _assert_sharded_law(standard, sharded, 2)


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5"])
def test_a_bad_world_size_is_refused_naming_what_is_valid(text):
    with pytest.raises(ValueError, match="integer >= 1"):
        validate_world_size(text)
    options = SimpleNamespace(getoption=lambda name: {"gradeff_world_size": text}[name])
    with pytest.raises(pytest.UsageError, match=rf"--gradeff-world-size {text}: .*integer >= 1"):
        read_world_size(options)


def test_a_good_world_size_is_read():
    assert read_world_size(SimpleNamespace(getoption=lambda name: " 4 ")) == 4


@pytest.mark.parametrize(("cell", "config", "reason"), [
    (Cell("llm", "cgd", "fsdp"), CONFIG, "Conjugate Gradient is not a torch.optim optimizer"),
    (Cell("vit_s", "adamw", "fsdp", method="qlora", grid="peft"), CONFIG, "4-bit weights"),
    (Cell("clip", "adamw", "fsdp", method="zero_shot", grid="baselines"), CONFIG, "trains nothing"),
    (Cell("llm", "adam", "fsdp"), replace(CONFIG, precision="fp16"), "sharded scaler"),
    (Cell("llm", "adam", "fsdp"), replace(CONFIG, world_size=1000), "cannot be split over 1000 processes"),
])
def test_what_cannot_be_sharded_is_skipped_with_its_reason(cell, config, reason):
    assert reason in sharding_incompatibility(cell, config)
    started = time.perf_counter()
    record = run_cell(cell, config)
    assert record.status == "skipped" and reason in record.detail
    assert time.perf_counter() - started < 5  # no process was started for it


def test_unsharded_strategies_have_no_sharding_reason():
    assert sharding_incompatibility(Cell("llm", "cgd", "standard"), replace(CONFIG, world_size=1000)) is None


def test_fsdp_is_chosen_not_run_by_default():
    """No grid runs fsdp unless asked; --gradeff-strategies fsdp adds it to the main study's ids."""
    assert all("fsdp" not in grid.strategies for grid in GRIDS.values())
    assert [c.id for c in cells("main", models=["llm"], optimizers=["adam"], strategies=["fsdp"])] == ["llm-adam-fsdp"]


def test_a_failing_rank_names_the_cell_status_and_a_stopped_one_does_not():
    ok = build_record("llm-adam-fsdp", meters={"memory": {"parameter_bytes": 10}})
    diverged = replace(ok, status="diverged", detail="loss nan at optimizer step 3 (epoch 0)", failed_step=3)
    config = replace(CONFIG, world_size=2)
    merged = merge_ranks(Cell("llm", "adam", "fsdp"), config,
                         {0: "process exited with code -15 and sent no record", 1: diverged.to_json()},
                         backend="gloo", started=0.0)
    assert merged.status == "diverged" and merged.detail.startswith("rank 1: loss nan") and merged.failed_step == 3
    both = merge_ranks(Cell("llm", "adam", "fsdp"), config, {0: ok.to_json(), 1: ok.to_json()}, backend="gloo",
                       started=0.0)
    assert both.status == "ok" and both.meters["memory"]["ranks"] == [{"parameter_bytes": 10}] * 2
    # No record at all: the rank that said what went wrong names it, not the one stopped after it.
    lost = merge_ranks(Cell("llm", "adam", "fsdp"), config, {1: "RuntimeError: boom"}, backend="gloo", started=0.0)
    assert (lost.status, lost.detail, lost.plan["world_size"]) == ("error", "rank 1: RuntimeError: boom", 2)


def test_the_other_ranks_are_not_waited_for_once_one_failed(monkeypatch):
    """A rank blocked in a collective that will never complete is given up on after the grace, not waited out."""
    monkeypatch.setattr(distributed, "_GRACE_SECONDS", 0.5)
    context = multiprocessing.get_context("fork")
    blocked = context.Process(target=time.sleep, args=(60,), daemon=True)
    blocked.start()
    results = context.Queue()
    results.put((1, "RuntimeError: boom"))
    finished = SimpleNamespace(exitcode=None)  # rank 1 is still alive when its failure arrives
    started = time.monotonic()
    try:
        outcomes = distributed._gather([blocked, finished], results)
    finally:
        blocked.kill()
        blocked.join()
    assert outcomes == {1: "RuntimeError: boom"}
    assert time.monotonic() - started < 10


def _fails_on_rank_1(profile, **kwargs):
    """The tiny llm, whose third training forward on rank 1 raises (rank 0 is then left in a collective)."""
    import torch.distributed as dist

    from gradeff.axes.models.llm import build

    model = build(profile, **kwargs)
    calls = []

    def hook(module, args, kwargs):
        if torch.is_grad_enabled() and dist.is_initialized() and dist.get_rank() == 1:
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("injected failure")

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return model


@pytest.fixture
def failing_model():
    spec = ModelSpec(key="fails_on_rank_1", name="Fails on rank 1", family="test", task="causal_lm",
                     builder=_fails_on_rank_1)
    with open_for_registration([MODELS]):
        MODELS.register(spec, source=__name__)
    yield spec.key
    reset()


@pytest.mark.slow
def test_a_rank_that_fails_ends_the_cell_without_hanging_the_others(failing_model, monkeypatch):
    """Rank 1 raises mid-epoch while rank 0 waits for it in a collective: the cell ends ``error``, promptly."""
    monkeypatch.setattr(distributed, "_GRACE_SECONDS", 1.0)
    started = time.perf_counter()
    record = run_cell(Cell(failing_model, "adam", "fsdp"), replace(CONFIG, epochs=1))
    assert record.status == "error" and record.detail.startswith("rank 1: RuntimeError: injected failure")
    assert record.plan["world_size"] == 2
    assert time.perf_counter() - started < 120  # not the process group's 10-minute timeout


def test_resume_keeps_a_sharded_cell_only_for_its_world_size():
    """The world size is part of a sharded cell's experiment fingerprint (what --gradeff-resume compares), and of no
    other cell's."""
    from gradeff.cell.experiment import experiment
    from gradeff.records.fingerprint import differences

    sharded, plain = Cell("llm", "adam", "fsdp"), Cell("llm", "adam", "standard")
    two, four = replace(CONFIG, world_size=2), replace(CONFIG, world_size=4)
    assert "world_size 2 → 4" in differences(experiment(sharded, two), experiment(sharded, four))
    assert experiment(plain, two)["fingerprint"] == experiment(plain, four)["fingerprint"]


def test_a_sharded_strategy_refuses_what_it_does_not_combine_with():
    from gradeff.axes.strategies import StrategySpec

    with pytest.raises(ValueError, match="does not combine with checkpointing"):
        StrategySpec(key="fsdp_ckpt", name="FSDP + checkpointing", shards=True, checkpointing=True)
