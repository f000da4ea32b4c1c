"""The laws of the fine-tuning methods, on the real tiny backbones.

- LoRA adds r·(in + out) trainable values per adapted linear and nothing else trains but the head.
- Frozen parameters get no gradient and do not move in a step.
- AdamW keeps two state tensors per *trainable* parameter, so a method's state is 2 × its trainable bytes.
- BitFit trains exactly the biases and the head.
- QLoRA stores the adapted linears in 4-bit: their weight bytes drop by more than 3.5×.
- AdaLoRA's rank budget shrinks from its initial to its target rank over the steps.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from gradeff.axes.data import make_dataset
from gradeff.axes.methods import METHODS, apply_method, within
from gradeff.axes.methods.adalora import rank_budget
from gradeff.axes.methods.bitfit import is_bias
from gradeff.axes.models import MODELS, build_model
from gradeff.meters import optimizer_state_bytes, parameter_bytes, parameter_counts
from gradeff.studies.grid import GRIDS
from gradeff.studies.hparams import hparams_for, method_hparams_for

BACKBONES = list(GRIDS["peft"].models)
HEAD = ("classifier",)


def _setup(key: str, method: str, **overrides):
    hp = hparams_for(key, "tiny")
    torch.manual_seed(0)
    model = build_model(key, "tiny", num_labels=hp.num_classes)
    method_hp = method_hparams_for(method, key, "tiny")
    if overrides:
        from dataclasses import replace

        method_hp = replace(method_hp, **overrides)
    adapted = apply_method(method, model, method_hp, total_steps=20, head=MODELS[key].head)
    data = make_dataset(MODELS[key].task, hp, seed=0)
    return adapted, data.batch(torch.arange(4)), method_hp


def _targeted_linears(model: nn.Module, targets) -> list[nn.Linear]:
    return [m for name, m in model.named_modules()
            if type(m) is nn.Linear and name.rsplit(".", 1)[-1] in targets and not within(name, HEAD)]


def _step(model, batch, lr=1e-2):
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    optimizer.zero_grad(set_to_none=True)
    model(**batch).loss.backward()
    optimizer.step()
    return optimizer


@pytest.mark.parametrize("key", BACKBONES)
def test_lora_trains_r_times_in_plus_out_per_target_and_the_head(key):
    """Trainable values = Σ r·(in + out) over the targeted linears + the head's weight and bias."""
    torch.manual_seed(0)
    hp = hparams_for(key, "tiny")
    plain = build_model(key, "tiny", num_labels=hp.num_classes)
    method_hp = method_hparams_for("lora", key, "tiny")
    linears = _targeted_linears(plain, method_hp.target_modules)
    assert linears, f"no LoRA target of {method_hp.target_modules} in {key}"
    expected = sum(method_hp.lora_r * (m.in_features + m.out_features) for m in linears)
    expected += sum(p.numel() for p in plain.classifier.parameters())
    adapted, _, _ = _setup(key, "lora")
    assert parameter_counts(adapted.model)["trainable"] == expected


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rank=st.integers(min_value=1, max_value=16))
def test_lora_count_follows_the_rank(rank):
    """For any rank r, LoRA's trainable count grows by exactly Σ (in + out) per unit of r."""
    counts = [parameter_counts(_setup("vit_s", "lora", lora_r=r)[0].model)["trainable"] for r in (rank, rank + 1)]
    torch.manual_seed(0)
    plain = build_model("vit_s", "tiny")
    per_rank = sum(m.in_features + m.out_features
                   for m in _targeted_linears(plain, method_hparams_for("lora", "vit_s", "tiny").target_modules))
    assert counts[1] - counts[0] == per_rank


@pytest.mark.parametrize("method", ["lora", "adalora", "qlora", "bitfit"])
@pytest.mark.parametrize("key", BACKBONES)
def test_frozen_parameters_get_no_gradient_and_do_not_move(key, method):
    """After a step, every frozen parameter has no gradient and is bit-identical; trained ones moved."""
    adapted, batch, _ = _setup(key, method)
    model = adapted.model
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert frozen and trained
    _step(model, batch)
    params = dict(model.named_parameters())
    assert all(params[n].grad is None and torch.equal(params[n], before) for n, before in frozen.items())
    assert any(not torch.equal(params[n], before) for n, before in trained.items())


@pytest.mark.parametrize("method", [key for key, spec in METHODS.items() if spec.trains])
def test_adamw_state_is_two_tensors_per_trainable_parameter(method):
    """AdamW's state bytes = 2 × the trainable parameters' bytes (+ one step counter per tensor)."""
    adapted, batch, _ = _setup("vit_s", method)
    optimizer = _step(adapted.model, batch)
    trainable = [p for p in adapted.model.parameters() if p.requires_grad]
    counters = sum(optimizer.state[p]["step"].numel() * optimizer.state[p]["step"].element_size() for p in trainable)
    assert optimizer_state_bytes(optimizer) == 2 * sum(p.numel() * p.element_size() for p in trainable) + counters


@pytest.mark.parametrize("key", BACKBONES)
def test_bitfit_trains_exactly_the_biases_and_the_head(key):
    """BitFit leaves trainable exactly the parameters named ``*.bias`` and those of the head."""
    adapted, _, _ = _setup(key, "bitfit")
    for name, p in adapted.model.named_parameters():
        assert p.requires_grad == (is_bias(name) or within(name, HEAD)), name


def test_bitfit_refuses_a_model_without_biases():
    """A bias-free model (Llama) leaves BitFit nothing to train: an error, not a head-only run."""
    torch.manual_seed(0)
    model = build_model("llm", "tiny")
    with pytest.raises(ValueError, match="no bias"):
        apply_method("bitfit", model, method_hparams_for("bitfit", "llm", "tiny"), total_steps=5)


@pytest.mark.parametrize("key", [key for key, spec in MODELS.items() if not spec.unavailable])
def test_has_biases_flag_matches_the_built_model(key):
    """The spec's has_biases (which decides BitFit skips before any cell runs) is true to the model."""
    torch.manual_seed(0)
    model = build_model(key, "tiny")
    assert MODELS[key].has_biases == any(is_bias(n) for n, _ in model.named_parameters())


@pytest.mark.parametrize("key", BACKBONES)
def test_qlora_stores_targets_in_4bit_and_cuts_their_bytes(key):
    """Every targeted linear becomes Linear4bit (the head stays full precision); their weight bytes drop ≥ 3.5×."""
    import bitsandbytes as bnb

    torch.manual_seed(0)
    plain = build_model(key, "tiny", num_labels=hparams_for(key, "tiny").num_classes)
    targets = method_hparams_for("qlora", key, "tiny").target_modules
    before = sum(parameter_bytes(m) - (m.bias.numel() * 4 if m.bias is not None else 0)
                 for m in _targeted_linears(plain, targets))
    adapted, _, _ = _setup(key, "qlora")
    base = [m.base_layer for name, m in adapted.model.named_modules()
            if hasattr(m, "base_layer") and name.rsplit(".", 1)[-1] in targets]
    assert base and all(isinstance(m, bnb.nn.Linear4bit) for m in base)
    after = sum(parameter_bytes(m) - (m.bias.numel() * 4 if m.bias is not None else 0) for m in base)
    assert before / after >= 3.5
    head = adapted.model.base_model.model.classifier
    assert all(type(m) is nn.Linear for m in head.modules_to_save.values())


def test_adalora_budget_shrinks_to_its_target():
    """AdaLoRA starts with init_r triplets per module and ends at about target_r per module."""
    adapted, batch, method_hp = _setup("vit_s", "adalora")
    model = adapted.model
    modules = len({n.rsplit(".lora_E", 1)[0] for n, _ in model.named_parameters() if ".lora_E." in n})
    assert rank_budget(model) == method_hp.adalora_init_r * modules
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    budgets = []
    for step in range(20):
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()
        adapted.after_step(step)
        budgets.append(rank_budget(model))
    assert budgets[-1] < method_hp.adalora_init_r * modules
    assert budgets[-1] <= method_hp.adalora_target_r * modules
    assert all(later <= earlier for earlier, later in zip(budgets[3:], budgets[4:]))
