"""The PEFT study's measurements: QLoRA's 4-bit MACs, the deployed model's parameters, passes that leave no trace,
and a budget cell with no block checkpointed training bit for bit like the standard cell."""

import dataclasses

import pytest
import torch

from gradeff.axes.data import make_dataset
from gradeff.axes.methods import apply_method
from gradeff.axes.models import MODELS, build_model
from gradeff.cell.config import RunConfig
from gradeff.cell.inference import count_macs, deployed_parameter_counts
from gradeff.cell.run import run_cell
from gradeff.meters import parameter_counts
from gradeff.meters.flops import count_step_flops, counted, formulas
from gradeff.meters.untouched import untouched
from gradeff.studies.grid import Cell
from gradeff.studies.hparams import hparams_for, method_hparams_for


def _adapted(key: str, method: str):
    hp = hparams_for(key, "tiny")
    torch.manual_seed(0)
    model = build_model(key, "tiny", num_labels=hp.num_classes)
    adapted = apply_method(method, model, method_hparams_for(method, key, "tiny"), total_steps=20,
                           head=MODELS[key].head).model
    batch = make_dataset(MODELS[key].task, hp, seed=0).batch(torch.arange(2))
    return adapted, batch


@pytest.mark.parametrize("key", ["vit_s", "tinyvit"])
def test_qlora_counts_the_macs_of_its_4bit_matmuls(key):
    """QLoRA's MACs equal LoRA's within 1 %: the 4-bit products count as the dense products they compute."""
    lora, batch = _adapted(key, "lora")
    qlora, _ = _adapted(key, "qlora")
    inputs = {"pixel_values": batch["pixel_values"][:1]}
    with torch.no_grad():
        lora_macs, _ = count_macs(lora.eval(), inputs)
        qlora_macs, by_op = count_macs(qlora.eval(), inputs)
    assert any("gemm_4bit" in op or "gemv_4bit" in op for op in by_op), by_op
    assert qlora_macs == pytest.approx(lora_macs, rel=0.01)
    # Training FLOPs too: the forward's 4-bit products, the backward's dequantised matmul.
    lora_step = count_step_flops(lora.train(), batch)
    qlora_step = count_step_flops(qlora.train(), batch)
    assert qlora_step.flops == pytest.approx(lora_step.flops, rel=0.02)


def test_the_4bit_formula_is_the_dense_product():
    """2·M·N·K for A (…, K) times an (N, K) weight, whatever A's leading dimensions."""
    import bitsandbytes  # noqa: F401  (registers its ops)

    formula = formulas()[torch.ops.bitsandbytes.gemm_4bit]
    assert formula((2, 3, 8), (64, 1), [16, 8]) == 2 * 6 * 16 * 8
    assert torch.ops.bitsandbytes.gemv_4bit in formulas()


def test_the_deployed_model_holds_one_head():
    """peft's frozen copy of a retrained head is not part of what a user deploys; adapters are."""
    lora, _ = _adapted("vit_s", "lora")
    counts, deployed = parameter_counts(lora), deployed_parameter_counts(lora)
    head = MODELS["vit_s"].head[0]
    copy = sum(p.numel() for name, p in lora.named_parameters() if f"{head}.original_module" in name)
    assert copy > 0 and deployed["total"] == counts["total"] - copy
    assert deployed["trainable"] == counts["trainable"]
    full, _ = _adapted("vit_s", "full")
    assert deployed_parameter_counts(full) == parameter_counts(full)


def _batchnorm_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Dropout(0.5),
                               torch.nn.Flatten(), torch.nn.LazyLinear(2))


def test_untouched_restores_every_buffer_and_the_rng_bit_for_bit():
    """A training-mode pass inside: BatchNorm's statistics and counter, and the next random draw, as before."""
    model = _batchnorm_model()
    images = torch.randn(8, 3, 6, 6)
    model(images)  # materialise the lazy layer
    before = {name: b.clone() for name, b in model.named_buffers()}
    state = torch.get_rng_state()
    with untouched(model):
        model(images).sum().backward()
    assert all(torch.equal(before[name], b) for name, b in model.named_buffers())
    assert torch.equal(torch.get_rng_state(), state)
    assert all(p.grad is None for p in model.parameters())
    # Without it, the same pass moves them: the restore is what the test sees.
    model(images).sum().backward()
    assert not torch.equal(before["1.running_mean"], model[1].running_mean)
    assert not torch.equal(torch.get_rng_state(), state)


def test_counting_flops_leaves_no_trace():
    model = _batchnorm_model()
    images = torch.randn(8, 3, 6, 6)
    model(images)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, pixel_values):
            return type("Out", (), {"loss": self.net(pixel_values).sum()})()

    before = model[1].running_mean.clone()
    counted_flops = count_step_flops(Wrapped(), {"pixel_values": images})
    assert counted_flops.flops > 0 and torch.equal(before, model[1].running_mean)
    assert counted(lambda: model(images)) > 0


def test_a_budget_cell_with_no_block_checkpointed_trains_as_the_standard_cell(tmp_path, monkeypatch):
    """A BatchNorm backbone (TinyViT; MambaVision's BatchNorms are the same layer): the budget strategy's measuring
    pass and the warm-up leave the statistics and the RNG alone, so with 0 blocks checkpointed every loss, test loss
    and accuracy is the standard cell's, bit for bit (the test evaluation reads the running statistics)."""
    model = "tinyvit"
    monkeypatch.setenv("GRADEFF_CACHE", str(tmp_path))
    # Seeded random weights saved as a local folder: no pretraining to wait for, the same start for both cells.
    torch.manual_seed(0)
    build_model(model, "tiny", num_labels=hparams_for(model, "tiny").num_classes).save_pretrained(tmp_path / model)
    config = RunConfig(profile="tiny", seed=0, epochs=1, device="cpu", session="t", memory_budget=10**12,
                       weights=((model, str(tmp_path / model)),))

    def cell(strategy):
        return run_cell(Cell(model, "adamw", strategy, method="full", dataset="cifar100", grid="peft"), config)

    standard, budget = cell("standard"), cell("budget")
    assert standard.status == budget.status == "ok", (standard.detail, budget.detail)
    assert budget.plan["checkpointed_layers"] == 0
    for field in ("loss", "heldout_loss", "heldout_accuracy"):
        assert [getattr(e, field) for e in budget.epochs] == [getattr(e, field) for e in standard.epochs], field
    # The same model deploys the same: its inference cost is the standard cell's, measured there only.
    assert standard.inference["throughput_images"] > 0 and not budget.inference


def test_a_fine_tuning_cell_keeps_its_pretrained_batch_statistics(tmp_path):
    """A BatchNorm backbone fine-tuned from weights: its BatchNorms stay in eval mode through training (the running
    statistics the weights came with, unchanged after an epoch), their scale and shift train; the same backbone from
    random weights normalises with its batches' statistics and moves them."""
    from gradeff.axes.models.weights import StartingWeights
    from gradeff.cell.build import prepare_state
    from gradeff.cell.loop import train_epoch
    from gradeff.cell.plan import plan_cell

    hp = dataclasses.replace(hparams_for("tinyvit", "tiny", dataset="cifar100"), train_samples=128)
    torch.manual_seed(0)
    build_model("tinyvit", "tiny", num_labels=hp.num_classes).save_pretrained(tmp_path / "w")
    cell, config = Cell("tinyvit", "adamw", "standard", dataset="cifar100", grid="peft"), RunConfig(seed=0)
    given = StartingWeights(source="local", path=str(tmp_path / "w"), format="save_pretrained")

    def statistics(state):
        return [m.running_mean.clone() for m in state.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]

    plan = plan_cell(cell, config).sized(hp)
    fine_tuned, scratch = (prepare_state(plan, torch.device("cpu"), weights=w) for w in (given, None))
    for state, frozen in ((fine_tuned, True), (scratch, False)):
        before = statistics(state)
        state.model.train()
        train_epoch(state)
        after = statistics(state)
        assert all(torch.equal(a, b) for a, b in zip(before, after)) is frozen
    norms = [m for m in fine_tuned.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and fine_tuned.model.training and not any(m.training for m in norms)
    assert all(m.weight.grad is not None and m.weight.grad.abs().sum() > 0 for m in norms)
