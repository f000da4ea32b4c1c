"""FLOPs of a training step, counted by ``torch.utils.flop_counter``, and model FLOPs utilisation (MFU).

A cell's forward and backward pass over one micro-batch is counted once, on the model before its memory
strategy is applied: model FLOPs, without the recomputation checkpointing adds (the PaLM convention, so
MFU compares strategies by the useful work they get through, and a strategy that recomputes more shows a
lower MFU rather than a higher one). MFU is the achieved model FLOP/s over the device's peak at the
cell's precision; the peaks are a small table of dense (no structured sparsity) datasheet figures by
device name, overridable with ``--gradeff-peak-tflops``. Where neither gives a peak (a CPU, a GPU the
table does not know) MFU is ``None``: a peak is never guessed.

Attention: torch's table counts the CUDA attention kernels (flash, memory-efficient, cuDNN) but not the
CPU flash kernel that ``scaled_dot_product_attention`` dispatches to on CPU, and its formulas refuse
grouped-query attention; the formulas mapped here count both, so attention's own FLOPs are counted on
CPU and GPU alike. Only matrix products, convolutions and attention are counted (torch's table): element-wise
work (norms, activations, a Mamba block's selective scan) is not, as in the usual MFU convention.

4-bit weights: a QLoRA layer multiplies by its NF4 weight through bitsandbytes' own kernels
(``bitsandbytes::gemm_4bit``, ``gemv_4bit``), which torch's table does not know; they count as the dense
product they compute, 2·M·N·K (:func:`formulas` adds them once bitsandbytes is loaded), so a QLoRA model
counts the FLOPs of the LoRA model it quantises. The dequantised weight's backward matmul is a plain
``aten.mm`` and is counted already.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch.utils import flop_counter

from gradeff.meters.untouched import untouched

__all__ = ["PEAK_TFLOPS", "StepFlops", "compute_record", "count_step_flops", "counted", "formulas",
           "peak_flops_per_s"]

_aten = torch.ops.aten


def _as_many_heads(query_shape, shape):
    """``shape`` (batch, heads, length, dim) with the query's heads: grouped-query attention's key and value
    heads are shared by several query heads, each of which attends over them in full."""
    return (shape[0], query_shape[1], *shape[2:])


def _sdpa(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query_shape, _as_many_heads(query_shape, key_shape),
                                        _as_many_heads(query_shape, value_shape))


def _sdpa_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, _as_many_heads(query_shape, key_shape),
                                                 _as_many_heads(query_shape, value_shape))


# torch's formulas for scaled_dot_product_attention's kernels assume as many key/value heads as query heads
# (they fail on grouped-query attention, which Llama 3 uses) and have none for the CPU flash kernel.
_ATTENTION = {
    **dict.fromkeys((_aten._scaled_dot_product_flash_attention, _aten._scaled_dot_product_efficient_attention,
                     _aten._scaled_dot_product_cudnn_attention, _aten._scaled_dot_product_flash_attention_for_cpu),
                    _sdpa),
    **dict.fromkeys((_aten._scaled_dot_product_flash_attention_backward,
                     _aten._scaled_dot_product_efficient_attention_backward,
                     _aten._scaled_dot_product_cudnn_attention_backward,
                     _aten._scaled_dot_product_flash_attention_for_cpu_backward), _sdpa_backward),
}



def _gemm_4bit(a_shape, b_shape, shape_b, *args, out_shape=None, **kwargs) -> int:
    """A 4-bit matmul ``A @ W.T`` with ``W`` of ``shape_b`` = (N, K): 2·M·N·K, as the dense product it computes."""
    rows = math.prod(a_shape[:-1])
    n, k = shape_b
    return 2 * rows * n * k


_QUANTIZED_KERNELS = ("gemm_4bit", "gemv_4bit")


def formulas() -> dict:
    """The formulas this module adds to torch's table: attention (CPU kernel, grouped-query), and bitsandbytes'
    4-bit matmuls where bitsandbytes is loaded (its ops exist only once it is imported; importing it here would
    cost every cell without a 4-bit weight its import time)."""
    found = dict(_ATTENTION)
    if "bitsandbytes" in sys.modules:
        for name in _QUANTIZED_KERNELS:
            packet = getattr(torch.ops.bitsandbytes, name, None)
            if packet is not None:
                found[packet] = _gemm_4bit
    return found


# Dense peak TFLOP/s by device-name fragment (first match wins, so the more specific names come first) and
# precision: bf16/fp16 tensor cores; tf32 when float32 matrix products may use TF32; fp32 otherwise.
# NVIDIA datasheets (H100/H200 SXM, H100 PCIe, A100 SXM/PCIe, L4); half precision without sparsity.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
)


def _matmul_precision(precision: str) -> str:
    if precision != "fp32":
        return precision
    # "highest" keeps float32 matrix products in float32; "high"/"medium" let them use TF32 tensor cores.
    return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def peak_flops_per_s(device_name: str | None, precision: str, override_tflops: float | None = None
                     ) -> tuple[float | None, str | None]:
    """The device's peak FLOP/s at ``precision`` and where the figure comes from; ``(None, None)`` if unknown."""
    if override_tflops is not None:
        return override_tflops * 1e12, "option"
    if not device_name:
        return None, None
    kind = _matmul_precision(precision)
    for fragment, peaks in PEAK_TFLOPS:
        if fragment in device_name:
            return peaks[kind] * 1e12, f"table: {fragment} {kind}"
    return None, None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFlops:
    """FLOPs of one forward and backward pass over a micro-batch of ``samples`` samples."""

    flops: int
    samples: int

    @property
    def per_sample(self) -> float:
        return self.flops / self.samples


def count_step_flops(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> StepFlops:
    """Count one forward and backward pass of ``model`` on ``batch``, leaving no trace of it.

    The pass must not change what the cell then trains: the random-number generators (dropout) and the
    model's buffers (batch-norm running statistics) are put back, and the gradients dropped.
    """
    with untouched(model):
        flops = counted(lambda: model(**batch).loss.backward())
    samples = len(next(iter(batch.values())))
    return StepFlops(flops=flops, samples=samples)


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeRecord:
    """A cell's counted model FLOPs over its timed epochs, the FLOP/s achieved and, where known, its MFU."""

    flops_per_sample: float
    model_flops: float
    seconds: float
    achieved_flops_per_s: float | None
    peak_flops_per_s: float | None
    peak_source: str | None
    mfu: float | None


def compute_record(step: StepFlops, epochs: list, *, device_name: str | None, precision: str,
                   override_tflops: float | None = None) -> dict:
    """``meters["compute"]`` of a cell from its counted step and its epochs (``EpochStats``-like).

    Every closure call is one forward and backward pass over the step's samples, so an epoch's model
    FLOPs are FLOPs per sample × samples × closure calls per optimizer step (a line search's extra passes
    are work done, and counted).
    """
    model_flops = sum(step.per_sample * e.samples * e.closure_calls / e.optimizer_steps
                      for e in epochs if e.optimizer_steps)
    seconds = sum(e.seconds for e in epochs)
    achieved = model_flops / seconds if seconds > 0 else None
    peak, source = peak_flops_per_s(device_name, precision, override_tflops)
    mfu = achieved / peak if achieved is not None and peak is not None else None
    return asdict(ComputeRecord(flops_per_sample=step.per_sample, model_flops=model_flops, seconds=seconds,
                                achieved_flops_per_s=achieved, peak_flops_per_s=peak, peak_source=source, mfu=mfu))


def counted(fn: Callable[[], object]) -> int:
    """FLOPs of running ``fn`` (with the CPU attention kernel and 4-bit matmuls counted too)."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=formulas()) as counter:
        fn()
    return counter.get_total_flops()
