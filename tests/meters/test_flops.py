"""FLOPs of a training step (FlopCounterMode), the device peaks and MFU."""

from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gradeff.axes.data import make_dataset
from gradeff.axes.models import build_model
from gradeff.meters.flops import PEAK_TFLOPS, StepFlops, compute_record, count_step_flops, peak_flops_per_s
from gradeff.studies.hparams import hparams_for


def _llm_and_batch():
    hp = hparams_for("llm", "tiny")
    torch.manual_seed(0)
    model = build_model("llm", "tiny", num_labels=hp.num_classes)
    batch = make_dataset("causal_lm", hp, 0).batch(torch.arange(hp.batch_size))
    return model, batch


def test_tiny_llama_step_is_six_n_d_plus_attention():
    """Forward + backward of the tiny Llama: 6·N·tokens within 15 %, and more than it by attention's own FLOPs.

    torch's table alone has no formula for the CPU attention kernel; gradeff's mapping adds it, so the
    count exceeds the matrix products by exactly the attention formula of every layer.
    """
    model, batch = _llm_and_batch()
    n = sum(p.numel() for p in model.parameters())  # tied embeddings: the output projection, counted once
    tokens = batch["input_ids"].numel()
    with FlopCounterMode(display=False) as table_only:
        model(**batch).loss.backward()
    model.zero_grad(set_to_none=True)
    step = count_step_flops(model, batch)
    ratio = step.flops / (6 * n * tokens)
    assert 0.85 <= ratio <= 1.15, ratio
    assert step.flops > table_only.get_total_flops()
    assert table_only.get_total_flops() == pytest.approx(6 * n * tokens, rel=0.01)
    assert step.samples == len(batch["input_ids"]) and step.per_sample == step.flops / step.samples


class _Noisy(torch.nn.Module):
    """Dropout (the RNG) and batch-norm statistics (buffers): what a counting pass could disturb."""

    def __init__(self):
        super().__init__()
        self.linear, self.norm, self.drop = torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5)

    def forward(self, x):
        return SimpleNamespace(loss=self.drop(self.norm(self.linear(x))).square().mean())


def test_counting_leaves_no_trace():
    """After the count the model, its gradients and the random stream are as before it."""
    torch.manual_seed(1)
    model, x = _Noisy(), torch.randn(8, 4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(2)
    reference = torch.rand(3)
    torch.manual_seed(2)
    step = count_step_flops(model, {"x": x})
    assert torch.equal(torch.rand(3), reference)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    # 2·b·i·o for the forward product, as much again for the weight's gradient (the input needs none).
    assert step.flops == 2 * (2 * 8 * 4 * 4)


@pytest.mark.parametrize(("name", "precision", "tflops"), [
    ("NVIDIA H200", "bf16", 989.4), ("NVIDIA H100 80GB HBM3", "bf16", 989.4), ("NVIDIA H100 PCIe", "fp16", 756.0),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0), ("NVIDIA A100-SXM4-40GB", "fp32", 19.5), ("NVIDIA L4", "bf16", 121.0),
])
def test_known_devices_have_their_datasheet_peak(name, precision, tflops):
    peak, source = peak_flops_per_s(name, precision)
    assert peak == pytest.approx(tflops * 1e12) and source.startswith("table:")


@pytest.mark.parametrize("name", [None, "", "cpu", "NVIDIA GeForce GTX 1080", "Some Accelerator"])
def test_unknown_devices_have_no_peak(name):
    assert peak_flops_per_s(name, "bf16") == (None, None)


def test_the_option_overrides_the_table_everywhere():
    assert peak_flops_per_s("NVIDIA H200", "bf16", 100.0) == (100e12, "option")
    assert peak_flops_per_s(None, "fp32", 0.5) == (0.5e12, "option")


def test_fp32_peak_follows_whether_matmuls_may_use_tf32():
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert peak_flops_per_s("NVIDIA H200", "fp32")[0] == pytest.approx(66.9e12)
        torch.set_float32_matmul_precision("high")
        assert peak_flops_per_s("NVIDIA H200", "fp32")[0] == pytest.approx(494.7e12)
        assert peak_flops_per_s("NVIDIA H200", "bf16")[0] == pytest.approx(989.4e12)  # unaffected
    finally:
        torch.set_float32_matmul_precision(saved)


def test_table_names_the_more_specific_device_first():
    names = [fragment for fragment, _ in PEAK_TFLOPS]
    assert names.index("H100 PCIe") < names.index("H100")
    assert all(set(peaks) == {"bf16", "fp16", "tf32", "fp32"} for _, peaks in PEAK_TFLOPS)


def _epoch(samples=64, steps=8, calls=8, seconds=2.0):
    return SimpleNamespace(samples=samples, optimizer_steps=steps, closure_calls=calls, seconds=seconds)


def test_mfu_is_achieved_over_peak():
    """100 FLOPs a sample, 64 samples in each of two 2 s epochs: 3,200 FLOP/s; against a 6.4e-9 TFLOP/s peak, 0.5."""
    record = compute_record(StepFlops(flops=800, samples=8), [_epoch(), _epoch()], device_name=None,
                            precision="fp32", override_tflops=6.4e-9)
    assert record["model_flops"] == 12_800 and record["seconds"] == 4.0
    assert record["achieved_flops_per_s"] == pytest.approx(3_200)
    assert record["mfu"] == pytest.approx(0.5) and record["peak_source"] == "option"


def test_line_search_passes_are_work_counted():
    """Three closure calls per step: three forward + backward passes over the step's samples."""
    once = compute_record(StepFlops(flops=800, samples=8), [_epoch(calls=8)], device_name=None, precision="fp32")
    thrice = compute_record(StepFlops(flops=800, samples=8), [_epoch(calls=24)], device_name=None, precision="fp32")
    assert thrice["model_flops"] == 3 * once["model_flops"] == 3 * 6_400


def test_without_a_peak_mfu_is_not_measured_never_zero():
    record = compute_record(StepFlops(flops=800, samples=8), [_epoch()], device_name="cpu", precision="bf16")
    assert record["mfu"] is None and record["peak_flops_per_s"] is None and record["achieved_flops_per_s"] > 0


def test_no_time_no_rate():
    record = compute_record(StepFlops(flops=800, samples=8), [_epoch(seconds=0.0)], device_name="NVIDIA H200",
                            precision="bf16")
    assert record["achieved_flops_per_s"] is None and record["mfu"] is None
    assert record["peak_flops_per_s"] == pytest.approx(989.4e12)


def test_grouped_query_attention_counts_as_every_query_head_attending():
    """Two key/value heads shared by four query heads: the FLOPs of four full heads, forward and backward."""
    import torch.nn.functional as F

    from gradeff.meters.flops import counted

    q, k, v = (torch.randn(2, heads, 8, 16, requires_grad=True) for heads in (4, 2, 2))
    grouped = counted(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True).sum().backward())
    k4, v4 = (t.detach().repeat_interleave(2, dim=1).requires_grad_() for t in (k, v))
    full = counted(lambda: F.scaled_dot_product_attention(q, k4, v4).sum().backward())
    assert grouped == full > 0
