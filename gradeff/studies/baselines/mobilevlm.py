"""MobileVLM V2 1.7B, the PEFT study's mobile VLM baseline: a row of the baselines grid without an implementation.

MobileVLM V2 (``mtgv/MobileVLM_V2-1.7B``) is a CLIP ViT-L/14 image tower at 336 px, a lightweight downsample
projector (LDP v2: an MLP, 2x2 average pooling of the 24x24 patch grid to 144 tokens, a depthwise-conv position
encoding) and MobileLLaMA-1.4B. transformers does not ship it; its code lives in its repository, and gradeff
never runs repository code (no ``trust_remote_code``). Its cells therefore skip, naming what they would need
(:attr:`gradeff.axes.models.ModelSpec.unavailable`); :func:`build` is never reached by a cell and says the same.
"""

from __future__ import annotations

from gradeff.axes.models import MODELS

__all__ = ["CONFIGS", "build"]

CONFIGS: dict[str, dict] = {}


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu"):
    """Not implemented (see the module docstring)."""
    raise NotImplementedError(MODELS["mobilevlm"].unavailable)
