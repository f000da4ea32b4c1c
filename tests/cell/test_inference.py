"""Inference cost: MACs against analytic counts, the figures' structure and units, memory and energy, mode restored."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from gradeff.axes.data.dataset import Dataset
from gradeff.axes.models import build_model
from gradeff.cell.inference import InferenceCost, count_macs, measure_inference
from gradeff.meters import EnergyMeter, measure_step_memory, parameter_bytes

CPU = torch.device("cpu")
BATCH = 16
SAMPLES = 40  # two full batches and a partial one


def image_data(num_samples: int = SAMPLES, *, image_size: int = 32, classes: int = 100) -> Dataset:
    generator = torch.Generator().manual_seed(0)
    return Dataset(task="t", tensors={"pixel_values": torch.randn(num_samples, 3, image_size, image_size,
                                                                  generator=generator),
                                      "labels": torch.randint(classes, (num_samples,), generator=generator)},
                   targets=torch.ones(num_samples, dtype=torch.long), loss_floor=None, floor_note="")


class LinearClassifier(nn.Module):
    """``nn.Linear`` behind a transformers-style call: keyword inputs in, ``.logits`` out, no ``labels``."""

    def __init__(self, features: int, classes: int):
        super().__init__()
        self.linear = nn.Linear(features, classes)

    def forward(self, x):
        return SimpleNamespace(logits=self.linear(x))


def linear_data(features: int, num_samples: int = 10) -> Dataset:
    return Dataset(task="t", tensors={"x": torch.randn(num_samples, features), "labels": torch.zeros(num_samples)},
                   targets=torch.ones(num_samples, dtype=torch.long), loss_floor=None, floor_note="")


def tiny_vit() -> nn.Module:
    torch.manual_seed(0)
    return build_model("vit_s", "tiny")


def vit_macs(config) -> dict[str, int]:
    """Multiply-accumulates of one image through a ViT classifier, from its configuration alone."""
    h, mlp = config.hidden_size, config.intermediate_size
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    patch, channels = config.patch_size, config.num_channels
    patches = (config.image_size // patch) ** 2
    tokens = patches + 1  # the [CLS] token
    head_dim = h // heads
    return {
        "patch_embedding": patches * (channels * patch * patch) * h,  # the stride-p convolution, per patch
        "linear": layers * (4 * tokens * h * h  # q, k, v, o projections
                            + 2 * tokens * h * mlp)  # fc1, fc2
        + h * config.num_labels,  # the classifier reads the [CLS] token only
        "attention": layers * heads * 2 * tokens * tokens * head_dim,  # QKᵀ and AV
    }


@pytest.fixture(scope="module")
def vit_cost() -> tuple[nn.Module, Dataset, InferenceCost]:
    model, data = tiny_vit(), image_data()
    return model, data, measure_inference(model, data, batch_size=BATCH, device=CPU, latency_samples=8)


# -- MACs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("features", "classes"), [(7, 3), (64, 100)])
def test_macs_of_a_linear_layer_are_in_times_out(features, classes):
    """One input row through ``nn.Linear(in, out)``: in·out MACs; the bias adds are not MACs."""
    with torch.no_grad():
        macs, by_op = count_macs(nn.Linear(features, classes), {"input": torch.randn(1, features)})
    assert macs == features * classes
    assert by_op == {"aten.addmm": features * classes}
    cost = measure_inference(LinearClassifier(features, classes), linear_data(features), batch_size=4, device=CPU,
                             latency_samples=2)
    assert cost.macs_per_image == features * classes
    assert cost.parameters == features * classes + classes


def test_macs_of_tiny_vit_s_equal_the_analytic_count():
    """Patch embedding + q/k/v/o/MLP matmuls + attention matmuls + head, counted exactly, per op."""
    model = tiny_vit().eval()
    assert model.config._attn_implementation == "sdpa"
    expected = vit_macs(model.config)
    image = {"pixel_values": torch.randn(1, 3, 32, 32)}
    with torch.inference_mode():
        macs, by_op = count_macs(model, image)
    assert expected == {"patch_embedding": 196_608, "linear": 3_348_736, "attention": 147_968}
    assert macs == sum(expected.values()) == 3_693_312
    assert by_op == {"aten.convolution": expected["patch_embedding"], "aten.addmm": expected["linear"],
                     "aten._scaled_dot_product_flash_attention_for_cpu": expected["attention"]}


def test_cpu_attention_formula_agrees_with_eager_attention():
    """The SDPA kernel's count equals the bmm count of the same model with eager (matmul) attention."""
    model = tiny_vit().eval()
    image = {"pixel_values": torch.randn(1, 3, 32, 32)}
    with torch.no_grad():
        sdpa, _ = count_macs(model, image)
        model.set_attn_implementation("eager")
        eager, by_op = count_macs(model, image)
    assert eager == sdpa
    assert by_op["aten.bmm"] == vit_macs(model.config)["attention"]


def test_torch_alone_misses_cpu_attention():
    """PyTorch registers no formula for the CPU SDPA kernel: a bare FlopCounterMode leaves attention out."""
    model = tiny_vit().eval()
    expected = vit_macs(model.config)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(pixel_values=torch.randn(1, 3, 32, 32))
    if torch.ops.aten._scaled_dot_product_flash_attention_for_cpu in flop_registry:
        assert counter.get_total_flops() // 2 == sum(expected.values())
    else:
        assert counter.get_total_flops() // 2 == expected["patch_embedding"] + expected["linear"]


# -- the figures ----------------------------------------------------------------------------


def test_structure_and_units(vit_cost):
    """Positive times, consistent rates and counts; no timing relation between batch sizes is asserted."""
    model, data, cost = vit_cost
    assert cost.grad_mode == "inference_mode"
    assert cost.latency_samples == 8 and cost.batch_size == BATCH
    assert 0 < cost.latency_s <= cost.latency_p90_s < 10
    assert cost.throughput_images == len(data)
    assert cost.throughput_seconds > 0
    assert cost.images_per_s == pytest.approx(cost.throughput_images / cost.throughput_seconds)
    assert cost.parameters == sum(p.numel() for p in model.parameters())
    assert cost.macs_per_image == sum(vit_macs(model.config).values())
    assert cost.allocator_peak_bytes is None  # no allocator to read on CPU
    assert cost.peak_by_device == {"cpu": cost.peak_bytes}
    record = cost.as_dict()
    assert record["macs_by_op"] == cost.macs_by_op and set(record) == set(InferenceCost.__slots__)


def test_peak_memory_lies_between_the_weights_and_a_training_step(vit_cost):
    """Parameters + input batch ≤ peak of an inference forward < peak of a training step on the same batch."""
    _, data, cost = vit_cost
    model = tiny_vit()  # the same model, trained here without touching the shared one
    batch = data.batch(torch.arange(BATCH))
    assert cost.peak_bytes > parameter_bytes(model) + batch["pixel_values"].nbytes
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        optimizer.step()

    step()  # the optimizer's state exists from the first step on
    training = measure_step_memory(model, optimizer, step)
    assert cost.peak_bytes < training.peak_bytes


def test_energy_comes_from_the_machines_best_source(vit_cost):
    """The meter's own choice on a CPU cell: "estimate" here (no NVML for a CPU cell, no readable RAPL)."""
    _, _, cost = vit_cost
    source = EnergyMeter(cuda_available=lambda: False).source
    assert cost.energy_source == source
    assert cost.energy_estimated is (source == "estimate")


def test_estimated_energy_per_image_and_power():
    """The CPU-time estimate, flagged; per image = joules / images; power = joules over the pass."""
    model, data = tiny_vit(), image_data()
    cost = measure_inference(model, data, batch_size=BATCH, device=CPU, latency_samples=2,
                             energy_meter=EnergyMeter(source="estimate"))
    assert cost.energy_source == "estimate" and cost.energy_estimated
    assert cost.energy_joules is not None and cost.energy_joules >= 0
    assert cost.energy_per_image_j == pytest.approx(cost.energy_joules / cost.throughput_images)
    # The power is the pass's joules over the pass's seconds, so NS-E's t·P is the measured energy itself.
    assert cost.mean_power_w * cost.throughput_seconds == pytest.approx(cost.energy_joules, rel=1e-12)
    import math

    scores = cost.scores(0.5)
    if cost.energy_joules:
        expected = 20 * (2 * math.log10(50.0) - math.log10(cost.energy_joules) / 8)
        assert scores["ns_e"].value == pytest.approx(expected)


def test_no_energy_source_gives_none_not_zero():
    model, data = LinearClassifier(8, 2), linear_data(8)
    cost = measure_inference(model, data, batch_size=4, device=CPU, latency_samples=2,
                             energy_meter=EnergyMeter(source="none"))
    assert cost.energy_source == "none"
    assert cost.energy_joules is cost.energy_per_image_j is cost.mean_power_w is None
    assert not cost.energy_estimated
    scores = cost.scores(0.9)
    assert scores["ns_e"].value is None and scores["ns_e"].missing == ("mean_power_w",)
    assert scores["ns_m"].value is not None and scores["netscore"].value is not None


def test_scores_of_a_cost(vit_cost):
    """The family reads the cost's own fields: NS-M from the live peak, NS-E from the throughput pass."""
    _, _, cost = vit_cost
    scores = cost.scores(0.5)
    expected_ns_m = 20 * math.log10(50.0**2) - 20 / 8 * math.log10(cost.peak_bytes / 2**20)
    assert scores["ns_m"].value == pytest.approx(expected_ns_m)
    p, m = cost.parameters / 1e6, cost.macs_per_image / 1e6  # both under a million: the terms add
    expected_netscore = 20 * (2 * math.log10(50.0) - 0.5 * math.log10(p) - 0.5 * math.log10(m))
    assert scores["netscore"].value == pytest.approx(expected_netscore)
    if cost.mean_power_w:  # an estimate over a short pass may read 0 J
        assert scores["ns_e"].estimated and scores["ns_sharp"].estimated


def test_max_batches_bounds_the_throughput_pass():
    cost = measure_inference(LinearClassifier(8, 2), linear_data(8, 10), batch_size=3, device=CPU,
                             latency_samples=2, max_batches=2)
    assert cost.throughput_images == 6


# -- modes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("training", [True, False])
def test_model_mode_is_restored(training):
    seen = []

    class Recorder(LinearClassifier):
        def forward(self, x):
            seen.append((self.training, torch.is_grad_enabled()))
            return super().forward(x)

    model = Recorder(4, 2).train(training)
    measure_inference(model, linear_data(4), batch_size=5, device=CPU, latency_samples=3)
    assert model.training is training
    assert seen and set(seen) == {(False, False)}  # every forward in eval mode, without autograd


def test_model_mode_is_restored_on_error():
    class Broken(LinearClassifier):
        def forward(self, x):
            raise ValueError("broken")

    model = Broken(4, 2).train()
    with pytest.raises(ValueError, match="broken"):
        measure_inference(model, linear_data(4), batch_size=2, device=CPU)
    assert model.training


def test_a_model_that_refuses_inference_mode_runs_under_no_grad():
    class NoInferenceMode(LinearClassifier):
        def forward(self, x):
            if torch.is_inference_mode_enabled():
                raise RuntimeError("Inference tensors cannot be saved for backward")
            return super().forward(x)

    cost = measure_inference(NoInferenceMode(4, 2), linear_data(4), batch_size=2, device=CPU, latency_samples=2)
    assert cost.grad_mode == "no_grad"
    assert cost.macs_per_image == 8


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": 2, "latency_samples": 0},
                                    {"batch_size": 2, "max_batches": 0}])
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError):
        measure_inference(LinearClassifier(4, 2), linear_data(4), device=CPU, **kwargs)
