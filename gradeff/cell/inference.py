"""What a trained model costs to run: latency, throughput, peak memory, energy and MACs of inference.

:func:`measure_inference` runs the model in eval mode without autograd on a split and returns an
:class:`InferenceCost` in raw units (seconds, bytes, joules, counts), with ``None`` for what the
machine cannot measure, never a made-up 0. Its figures are the inputs of the NetScore family
(:meth:`InferenceCost.scores`).

The passes, in order, each on its own so that no meter's overhead lands in another's figure:

1. one warm-up forward at batch 1 (lazy allocations, kernel selection), which also picks the
   grad mode: ``torch.inference_mode()``, or ``torch.no_grad()`` for a model that breaks under it;
2. MACs per image: one batch-1 forward under ``torch.utils.flop_counter.FlopCounterMode``;
3. latency: ``latency_samples`` single-image forwards, each timed alone, the device synchronised
   before either clock read;
4. peak memory: one forward at ``batch_size`` under :class:`~gradeff.meters.LivePeakTracker` (and,
   on CUDA, the allocator's peak of the same forward);
5. throughput and energy: the whole split (or ``max_batches`` batches) at ``batch_size`` inside an
   :class:`~gradeff.meters.EnergyMeter` window, each batch gathered and moved to the device in the
   pass, as a deployed model receives its inputs.

Models are transformers-style: ``model(**inputs)`` returns an object with ``.logits``. Only the
inputs are passed (``labels`` is dropped), so no loss is computed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils import flop_counter

from gradeff.analysis.netscore import Score, netscore_family
from gradeff.axes.data.dataset import Dataset
from gradeff.cell.loop import move_batch, sync
from gradeff.cell.metering import MeterSettings
from gradeff.meters import EnergyMeter, LivePeakTracker
from gradeff.meters.energy import EnergySource
from gradeff.meters.flops import formulas
from gradeff.meters.memory import logical_numel

__all__ = ["InferenceCost", "count_macs", "deployed_parameter_counts", "measure_inference"]

# Dataset tensors that are targets, not model inputs.
_TARGET_KEYS = frozenset({"labels"})
_ESTIMATED_SOURCE = "estimate"


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceCost:
    """The cost of running a trained model, in raw units.

    Attributes:
        parameters: parameter values of the deployed model (4-bit weights counted unpacked; peft's frozen copy of
            a retrained head left out: :func:`deployed_parameter_counts`).
        macs_per_image: multiply-accumulates of one batch-1 forward (see :func:`count_macs` for
            what is and is not counted).
        macs_by_op: the same, per ATen op (``"aten.addmm"``, ``"aten.convolution"``, ...).
        grad_mode: ``"inference_mode"``, or ``"no_grad"`` where the model failed under it.
        latency_s: median wall seconds of a single-image forward.
        latency_p90_s: 90th percentile of the same (linear interpolation between samples).
        latency_samples: how many single-image forwards were timed.
        batch_size: images per forward in the peak-memory and throughput passes.
        throughput_images: images in the throughput pass.
        throughput_seconds: wall seconds of the throughput pass (gathering and moving each batch
            included), the window of the energy figures.
        images_per_s: ``throughput_images / throughput_seconds``.
        peak_bytes: live-tensor peak of one forward at ``batch_size``: parameters, buffers and the
            input batch, plus every tensor the forward creates while it is alive (all devices).
        peak_by_device: the same per device (``{"cpu": ...}`` or ``{"cuda:0": ...}``).
        allocator_peak_bytes: on CUDA, ``torch.cuda.max_memory_allocated`` over the same forward
            after a reset (so it includes whatever else was allocated on the device when it
            began, and the allocator's rounding); ``None`` elsewhere.
        energy_source: where the energy comes from (``"nvml"``, ``"rapl"``, ``"estimate"``,
            ``"none"``; see :mod:`gradeff.meters.energy` for what each covers).
        energy_joules: energy of the throughput pass; ``None`` when it could not be read.
        energy_per_image_j: ``energy_joules / throughput_images``.
        mean_power_w: ``energy_joules`` over ``throughput_seconds``, so that ``throughput_seconds × mean_power_w``
            (what NS-E and NS# charge) is the pass's measured energy.
        energy_estimated: the energy (hence the power) is the CPU-time estimate, not a reading.
            The estimate counts CPU time in clock ticks (10 ms on Linux), so over a pass of a
            few tens of milliseconds it is coarse, and may read 0 J; the scores then treat the
            power as not measured.
    """

    parameters: int
    macs_per_image: int
    macs_by_op: dict[str, int]
    grad_mode: str
    latency_s: float
    latency_p90_s: float
    latency_samples: int
    batch_size: int
    throughput_images: int
    throughput_seconds: float
    images_per_s: float
    peak_bytes: int
    peak_by_device: dict[str, int]
    allocator_peak_bytes: int | None
    energy_source: EnergySource
    energy_joules: float | None
    energy_per_image_j: float | None
    mean_power_w: float | None
    energy_estimated: bool

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types, for a record."""
        return asdict(self)

    def scores(self, accuracy: float | None) -> dict[str, Score]:
        """The NetScore family of this cost at a top-1 ``accuracy`` (a fraction in (0, 1]).

        NS-E and NS# charge the throughput pass (its seconds and mean power) and NS-M the live
        peak of a forward at ``batch_size`` (the same figure on every device, so scores of CPU
        and GPU runs compare).
        """
        return netscore_family(accuracy, self.parameters, self.macs_per_image, self.throughput_seconds,
                               self.mean_power_w, self.peak_bytes, self.energy_source)


def deployed_parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """``{"total", "trainable"}`` parameter values of the model a user deploys.

    peft keeps, beside every module it retrains whole (a classification head under LoRA), a frozen copy of
    the original (``ModulesToSaveWrapper.original_module``) so the adapter can be switched off; a deployed
    model holds one head, so the copy is not counted. 4-bit weights count the values they hold, as in
    :func:`gradeff.meters.parameter_counts`; adapters count.
    """
    copies = {id(p) for module in model.modules() if type(module).__name__ == "ModulesToSaveWrapper"
              and isinstance(getattr(module, "original_module", None), torch.nn.Module)
              for p in module.original_module.parameters()}
    counts = {"total": 0, "trainable": 0}
    for parameter in model.parameters():
        if id(parameter) in copies:
            continue
        values = logical_numel(parameter)
        counts["total"] += values
        counts["trainable"] += values if parameter.requires_grad else 0
    return counts


def _inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t for name, t in batch.items() if name not in _TARGET_KEYS}


def _grad_context(mode: str):
    return torch.inference_mode() if mode == "inference_mode" else torch.no_grad()


def count_macs(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[int, dict[str, int]]:
    """Multiply-accumulates of one forward, by ``torch.utils.flop_counter.FlopCounterMode``.

    MACs are FLOPs / 2: the counter charges 2 FLOPs (a multiply and an add) per multiply-accumulate
    of a matmul or convolution. Run it under the grad mode of interest; the model is called as it
    is (its mode is not changed).

    What is counted: the ops PyTorch registers a formula for: matrix products (``mm``, ``addmm``,
    ``bmm``, ``baddbmm``, ``matmul`` through them), convolutions, and the fused attention kernels
    of ``scaled_dot_product_attention`` (both matmuls, QKᵀ and AV, over the full ``s_q × s_k``
    even under a causal mask), where a formula is registered for the kernel that runs: PyTorch
    registers the CUDA flash, memory-efficient and cuDNN kernels; :func:`gradeff.meters.flops.formulas` adds the
    CPU flash kernel with the same formula. The math fallback of SDPA runs as ``bmm`` and is counted as such.
    bitsandbytes' 4-bit matmuls (QLoRA's NF4 weights) count as the dense products they compute, so a QLoRA
    model counts what its LoRA twin counts.

    What is not counted: bias additions (``addmm`` counts its product only), element-wise ops
    (activations, residual adds, scaling, dropout), normalisations, softmax, reductions,
    embedding look-ups and index ops, and any kernel without a registered formula (custom or
    compiled kernels, e.g. a fused selective scan): it counts zero.

    Returns:
        ``(MACs, MACs per ATen op)``.
    """
    counter = flop_counter.FlopCounterMode(display=False, custom_mapping=formulas())
    with counter:
        model(**inputs)
    by_op = {str(op): flops // 2 for op, flops in counter.get_flop_counts().get("Global", {}).items()}
    return counter.get_total_flops() // 2, by_op


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile with linear interpolation between order statistics (NumPy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _pick_grad_mode(model: torch.nn.Module, inputs: dict[str, torch.Tensor], device: torch.device) -> str:
    """Warm up with one forward under inference mode; fall back to no_grad if the model fails there."""
    try:
        with torch.inference_mode():
            model(**inputs)
        mode = "inference_mode"
    except RuntimeError:
        # e.g. a model that writes an inference tensor into a buffer or cache it later updates in place.
        with torch.no_grad():
            model(**inputs)
        mode = "no_grad"
    sync(device)
    return mode


def measure_inference(model: torch.nn.Module, data: Dataset, *, batch_size: int, device: torch.device | str,
                      latency_samples: int = 16, max_batches: int | None = None,
                      meter_settings: MeterSettings | None = None,
                      energy_meter: EnergyMeter | None = None) -> InferenceCost:
    """Measure what running ``model`` on ``data`` costs.

    The model must already be on ``device``; it runs in eval mode and is put back in the
    train/eval mode it had, also on error.

    Args:
        model: a transformers-style model (``model(**inputs).logits``).
        data: the split to run (e.g. the held-out split); its ``labels`` are not passed.
        batch_size: images per forward in the peak-memory and throughput passes.
        device: where the model is.
        latency_samples: single-image forwards timed for the latency (samples ``0, 1, ...`` of
            ``data``, cycling when it is shorter).
        max_batches: run only this many batches of ``batch_size`` in the throughput pass
            (``None``: the whole split).
        meter_settings: the cell's meter settings (the grid intensity of the energy meter's CO2
            figure); ``None`` for the defaults.
        energy_meter: the meter of the throughput pass; ``None`` to create one (best source,
            the device's NVML counter when on CUDA).

    Returns:
        The figures; see :class:`InferenceCost`.
    """
    device = torch.device(device)
    if batch_size < 1 or latency_samples < 1:
        raise ValueError(f"batch_size and latency_samples must be >= 1, got {batch_size} and {latency_samples}")
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be >= 1 or None, got {max_batches}")
    if len(data) == 0:
        raise ValueError("cannot measure inference on an empty split")
    on_cuda = device.type == "cuda"
    # Probing NVML and RAPL belongs outside every timed pass.
    settings = meter_settings or MeterSettings()
    meter = energy_meter or EnergyMeter(grid_gco2_per_kwh=settings.grid_gco2_per_kwh,
                                        device_index=device.index or 0,
                                        cuda_available=lambda: on_cuda and torch.cuda.is_available())
    n = len(data)
    parameters = deployed_parameter_counts(model)["total"]

    with _eval_mode(model):
        singles = [move_batch(_inputs(data.batch(torch.tensor([i % n]))), device) for i in range(latency_samples)]
        grad_mode = _pick_grad_mode(model, singles[0], device)

        with _grad_context(grad_mode):
            macs, macs_by_op = count_macs(model, singles[0])

            latencies = []
            for inputs in singles:
                sync(device)
                start = time.perf_counter()
                model(**inputs)
                sync(device)
                latencies.append(time.perf_counter() - start)
            del singles

            batch = move_batch(_inputs(data.batch(torch.arange(min(batch_size, n)))), device)
            tracker = LivePeakTracker([*model.parameters(), *model.buffers(), *batch.values()])
            if on_cuda:
                sync(device)
                torch.cuda.reset_peak_memory_stats(device)
            with tracker:
                output = model(**batch)
                del output
            allocator_peak = None
            if on_cuda:
                sync(device)
                allocator_peak = int(torch.cuda.max_memory_allocated(device))
            del batch

            chunks = torch.arange(n).split(batch_size)
            if max_batches is not None:
                chunks = chunks[:max_batches]
            images = sum(len(idx) for idx in chunks)
            sync(device)
            with meter:
                start = time.perf_counter()
                for idx in chunks:
                    model(**move_batch(_inputs(data.batch(idx)), device))
                sync(device)
                seconds = time.perf_counter() - start

    energy = meter.record
    joules = energy.joules
    # The pass's energy over the pass's seconds: NS-E charges t·P, which is then the measured energy itself
    # (over the meter's slightly longer window, t·P would disagree with it).
    power = joules / seconds if joules is not None and seconds > 0 else None
    return InferenceCost(
        parameters=parameters,
        macs_per_image=macs,
        macs_by_op=macs_by_op,
        grad_mode=grad_mode,
        latency_s=statistics.median(latencies),
        latency_p90_s=_quantile(latencies, 0.9),
        latency_samples=latency_samples,
        batch_size=batch_size,
        throughput_images=images,
        throughput_seconds=seconds,
        images_per_s=images / seconds,
        peak_bytes=tracker.peak_bytes,
        peak_by_device=dict(tracker.peak_by_device),
        allocator_peak_bytes=allocator_peak,
        energy_source=energy.source,
        energy_joules=joules,
        energy_per_image_j=joules / images if joules is not None else None,
        mean_power_w=power,
        energy_estimated=energy.source == _ESTIMATED_SOURCE and joules is not None,
    )
