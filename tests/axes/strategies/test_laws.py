"""The laws of the memory strategies, on every real model family.

- Accumulation: k micro-batches of b samples, each loss weighted by its share of the targets,
  give the gradient of one batch of k·b samples. Models with BatchNorm normalise each micro-batch
  by its own statistics, so for them the law holds with the statistics frozen, and not otherwise.
- Checkpointing: recomputing activations in backward does not change the gradients at all,
  dropout included (non-reentrant checkpointing replays the RNG state).
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradeff.axes.data import make_dataset
from gradeff.axes.models import MODELS, build_model
from gradeff.axes.strategies import enable_checkpointing
from gradeff.studies.hparams import hparams_for

# Every model that can be built (MobileVLM's baselines row has no implementation: it only skips, saying why).
FAMILIES = [key for key, spec in MODELS.items() if not spec.unavailable]


def _setup(key: str):
    hp = hparams_for(key, "tiny")
    torch.manual_seed(0)
    model = build_model(key, "tiny", num_labels=hp.num_classes)
    return model, make_dataset(MODELS[key].task, hp, seed=0)


def _grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _accumulated_grads(model, data, indices, k, weighting):
    model.zero_grad(set_to_none=True)
    groups = indices.chunk(k)
    counts = [int(data.targets[g].sum()) for g in groups]
    for group, count in zip(groups, counts):
        loss = model(**data.batch(group)).loss
        scale = count / sum(counts) if weighting == "targets" else 1 / k
        (loss * scale).backward()
    return _grads(model)


def _relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """‖got - want‖ / ‖want‖ over all parameters at once.

    Not per tensor: some gradients are exactly zero in exact arithmetic (a key-projection bias
    cannot change a softmax), and their float residue ~1e-10 has no meaningful relative error.
    """
    diff = torch.cat([(a - b).flatten() for a, b in zip(got, want)])
    return (diff.norm() / torch.cat([b.flatten() for b in want]).norm()).item()


# float32, as the grid trains. The two sides differ only in summation order and in the loss
# being a mean over 4k·b targets once vs. over b-sized pieces; float32 rounding (eps 1.2e-7)
# through two layers and a few hundred summed terms stays around 1e-6 relative, while any
# weighting mistake is of the order of the spread of targets per micro-batch (> 1e-2, see below).
ACCUMULATION_RTOL = 1e-5


@pytest.mark.parametrize("key", FAMILIES)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.sampled_from([2, 4]), seed=st.integers(0, 2**16))
def test_accumulation_equals_the_large_batch(key, k, seed):
    """Target-weighted accumulation over k micro-batches gives the gradient of one batch of k·b."""
    model, data = _setup(key)
    _freeze_batch_statistics(model)
    indices = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[: 4 * k]
    model.zero_grad(set_to_none=True)
    model(**data.batch(indices)).loss.backward()
    large = _grads(model)
    accumulated = _accumulated_grads(model, data, indices, k, "targets")
    assert _relative_error(accumulated, large) < ACCUMULATION_RTOL


def _freeze_batch_statistics(model):
    # BatchNorm in eval mode normalises with its running statistics: samples no longer interact.
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.eval()


@pytest.mark.parametrize("key", [key for key in FAMILIES if MODELS[key].batch_norm])
def test_batch_norm_models_are_flagged_because_accumulation_changes_their_gradients(key):
    """With batch statistics (training mode), accumulating micro-batches is measurably not the large batch."""
    assert accumulation_error(key, "targets") > 100 * ACCUMULATION_RTOL


def test_only_batch_norm_models_are_flagged():
    """ModelSpec.batch_norm is true exactly for the models that contain a BatchNorm layer."""
    for key in FAMILIES:
        model, _ = _setup(key)
        has_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
        assert MODELS[key].batch_norm == has_bn, key


def accumulation_error(key: str, weighting: str, *, frozen_statistics: bool = False) -> float:
    """Relative gradient error of 4 accumulated micro-batches against one batch of the same 16 samples."""
    model, data = _setup(key)
    if frozen_statistics:
        _freeze_batch_statistics(model)
    indices = torch.arange(16)
    model.zero_grad(set_to_none=True)
    model(**data.batch(indices)).loss.backward()
    large = _grads(model)
    return _relative_error(_accumulated_grads(model, data, indices, 4, weighting), large)


def test_naive_loss_over_k_is_wrong_when_targets_differ():
    """Masked LM micro-batches hold different numbers of masked tokens: loss/k is not the large batch."""
    assert accumulation_error("modernbert", "naive") > 100 * ACCUMULATION_RTOL


def _with_dropout(model, p=0.1):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = p
        if isinstance(getattr(module, "dropout", None), float):
            module.dropout = p
    return model


def _grads_of_one_step(key, checkpointing, seed=7):
    model, data = _setup(key)
    _with_dropout(model)
    if checkpointing:
        enable_checkpointing(model)
    torch.manual_seed(seed)
    model(**data.batch(torch.arange(8))).loss.backward()
    return _grads(model)


@pytest.mark.parametrize("key", FAMILIES)
def test_checkpointing_does_not_change_gradients(key):
    """With dropout on and the same seed, gradients with and without checkpointing are bit-identical."""
    plain = _grads_of_one_step(key, checkpointing=False)
    checkpointed = _grads_of_one_step(key, checkpointing=True)
    # Dropout really is active: another seed gives other gradients, so the equality below is not vacuous.
    other_seed = _grads_of_one_step(key, checkpointing=False, seed=8)
    assert any(not torch.equal(a, b) for a, b in zip(plain, other_seed))
    assert len(plain) == len(checkpointed)
    assert all(torch.equal(a, b) for a, b in zip(plain, checkpointed))
