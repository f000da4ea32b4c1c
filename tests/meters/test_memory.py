"""Tests of the exact memory breakdown on real tiny transformers (Llama, ViT, ModernBERT)."""

from __future__ import annotations

import functools
import gc
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import LlamaForCausalLM

from gradeff.axes.data import make_dataset
from gradeff.axes.models import MODELS, build_model, llm
from gradeff.axes.optim import OPTIMIZERS, build_optimizer
from gradeff.axes.strategies import enable_checkpointing
from gradeff.meters.memory import (
    ActivationCounter,
    gradient_bytes,
    measure_step_memory,
    optimizer_state_bytes,
    parameter_bytes,
    parameter_counts,
    trainable_parameter_bytes,
)
from gradeff.studies.hparams import hparams_for

STEP_COUNTER_BYTES = 4  # torch keeps "step" as a float32 scalar tensor per parameter
FAMILIES = ("llm", "vit", "modernbert")


@functools.cache
def _dataset(family: str):
    return make_dataset(MODELS[family].task, hparams_for(family, "tiny"), seed=0)


def make_batch(family: str, batch: int) -> dict[str, torch.Tensor]:
    """The first ``batch`` samples of the family's tiny task, with labels."""
    return _dataset(family).batch(torch.arange(batch))


def build(family: str) -> nn.Module:
    """A freshly initialized tiny model of a family in training mode."""
    torch.manual_seed(0)
    return build_model(family, "tiny", num_labels=hparams_for(family, "tiny").num_classes)


def activation_bytes(model: nn.Module, family: str, batch: int) -> int:
    """Activation bytes of one forward pass (with backward, to free the graph)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # use_cache vs checkpointing notices
        with ActivationCounter(model) as counter:
            loss = model(**make_batch(family, batch)).loss
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.saved_bytes


def train_step(model: nn.Module, opt: torch.optim.Optimizer, family: str, batch: int = 2) -> None:
    """Forward, backward and optimizer step, clearing gradients first, as the grid's closure does."""
    inputs = make_batch(family, batch)

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        loss.backward()
        return loss

    opt.step(closure)


def stepped(params: list[nn.Parameter]) -> tuple[int, int]:
    """(bytes, count) of the parameters that received a gradient."""
    with_grad = [p for p in params if p.grad is not None]
    return sum(p.numel() * p.element_size() for p in with_grad), len(with_grad)


# -- parameters and gradients -------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_parameter_and_gradient_bytes(family):
    """Parameter bytes are 4 per float32 element; after a step every parameter has a gradient."""
    model = build(family)
    n_elements = sum(p.numel() for p in model.parameters())
    assert parameter_bytes(model) == trainable_parameter_bytes(model) == 4 * n_elements
    assert gradient_bytes(model) == 0
    train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), family)
    assert gradient_bytes(model) == trainable_parameter_bytes(model)


def test_tied_weights_counted_once():
    """Tying the Llama output projection to the embedding removes exactly one vocab x hidden matrix."""
    untied_config = llm.config("tiny")
    untied_config.tie_word_embeddings = False
    untied = LlamaForCausalLM(untied_config)
    tied = build("llm")
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert parameter_bytes(untied) - parameter_bytes(tied) == 128 * 64 * 4


def test_frozen_parameters_are_not_trainable_and_get_no_state():
    """Freezing the embedding removes it from trainable bytes, gradients and Adam state."""
    model = build("llm")
    emb = model.model.embed_tokens.weight
    emb.requires_grad_(False)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    train_step(model, opt, "llm")
    assert trainable_parameter_bytes(model) == parameter_bytes(model) - emb.numel() * 4
    assert gradient_bytes(model) == trainable_parameter_bytes(model)
    assert emb not in opt.state


# -- optimizer state laws -----------------------------------------------------------------

# The registry's optimizers whose state is whole parameter-sized tensors, as the registry builds
# them, with the state it promises, and SGD with momentum built by hand: name -> (constructor,
# state tensors per parameter as multiples of it, has a step counter). The other laws (Adafactor,
# 8-bit AdamW) are proven in tests/axes/optim/test_state_laws.py.
WITH_STEP_COUNTER = {"adam", "adamw", "adagrad", "adadelta"}
OPTIMIZER_CASES = {
    key: (functools.partial(build_optimizer, key, lr=1e-3), spec.state_per_param, key in WITH_STEP_COUNTER)
    for key, spec in OPTIMIZERS.items() if spec.state_law == "dense"
} | {"sgd_momentum": (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1, False)}


@pytest.mark.parametrize("name", OPTIMIZER_CASES)
def test_optimizer_state_law_llama(name):
    """State bytes = k x stepped parameter bytes + a 4-byte float32 step per parameter tensor."""
    make_opt, multiple, has_step = OPTIMIZER_CASES[name]
    model = build("llm")
    params = list(model.parameters())
    opt = make_opt(params)
    # State is created by the first step, except Adagrad's, which its constructor allocates.
    before = optimizer_state_bytes(opt)
    assert (before > 0) == (name == "adagrad")
    train_step(model, opt, "llm")
    nbytes, count = stepped(params)
    expected = multiple * nbytes + (STEP_COUNTER_BYTES * count if has_step else 0)
    assert optimizer_state_bytes(opt) == expected
    if name in OPTIMIZERS:  # the spec's own law says the same
        assert OPTIMIZERS[name].state_bytes(p for p in params if p.grad is not None) == expected
    train_step(model, opt, "llm")
    assert optimizer_state_bytes(opt) == expected  # state does not grow with steps


@pytest.mark.parametrize("family", ["vit", "modernbert"])
@pytest.mark.parametrize("name", ["adamw", "adagrad"])
def test_optimizer_state_law_other_families(family, name):
    """The state laws hold for the encoder families too (ModernBERT has tied weights)."""
    make_opt, multiple, _ = OPTIMIZER_CASES[name]
    model = build(family)
    params = list(model.parameters())
    opt = make_opt(params)
    train_step(model, opt, family)
    nbytes, count = stepped(params)
    assert nbytes == trainable_parameter_bytes(model)
    assert optimizer_state_bytes(opt) == multiple * nbytes + STEP_COUNTER_BYTES * count


def test_optimizer_state_dedups_shared_storage():
    """Two state entries viewing one storage count once, with the storage's size."""
    p = nn.Parameter(torch.zeros(10))
    opt = torch.optim.SGD([p], lr=0.1)
    buf = torch.zeros(10)
    opt.state[p] = {"a": buf, "b": buf[:5], "n": 3, "none": None}
    assert optimizer_state_bytes(opt) == 40


# -- activations ----------------------------------------------------------------------------


def test_counter_excludes_parameters_and_counts_exact_bytes():
    """A Linear saves its input and weight; only the input is an activation."""
    lin = nn.Linear(16, 8)
    x = torch.randn(4, 16, requires_grad=True)
    with ActivationCounter(lin) as with_model:
        lin(x)
    with ActivationCounter() as without_model:
        lin(x)
    assert with_model.saved_bytes == 4 * 16 * 4
    assert without_model.saved_bytes == 4 * 16 * 4 + 8 * 16 * 4


def test_counter_dedups_storages_and_views():
    """A tensor saved by two ops, and a view of it, cost its storage once."""
    x = torch.randn(64, requires_grad=True)
    with ActivationCounter() as counter:
        x.sin()
        x.cos()
        x[:8].exp()  # exp saves its output, a new storage of 8 floats
    assert counter.saved_tensors >= 3
    assert counter.saved_bytes == counter.total_saved_bytes == 64 * 4 + 8 * 4


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 32), d_in=st.integers(1, 24), d_hidden=st.integers(1, 24))
def test_mlp_activation_law(batch, d_in, d_hidden):
    """Linear-ReLU-Linear saves exactly batch x (d_in + d_hidden) floats."""
    mlp = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, 3))
    with ActivationCounter(mlp) as counter:
        mlp(torch.randn(batch, d_in))
    # Input of the first Linear, and the ReLU output, which the second Linear saves too.
    assert counter.saved_bytes == 4 * batch * (d_in + d_hidden)


def test_checkpointed_region_shows_only_its_input():
    """Inside non-reentrant checkpointing only the region's input is kept."""
    x = torch.randn(32, 16, requires_grad=True)

    def region(t):
        return t.sin().cos().exp().tanh()

    with ActivationCounter() as plain:
        region(x)
    with ActivationCounter() as ckpt:
        checkpoint(region, x, use_reentrant=False)
    assert ckpt.saved_bytes == x.numel() * 4
    assert plain.saved_bytes > ckpt.saved_bytes


def test_freed_activations_are_not_double_counted():
    """Two forward/backward passes in one window peak at one pass; the total counts both."""
    model = build("llm")
    with ActivationCounter(model) as one:
        model(**make_batch("llm", 2)).loss.backward()
    with ActivationCounter(model) as two:
        for _ in range(2):  # gradient accumulation
            model(**make_batch("llm", 2)).loss.backward()
    assert two.saved_bytes == one.saved_bytes
    assert two.total_saved_bytes == 2 * one.total_saved_bytes


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpointing_lowers_activation_bytes(family):
    """Activation checkpointing saves strictly fewer bytes than plain training."""
    model = build(family)
    plain = activation_bytes(model, family, 2)
    enable_checkpointing(model)
    ckpt = activation_bytes(model, family, 2)
    assert 0 < ckpt < plain


@pytest.mark.parametrize("family", FAMILIES)
def test_activation_bytes_repeatable_and_proportional(family):
    """The same micro-batch gives the same bytes; 4x the batch gives at least 3.5x the bytes."""
    model = build(family)
    small = activation_bytes(model, family, 2)
    assert activation_bytes(model, family, 2) == small
    assert activation_bytes(model, family, 8) >= 3.5 * small


def test_measure_step_memory_llama():
    """The breakdown of an AdamW step matches the individual measurements."""
    model = build("llm")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward_only = activation_bytes(model, "llm", 2)
    mem = measure_step_memory(model, opt, lambda: train_step(model, opt, "llm"))
    n_tensors = len(list(model.parameters()))
    assert mem.parameter_bytes == mem.trainable_parameter_bytes == mem.gradient_bytes == parameter_bytes(model)
    assert mem.optimizer_state_bytes == 2 * mem.parameter_bytes + STEP_COUNTER_BYTES * n_tensors
    assert mem.activation_bytes == forward_only


# -- byte counts of known tensors -----------------------------------------------------------


def _module_with(**params: torch.Tensor) -> nn.Module:
    module = nn.Module()
    for name, value in params.items():
        module._parameters[name] = value  # any tensor, as sharding and quantisation libraries register them
    return module


class DTensor(torch.Tensor):
    """Stands for torch.distributed's DTensor, which the meters recognise by name: numel() is the whole tensor's."""


def _sharded(whole: int, local: int) -> torch.Tensor:
    t = torch.zeros(whole).as_subclass(DTensor)
    t._local_tensor = torch.zeros(local)
    return t


def test_a_sharded_tensor_counts_its_local_shard_only():
    """A DTensor of 100 floats whose process holds 25: 100 bytes, as parameter, gradient and optimizer state."""
    shard = _sharded(100, 25)
    assert parameter_bytes(_module_with(w=shard)) == 100
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    opt.state[opt.param_groups[0]["params"][0]] = {"exp_avg": _sharded(100, 25)}
    assert optimizer_state_bytes(opt) == 100


def test_a_local_shard_attribute_on_another_tensor_class_is_not_followed():
    """Only a DTensor's ``_local_tensor`` is its shard; another tensor counts itself."""
    t = torch.zeros(100)
    t._local_tensor = torch.zeros(25)
    assert parameter_bytes(_module_with(w=t)) == 400


def test_a_four_bit_weight_counts_packed_bytes_and_its_constants_and_the_values_it_stands_for():
    """A 16 x 16 weight packed two values a byte (128 B) with absmax (16 floats), code (256 floats) and a
    double-quantisation state (absmax 1 float, code 256 floats, offset 1 float); the offset of the outer state is
    absent (single quantisation has none) and a non-tensor field is not counted."""
    packed = nn.Parameter(torch.zeros(128, dtype=torch.uint8), requires_grad=False)
    inner = SimpleNamespace(absmax=torch.zeros(1), code=torch.zeros(256), offset=torch.zeros(1))
    packed.quant_state = SimpleNamespace(absmax=torch.zeros(16), code=torch.zeros(256), blocksize=64,
                                         shape=torch.Size([16, 16]), state2=inner)
    model = _module_with(w=packed, b=nn.Parameter(torch.zeros(16)))
    assert parameter_bytes(model) == 128 + 4 * (16 + 256) + 4 * (1 + 256 + 1) + 4 * 16
    assert parameter_counts(model) == {"total": 256 + 16, "trainable": 16}


def test_parameter_counts_of_a_partly_frozen_model():
    """Linear(4, 3) frozen, Linear(3, 2) trainable: 23 values, 8 of them trainable; tied ones once."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    model[0].requires_grad_(False)
    assert parameter_counts(model) == {"total": 15 + 8, "trainable": 8}
    assert trainable_parameter_bytes(model) == 4 * 8 and parameter_bytes(model) == 4 * 23
    tied = build("llm")
    assert parameter_counts(tied)["total"] == sum(p.numel() for p in tied.parameters())
    assert parameter_counts(tied)["total"] * 4 == parameter_bytes(tied)


def test_frozen_parameters_hold_no_gradient_bytes():
    """After a backward pass only the trainable Linear holds gradients: 8 floats."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    model[0].requires_grad_(False)
    model(torch.randn(5, 4)).sum().backward()
    assert gradient_bytes(model) == 4 * 8


def test_optimizer_state_counts_every_storage_after_a_shared_one():
    """A shared storage is skipped once seen, and the state that follows it is still counted."""
    p = nn.Parameter(torch.zeros(10))
    opt = torch.optim.SGD([p], lr=0.1)
    buf = torch.zeros(10)
    opt.state[p] = {"a": buf, "b": buf[:5], "c": torch.zeros(3)}
    assert optimizer_state_bytes(opt) == 40 + 12


def test_tensors_without_an_address_are_each_counted():
    """Meta tensors all sit at address 0 and must not merge; a sparse tensor, with no single storage, counts
    itself."""
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    opt.state[p] = {"a": torch.zeros(10, device="meta"), "b": torch.zeros(10, device="meta")}
    assert optimizer_state_bytes(opt) == 80
    opt.state[p] = {"sparse": torch.zeros(10).to_sparse()}
    assert optimizer_state_bytes(opt) == 40


def test_a_counter_reads_zero_before_and_counts_each_save():
    """A counter never entered has counted nothing; sin saves its input once; a meta tensor saved (no address to
    follow) counts its bytes for good."""
    fresh = ActivationCounter()
    assert (fresh.saved_bytes, fresh.total_saved_bytes, fresh.saved_tensors) == (0, 0, 0)
    x = torch.randn(64, requires_grad=True)
    with ActivationCounter() as counter:
        x.sin()
    assert (counter.saved_tensors, counter.saved_bytes) == (1, 64 * 4)
    meta = torch.zeros(10, device="meta", requires_grad=True)
    with ActivationCounter() as on_meta:
        meta.sin()
    assert (on_meta.saved_tensors, on_meta.saved_bytes, on_meta.total_saved_bytes) == (1, 40, 40)


def test_storages_freed_after_their_window_closed_leave_no_trace(monkeypatch):
    """A counter reopened while the last window's saved tensors are alive: their later freeing neither errors nor
    changes the new window's figures."""
    errors = []
    monkeypatch.setattr(sys, "unraisablehook", errors.append)
    x = torch.randn(64, requires_grad=True)
    counter = ActivationCounter()
    with counter:
        y = (x * 2).sin()  # saves x * 2, which only y's graph holds
    with counter:
        z = x[:8].exp()  # saves its output, 8 floats
    del y
    gc.collect()
    assert (counter.saved_bytes, counter.total_saved_bytes) == (8 * 4, 8 * 4)
    del z
    gc.collect()
    assert not errors


def _mlp_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 16)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    return model, opt, step


def test_measure_step_memory_tracks_the_live_peak_by_default():
    """The peak holds at least parameters, gradients and optimizer state at once, all on the CPU; untracked, none."""
    model, opt, step = _mlp_step()
    step()
    mem = measure_step_memory(model, opt, step)
    assert mem.peak_bytes >= mem.parameter_bytes + mem.gradient_bytes + mem.optimizer_state_bytes
    assert mem.peak_by_device == {"cpu": mem.peak_bytes}
    untracked = measure_step_memory(model, opt, step, track_peak=False)
    assert (untracked.peak_bytes, untracked.peak_by_device) == (None, None)
    assert untracked.activation_bytes == mem.activation_bytes > 0


def test_last_steps_gradients_are_not_resident_for_the_measured_step():
    """Gradients left by the previous step die at this step's zero_grad: the peak is the same as with none left."""
    model, opt, step = _mlp_step()
    step()
    opt.zero_grad(set_to_none=True)
    clean = measure_step_memory(model, opt, step).peak_bytes
    step()
    assert gradient_bytes(model) > 0
    assert measure_step_memory(model, opt, step).peak_bytes == clean
