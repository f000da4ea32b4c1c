"""The optimizers' memory laws against the state they really keep, and the memory-saving ones at work.

Every spec of the registry predicts its state bytes (``OptimizerSpec.state_bytes``); here the
prediction is held against :func:`gradeff.meters.optimizer_state_bytes` after real steps on real
tiny models, and the three memory-saving optimizers (Adafactor, 8-bit AdamW, SGD with momentum)
are checked piece by piece and shown to train.
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from gradeff.axes.data import make_dataset
from gradeff.axes.models import MODELS, build_model
from gradeff.axes.optim import BNB_BLOCK_SIZE, BNB_MIN_8BIT_SIZE, OPTIMIZERS, STATE_LAWS, OptimizerSpec, build_optimizer
from gradeff.meters import optimizer_state_bytes, trainable_parameter_bytes
from gradeff.studies.grid import GRIDS
from gradeff.studies.hparams import hparams_for

MAIN_SIX = ["sgd", "adam", "adamw", "adagrad", "adadelta", "cgd"]
MEMORY_SAVERS = ["adafactor", "adamw8bit", "sgdm"]
FAMILIES = ("llm", "vit_s")
STEP = 4  # torch's scalar step counter: a float32 tensor
QMAPS = 2 * 256 * 4  # bitsandbytes' two 256-entry float32 quantisation maps, shared by all tensors


@functools.cache
def _batch(family: str) -> dict[str, torch.Tensor]:
    hp = hparams_for(family, "tiny")
    return make_dataset(MODELS[family].task, hp, seed=0).batch(torch.arange(4))


def build(family: str) -> nn.Module:
    torch.manual_seed(0)
    return build_model(family, "tiny", num_labels=hparams_for(family, "tiny").num_classes)


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def grid_optimizer(key: str, family: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer as a cell of ``family`` builds it: the registry's arguments, the model's lr."""
    return build_optimizer(key, params, hparams_for(family, "tiny").lr)


def stepped(key: str, family: str) -> tuple[nn.Module, list[nn.Parameter], torch.optim.Optimizer]:
    """A tiny ``family`` model, its trainable parameters and the grid's ``key`` optimizer after one step."""
    model = build(family)
    params = trainable(model)
    opt = grid_optimizer(key, family, params)
    step(model, opt, _batch(family))
    return model, params, opt


def step(model: nn.Module, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> float:
    """One step through a closure, as the training loop takes it; the loss before the step."""

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        return loss

    return float(opt.step(closure).detach())


# -- the registry ---------------------------------------------------------------------------


def test_main_papers_six_stay_first_and_remain_the_main_grid():
    """The paper's six open the registry and are the main grid's optimizers; the new three follow."""
    assert list(OPTIMIZERS)[:6] == MAIN_SIX
    assert list(OPTIMIZERS)[6:] == MEMORY_SAVERS
    assert list(GRIDS["main"].optimizers) == MAIN_SIX


def test_memory_savers_are_built_as_specified():
    """Adafactor with torch's defaults, AdamW8bit with AdamW's weight decay, SGD with momentum 0.9."""
    p = [nn.Parameter(torch.zeros(3))]
    assert type(build_optimizer("adafactor", p, 1e-3)) is torch.optim.Adafactor
    bnb_opt = build_optimizer("adamw8bit", p, 1e-3)
    assert type(bnb_opt).__module__.startswith("bitsandbytes") and type(bnb_opt).__name__ == "AdamW8bit"
    assert bnb_opt.param_groups[0]["weight_decay"] == build_optimizer("adamw", p, 1e-3).param_groups[0]["weight_decay"]
    assert bnb_opt.args.min_8bit_size == BNB_MIN_8BIT_SIZE
    sgdm = build_optimizer("sgdm", p, 1e-3)
    assert type(sgdm) is torch.optim.SGD and sgdm.param_groups[0]["momentum"] == 0.9


def test_registry_imports_neither_torch_nor_bitsandbytes():
    """Reading the registry and its laws' names is free: torch and bitsandbytes load only when built."""
    code = ("import sys\nfrom gradeff.axes.optim import OPTIMIZERS\n"
            "assert [s.state_law for s in OPTIMIZERS.values()]\n"
            "print('IMPORTED', sorted(m for m in ('torch', 'bitsandbytes') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "IMPORTED []" in out


def test_specs_name_a_known_law_and_dense_laws_a_multiple():
    """``state_per_param`` is an integer exactly for the dense law; an unknown law is refused."""
    for spec in OPTIMIZERS.values():
        assert spec.state_law in STATE_LAWS
        assert isinstance(spec.state_per_param, int) == (spec.state_law == "dense")
    assert [OPTIMIZERS[k].state_per_param for k in MAIN_SIX] == [0, 2, 2, 1, 2, 2]
    with pytest.raises(ValueError, match="unknown state law"):
        OptimizerSpec(key="x", name="X", target="torch.optim:SGD", state_law="nope")
    with pytest.raises(ValueError, match="state_per_param"):
        OptimizerSpec(key="x", name="X", target="torch.optim:Adafactor", state_law="adafactor", state_per_param=1)


# -- every law against the measured state ---------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("key", list(OPTIMIZERS))
def test_state_law_is_the_measured_state(key, family):
    """After a closure step, optimizer_state_bytes equals the spec's law, and a second step keeps it."""
    model, params, opt = stepped(key, family)
    assert all(p.grad is not None for p in params)  # the law is for stepped parameters
    predicted = OPTIMIZERS[key].state_bytes(params)
    assert optimizer_state_bytes(opt) == predicted
    step(model, opt, _batch(family))
    assert optimizer_state_bytes(opt) == predicted


@pytest.mark.parametrize("key", list(OPTIMIZERS))
def test_state_law_reads_only_shapes_and_dtypes(key):
    """The law of a model built on the meta device is the law of the real one (no memory needed)."""
    real = trainable(build("llm"))
    meta = trainable(build_model("llm", "tiny", device="meta"))
    assert OPTIMIZERS[key].state_bytes(meta) == OPTIMIZERS[key].state_bytes(real) == \
        OPTIMIZERS[key].state_bytes(iter(real))


# -- Adafactor: a row and a column per matrix ---------------------------------------------


def test_adafactor_keeps_a_row_and_a_column_per_matrix_and_a_vector_per_vector():
    """(m, n) weight: m + n values; vector: its size; (..., m, n): per leading index; + a float32 step each."""
    shapes = {"matrix": (48, 80), "vector": (48,), "conv": (4, 3, 5, 7), "scalar": ()}
    params = {name: nn.Parameter(torch.randn(shape)) for name, shape in shapes.items()}
    wide = nn.Parameter(torch.randn(6, 10, dtype=torch.float64))  # state follows the parameter's dtype
    opt = build_optimizer("adafactor", [*params.values(), wide], 1e-2)

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = sum((p.double() ** 2).sum() for p in [*params.values(), wide])
        loss.backward()
        return loss

    opt.step(closure)
    matrix, vector, conv, scalar = (opt.state[params[n]] for n in shapes)
    assert matrix["row_var"].shape == (48, 1) and matrix["col_var"].shape == (1, 80)
    assert "variance" not in matrix and "exp_avg" not in matrix  # no first moment
    assert vector["variance"].shape == (48,) and "row_var" not in vector
    assert conv["row_var"].shape == (4, 3, 5, 1) and conv["col_var"].shape == (4, 3, 1, 7)
    assert scalar["variance"].shape == ()
    assert all(s["step"].dtype == torch.float32 and s["step"].numel() == 1 for s in opt.state.values())
    expected = {"matrix": 4 * (48 + 80), "vector": 4 * 48, "conv": 4 * (4 * 3 * 5 + 4 * 3 * 7), "scalar": 4}
    for name, p in params.items():
        measured = sum(t.numel() * t.element_size() for t in opt.state[p].values())
        assert measured == expected[name] + STEP == OPTIMIZERS["adafactor"].state_bytes([p])
    assert OPTIMIZERS["adafactor"].state_bytes([wide]) == 8 * (6 + 10) + STEP
    assert optimizer_state_bytes(opt) == OPTIMIZERS["adafactor"].state_bytes([*params.values(), wide])


@pytest.mark.parametrize("family", FAMILIES)
def test_adafactor_state_of_a_tiny_model_is_rows_plus_columns(family):
    """Each (m, n) weight of a tiny model holds m + n values; the model's state is a few % of AdamW's."""
    model, params, opt = stepped("adafactor", family)
    for p in params:
        state = opt.state[p]
        if p.dim() == 2:
            m, n = p.shape
            assert state["row_var"].numel() + state["col_var"].numel() == m + n
        elif p.dim() == 1:
            assert state["variance"].numel() == p.numel()
    assert optimizer_state_bytes(opt) < 0.1 * 2 * trainable_parameter_bytes(model)


# -- SGD with momentum: one buffer ----------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_sgdm_keeps_one_momentum_buffer_per_parameter(family):
    """State = 1 × trainable parameter bytes exactly: a buffer shaped like each parameter, no step."""
    model, params, opt = stepped("sgdm", family)
    assert all(set(opt.state[p]) == {"momentum_buffer"} and opt.state[p]["momentum_buffer"].shape == p.shape
               for p in params)
    assert optimizer_state_bytes(opt) == trainable_parameter_bytes(model) == OPTIMIZERS["sgdm"].state_bytes(params)


# -- 8-bit AdamW: uint8 moments, float32 block scales, 32-bit small tensors -----------------


def test_adamw8bit_quantises_large_tensors_and_keeps_small_ones_in_32_bit():
    """On the tiny decoder, tensors under min_8bit_size keep float32 m and v; the rest uint8 + absmax per 256."""
    model = build("llm")
    params = trainable(model)
    opt = grid_optimizer("adamw8bit", "llm", params)
    step(model, opt, _batch("llm"))
    small = [p for p in params if p.numel() < BNB_MIN_8BIT_SIZE]
    large = [p for p in params if p.numel() >= BNB_MIN_8BIT_SIZE]
    assert small and large  # the tiny model exercises both branches
    for p in small:
        state = opt.state[p]
        assert state["state1"].dtype == state["state2"].dtype == torch.float32
        assert state["state1"].shape == state["state2"].shape == p.shape
    for p in large:
        state = opt.state[p]
        assert state["state1"].dtype == state["state2"].dtype == torch.uint8
        assert state["state1"].numel() == state["state2"].numel() == p.numel()
        blocks = math.ceil(p.numel() / BNB_BLOCK_SIZE)
        assert state["absmax1"].shape == state["absmax2"].shape == (blocks,)
        assert state["absmax1"].dtype == torch.float32
        assert state["qmap1"].numel() == state["qmap2"].numel() == 256
    # One pair of quantisation maps for the whole optimizer, counted once.
    assert len({opt.state[p]["qmap1"].data_ptr() for p in large}) == 1
    expected = (8 * sum(p.numel() for p in small)
                + sum(2 * p.numel() + 8 * math.ceil(p.numel() / BNB_BLOCK_SIZE) for p in large) + QMAPS)
    assert optimizer_state_bytes(opt) == expected == OPTIMIZERS["adamw8bit"].state_bytes(params)


def _state_after_a_step(key: str, module: nn.Module, batch: dict[str, torch.Tensor] | torch.Tensor) -> int:
    params = trainable(module)
    opt = build_optimizer(key, params, 1e-3)

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = module(**batch).loss if isinstance(batch, dict) else module(batch).pow(2).mean()
        loss.backward()
        return loss

    opt.step(closure)
    measured = optimizer_state_bytes(opt)
    assert measured == OPTIMIZERS[key].state_bytes(params)
    return measured


def test_adamw8bit_state_is_about_a_quarter_of_adamw_on_a_large_linear():
    """nn.Linear(1024, 1024): 8-bit state = 2n + 8⌈n/256⌉ + maps + 32-bit bias, ≈ 3.9× below AdamW's 8n."""
    n = 1024 * 1024
    torch.manual_seed(0)
    linear = nn.Linear(1024, 1024)
    x = torch.randn(4, 1024)
    eight_bit = _state_after_a_step("adamw8bit", linear, x)
    assert eight_bit == 2 * n + 8 * (n // 256) + QMAPS + 8 * 1024
    full = _state_after_a_step("adamw", linear, x)
    assert full == 8 * (n + 1024) + 2 * STEP
    assert 3.9 < full / eight_bit < 4


def test_adamw8bit_state_is_about_a_quarter_of_adamw_on_a_small_profile_model():
    """The small-profile decoder (3M parameters, nearly all in quantised tensors): ratio above 3.9."""
    torch.manual_seed(0)
    model = build_model("llm", "small")
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    batch = {"input_ids": ids, "labels": ids}
    eight_bit = _state_after_a_step("adamw8bit", model, batch)
    full = _state_after_a_step("adamw", model, batch)
    assert 3.9 < full / eight_bit < 4


# -- they train -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("key", MEMORY_SAVERS)
def test_memory_savers_train_a_tiny_model(key, family):
    """Stepped through a closure at the cell's learning rate, the loss of a fixed batch goes down."""
    model = build(family)
    opt = grid_optimizer(key, family, trainable(model))
    batch = _batch(family)
    losses = [step(model, opt, batch) for _ in range(6)]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[1] < losses[0]


# -- fused and multi-tensor kernels (--gradeff-fused) ----------------------------------------

_FUSED = {"sgd": "fused", "adam": "fused", "adamw": "fused", "adagrad": "fused", "sgdm": "fused",
          "adadelta": "foreach", "adafactor": "foreach", "cgd": "default"}


@pytest.mark.parametrize("key", sorted(_FUSED))
def test_fused_kernels_keep_the_state_law_and_the_first_step(key):
    """With fused=True the optimizer steps with torch's fused kernel where it has one, else the multi-tensor path
    (CG has neither); its state is the same law's, and its first step lands where the default loop's does (the
    same update, up to float rounding: a fused kernel orders its arithmetic its own way)."""
    from gradeff.axes.optim import optimizer_kernel

    family = "llm"
    default_model, fused_model = build(family), build(family)
    default = grid_optimizer(key, family, trainable(default_model))
    fused = build_optimizer(key, trainable(fused_model), hparams_for(family, "tiny").lr, fused=True)
    assert (optimizer_kernel(default), optimizer_kernel(fused)) == ("default", _FUSED[key])
    batch = _batch(family)
    assert step(default_model, default, batch) == step(fused_model, fused, batch)  # same weights before the step
    assert optimizer_state_bytes(fused) == OPTIMIZERS[key].state_bytes(trainable(fused_model))
    for a, b in zip(default_model.parameters(), fused_model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert optimizer_kernel(None) is None
