"""Host offload and torch.compile's memory budget change memory and time, not the gradients."""

import pytest
import torch

from gradeff.axes.data import make_dataset
from gradeff.axes.models import MODELS, build_model
from gradeff.axes.strategies import enable_checkpointing
from gradeff.axes.strategies.prepare import CompiledUnderBudget, OffloadedActivations, compile_backend
from gradeff.meters import ActivationCounter
from gradeff.studies.hparams import hparams_for


def _model_and_batch(key="llm"):
    hp = hparams_for(key, "tiny")
    torch.manual_seed(0)
    model = build_model(key, "tiny", num_labels=hp.num_classes)
    return model, make_dataset(MODELS[key].task, hp, seed=0).batch(torch.arange(8))


def _grads(model, batch, seed=5):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    model(**batch).loss.backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_offload_keeps_gradients_bit_identical_and_counts_what_it_moves():
    """Checkpointing + save_on_cpu: the same gradients as plain training; the saved tensors it moved are counted."""
    model, batch = _model_and_batch()
    plain = _grads(model, batch)
    enable_checkpointing(model)
    offloaded = OffloadedActivations(model)
    moved = _grads(offloaded, batch)
    assert all(torch.equal(a, b) for a, b in zip(plain, moved)) and len(plain) == len(moved)
    # Everything saved for backward moves (save_on_cpu copies saved weights too): at least the activations
    # checkpointing keeps, which the counter sees when nothing is offloaded.
    with ActivationCounter(model) as counter:
        model(**batch).loss.backward()
    assert 0 < counter.saved_bytes <= offloaded.offloaded_bytes


@pytest.mark.parametrize("fraction", [1.0, 0.2])
def test_compiled_under_a_budget_matches_eager_gradients(fraction):
    """torch.compile's partitioner at any activation budget gives the eager gradients within float tolerance."""
    model, batch = _model_and_batch()
    eager = _grads(model, batch)
    torch._dynamo.reset()
    compiled = _grads(CompiledUnderBudget(model, fraction, compile_backend(torch.device("cpu"))), batch)
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_a_smaller_activation_budget_saves_fewer_activations():
    """The budget is obeyed: at 0.1 the compiled step saves less for backward than at 1.0."""
    model, batch = _model_and_batch()
    saved = {}
    for fraction in (1.0, 0.1):
        torch._dynamo.reset()
        compiled = CompiledUnderBudget(model, fraction, compile_backend(torch.device("cpu")))
        compiled(**batch).loss.backward()  # compiles
        with ActivationCounter(model) as counter:
            loss = compiled(**batch).loss
        loss.backward()
        saved[fraction] = counter.saved_bytes
    assert 0 < saved[0.1] < 0.7 * saved[1.0]


def test_evaluation_without_autograd_runs_the_eager_model_and_compiles_nothing():
    """Under no_grad (held-out evaluation, inference) the budget has nothing to save: the wrapper gives the eager
    model's exact outputs and triggers no compile; with autograd on it compiles."""
    model, batch = _model_and_batch()
    model.eval()
    with torch.no_grad():
        expected = model(**batch).loss
    torch._dynamo.reset()
    wrapped = CompiledUnderBudget(model, 0.5, compile_backend(torch.device("cpu")))
    compiles = torch._dynamo.utils.counters["stats"]
    before = compiles["unique_graphs"]
    with torch.no_grad():
        assert torch.equal(wrapped(**batch).loss, expected)
    assert compiles["unique_graphs"] == before
    model.train()
    wrapped(**batch).loss.backward()
    assert compiles["unique_graphs"] > before


def test_the_compiled_anchor_recomputes_nothing_and_the_levels_below_it_do():
    """compile_budget100, the compiled cells' reference, compiles with the whole activation budget (1.0); a lower
    level gets a smaller one: only the anchor's time is the backend's alone."""
    from gradeff.axes.strategies.prepare import prepare

    budgets = {}
    for strategy in ("compile_budget100", "compile_budget20"):
        model, batch = _model_and_batch()
        _, record = prepare(strategy, model, batch, device=torch.device("cpu"), state_bytes=0, budget=None,
                            margin=0.1)
        assert record["kind"] == "compiler" and record["target_bytes"] <= record["unconstrained_peak_bytes"]
        budgets[strategy] = record["activation_memory_budget"]
    assert budgets["compile_budget100"] == 1.0 and budgets["compile_budget20"] < 1.0
