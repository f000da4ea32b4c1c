"""gradeff's Vim-S and MambaVision-T against the official implementations: the same weights, the same logits.

The official code (hustvl/Vim, NVlabs/MambaVision) is imported from checkouts named by ``GRADEFF_VIM_REPO`` and
``GRADEFF_MAMBAVISION_REPO`` (see ``tests/reference/official.py``). It builds the model with random weights,
every tensor then moved off its initial value; its state dict is saved as the official checkpoints hold it and
loaded through :func:`gradeff.axes.models.checkpoint.from_checkpoint`; the two models' logits on a 224 px batch are
compared in eval mode.

- On the CPU the official forward runs with the reference implementations the Mamba packages ship for their
  kernels (selective scan, the fused inner function, causal conv1d, RMSNorm): the architecture is the official
  one, the arithmetic the reference one. Tolerance 1e-4, as for timm's models.
- On a GPU with mamba-ssm's CUDA kernels built (``pytest tests/reference -k cuda`` in an environment with Vim's
  mamba-1p1p1 and causal-conv1d installed), the official forward uses the kernels it was trained with, and ours
  its pure-PyTorch scan on the same GPU. Tolerance 1e-3: the fused kernel sums in another order over 24 layers.
"""

import argparse
import importlib.util

import pytest
import torch

from gradeff.axes.models.checkpoint import from_checkpoint
from tests.axes.models.published import perturb
from tests.reference.official import missing, official_mambavision_t, official_vim_s

OFFICIAL = {"vim_s": official_vim_s, "mambavision_t": official_mambavision_t}


def _pair(key: str, kernels: str, folder):
    torch.manual_seed(0)
    reference = OFFICIAL[key](kernels)
    perturb(reference, 0.02)
    # Saved as the released checkpoints are: Vim's {"model": ...} with the training arguments, MambaVision's
    # {"state_dict": ...}.
    container = "model" if key == "vim_s" else "state_dict"
    path = folder / f"{key}.pth"
    torch.save({container: reference.state_dict(), "epoch": 1, "args": argparse.Namespace(model=key)}, path)
    return reference.eval(), from_checkpoint(key, path).eval()


def _difference(key: str, reference, ours, device: str) -> float:
    pixels = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(7)).to(device)
    with torch.no_grad():
        expected = reference.to(device)(pixels)
        got = ours.to(device)(pixel_values=pixels).logits
    difference = (got - expected).abs().max().item()
    print(f"\nequivalence {key} eval ({device}): max |logit difference| {difference:.3g} "
          f"(logits up to {expected.abs().max().item():.3g})")
    return difference


def _needs(*models: str):
    models = models + (("vim_s",) if "mambavision_t" in models else ())  # its mamba_ssm import is Vim's copy
    reason = missing(*models)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


@_needs("vim_s")
def test_vim_s_logits_are_the_official_models_cpu(tmp_path):
    assert _difference("vim_s", *_pair("vim_s", "reference", tmp_path), "cpu") <= 1e-4


@_needs("mambavision_t")
def test_mambavision_t_logits_are_the_official_models_cpu(tmp_path):
    assert _difference("mambavision_t", *_pair("mambavision_t", "reference", tmp_path), "cpu") <= 1e-4


def _cuda_missing() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU: mamba-ssm's selective-scan kernels are CUDA-only"
    if importlib.util.find_spec("selective_scan_cuda") is None:
        return "needs mamba-ssm built with its CUDA kernels (Vim's mamba-1p1p1: pip install -e mamba-1p1p1)"
    return missing("vim_s", "mambavision_t")


@pytest.mark.skipif(_cuda_missing() is not None, reason=_cuda_missing() or "")
@pytest.mark.parametrize("key", sorted(OFFICIAL))
def test_logits_are_the_official_cuda_kernels(key, tmp_path):
    assert _difference(key, *_pair(key, "cuda", tmp_path), "cuda") <= 1e-3
