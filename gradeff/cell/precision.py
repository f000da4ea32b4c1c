"""Training precision: ``fp32``, or mixed precision under ``torch.autocast`` in ``bf16`` or ``fp16``.

Mixed precision keeps the parameters, gradients and optimizer state in float32 and runs the forward
pass's matrix products in the lower precision (what ``torch.autocast`` does on CPU and GPU alike).
``fp16``'s narrow exponent underflows small gradients, so its loss is scaled before ``backward`` and the
gradients unscaled before the step (``torch.amp.GradScaler``); ``bf16`` has float32's exponent and needs
no scaling. A cell's whole training runs under the one context: warm-up, the strategy's own measuring
passes, the epochs, their held-out evaluations and the memory breakdown's step all see the same
precision.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING

from gradeff.axes.optim import OPTIMIZERS

if TYPE_CHECKING:
    import torch

__all__ = ["PRECISIONS", "add_options", "autocast", "make_scaler", "precision_incompatibility", "read_precision",
           "validate_precision"]

PRECISIONS = ("fp32", "bf16", "fp16")


def _dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def validate_precision(precision: str, device: str) -> str:
    """``precision`` if ``device`` (``auto``, ``cpu``, ``cuda[:N]``) can train in it.

    Raises:
        ValueError: an unknown precision, or bf16 on a GPU without bfloat16 support.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    if precision == "bf16" and device != "cpu":
        import torch

        if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            raise ValueError("bf16 asked for, but this GPU has no bfloat16 support; use fp16 (with loss scaling) "
                             "or fp32")
    return precision


def autocast(device: torch.device, precision: str):
    """The context a cell trains in: ``torch.autocast`` for bf16 and fp16, nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.type, dtype=_dtype(precision))


def make_scaler(device: torch.device, precision: str):
    """fp16's loss scaler (``torch.amp.GradScaler``), ``None`` for the precisions that need none."""
    if precision != "fp16":
        return None
    import torch

    return torch.amp.GradScaler(device.type)


def precision_incompatibility(optimizer: str, precision: str) -> str | None:
    """Why ``optimizer`` cannot train in ``precision``, or ``None``.

    fp16's scaler unscales the gradients once and then steps the optimizer without a closure; an
    optimizer with a line search evaluates the loss again inside its step, which the scaler cannot follow.
    """
    if precision != "fp16":
        return None
    spec = OPTIMIZERS[optimizer]
    if "line_search" in spec.kwargs:
        return (f"fp16 loss scaling steps the optimizer once without a closure, and {spec.name} re-evaluates the "
                f"loss in its line search; use bf16 or fp32")
    return None


def _peak_tflops(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of TFLOP/s, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number of TFLOP/s, got {text}")
    return value


def add_options(parser) -> None:
    """``--gradeff-precision`` and the peak that MFU is measured against (``--gradeff-peak-tflops``)."""
    group = parser.getgroup("gradeff")
    group.addoption("--gradeff-precision", choices=PRECISIONS, default="fp32",
                    help="training precision: fp32 (default), or autocast mixed precision in bf16 or fp16 (fp16 with "
                         "loss scaling); recorded in each cell's hparams")
    group.addoption("--gradeff-peak-tflops", type=_peak_tflops, default=None, metavar="TFLOPS",
                    help="the device's peak TFLOP/s at the chosen precision, for MFU (default: a table of known GPUs "
                         "by name; MFU is not measured where neither gives one)")


def read_precision(config, device: str) -> str:
    """``--gradeff-precision``, checked against the device (``pytest.UsageError`` before any cell)."""
    import pytest  # noqa: PLC0415 - pytest, 0.4 s: a cell's own process imports this module

    try:
        return validate_precision(config.getoption("gradeff_precision"), device)
    except ValueError as exc:
        raise pytest.UsageError(f"--gradeff-precision: {exc}") from None
