"""The official Vim-S and MambaVision-T model code, imported from checkouts of their repositories.

``GRADEFF_VIM_REPO`` and ``GRADEFF_MAMBAVISION_REPO`` name the checkouts (github.com/hustvl/Vim,
github.com/NVlabs/MambaVision). Both import CUDA extensions at module level (``selective_scan_cuda``,
``causal_conv1d_cuda``, Triton kernels). Where those are not built (``kernels="reference"``: any CPU machine) they
are replaced by empty modules, and the few calls the forward pass makes into them by the pure-PyTorch reference
implementations the same packages ship for testing their kernels: mamba_ssm's ``selective_scan_ref`` and
``mamba_inner_ref``, causal-conv1d's ``causal_conv1d_ref``, and the Triton layer norm's ``rms_norm_ref``. Every
module that builds and wires the model is the official one. With ``kernels="cuda"`` nothing is replaced: mamba_ssm
(Vim's bundled build, for its bidirectional mixer) must be installed with its CUDA extensions.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

__all__ = ["REPOSITORIES", "missing", "official_mambavision_t", "official_vim_s"]

REPOSITORIES = {"vim_s": "GRADEFF_VIM_REPO", "mambavision_t": "GRADEFF_MAMBAVISION_REPO"}
VIM_S = "vim_small_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2"


def missing(*models: str) -> str | None:
    """Why the official code of ``models`` cannot be imported here (a skip reason), or ``None``."""
    import importlib.util

    for model in models:
        variable = REPOSITORIES[model]
        if not os.environ.get(variable) or not Path(os.environ[variable]).is_dir():
            return f"needs a checkout of the official {model} repository in ${variable}"
    for module in ("timm", "einops"):
        if importlib.util.find_spec(module) is None:
            return (f"needs {module} (the official code imports it), which only the reference environment has: "
                    f"bash scripts/reference-env.sh")
    return None


def _paths() -> None:
    vim = Path(os.environ[REPOSITORIES["vim_s"]])
    # Vim's repository carries its own mamba_ssm (with the bidirectional mixer) and causal-conv1d.
    paths = [vim / "vim", vim / "mamba-1p1p1", vim / "causal-conv1d"]
    if os.environ.get(REPOSITORIES["mambavision_t"]):
        paths.append(Path(os.environ[REPOSITORIES["mambavision_t"]]))
    sys.path[:0] = [str(p) for p in paths if str(p) not in sys.path]
    import transformers.generation as generation

    # mamba_ssm 1.1.1's generation utilities import two classes transformers 5 renamed (unused here).
    for old in ("GreedySearchDecoderOnlyOutput", "SampleDecoderOnlyOutput"):
        if not hasattr(generation, old):
            setattr(generation, old, generation.GenerateDecoderOnlyOutput)


def _reference_kernels() -> None:
    for name in ("selective_scan_cuda", "causal_conv1d_cuda"):
        sys.modules.setdefault(name, types.ModuleType(name))
    from causal_conv1d import causal_conv1d_interface
    from einops import rearrange
    from mamba_ssm.modules import mamba_simple
    from mamba_ssm.ops import selective_scan_interface as scan

    scan.selective_scan_fn = scan.selective_scan_ref
    scan.causal_conv1d_fn = causal_conv1d_interface.causal_conv1d_ref

    def inner_no_out_proj(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, A, B=None, C=None,
                          D=None, delta_bias=None, B_proj_bias=None, C_proj_bias=None, delta_softplus=True):
        # mamba_inner_ref with an identity output projection is the "no out_proj" kernel's result.
        import torch

        identity = torch.eye(xz.shape[1] // 2, dtype=xz.dtype, device=xz.device)
        y = scan.mamba_inner_ref(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, identity, None,
                                 A, B, C, D, delta_bias, B_proj_bias, C_proj_bias, delta_softplus)
        return rearrange(y, "b l d -> b d l")

    mamba_simple.mamba_inner_fn_no_out_proj = inner_no_out_proj


def _rms_norm_reference(models_mamba) -> None:
    from mamba_ssm.ops.triton import layer_norm

    def rms_norm_fn(x, weight, bias, residual=None, prenorm=False, residual_in_fp32=False, eps=1e-6, **_):
        return layer_norm.rms_norm_ref(x, weight, bias, residual=residual, eps=eps, prenorm=prenorm, upcast=True)

    models_mamba.rms_norm_fn = rms_norm_fn


def official_vim_s(kernels: str = "reference"):
    """The official Vim-S (the model of ``hustvl/Vim-small-midclstok``), random weights, on the CPU."""
    _paths()
    if kernels == "reference":
        _reference_kernels()
    import models_mamba

    if kernels == "reference":
        _rms_norm_reference(models_mamba)
    return getattr(models_mamba, VIM_S)()


def official_mambavision_t(kernels: str = "reference"):
    """The official MambaVision-T (``nvidia/MambaVision-T-1K``'s model), random weights, on the CPU."""
    _paths()
    if kernels == "reference":
        _reference_kernels()
    from mambavision.models import mamba_vision

    if kernels == "reference":
        from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

        mamba_vision.selective_scan_fn = selective_scan_ref
    return mamba_vision.mamba_vision_T()
