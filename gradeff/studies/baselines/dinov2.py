"""DINOv2 ViT-B/14 read by a linear probe (the PEFT study's self-supervised baseline).

``transformers.Dinov2ForImageClassification``: the DINOv2 backbone with a linear head on the
[CLS] token concatenated with the mean patch token, as in DINOv2's own linear evaluation. The
``linear_probe`` method trains that head alone on the frozen features.

Why ViT-B/14: the study reports 0.917 on CIFAR-100 for DINOv2 with a linear probe. DINOv2's paper
gives, for linear probes on CIFAR-100, about 87.5 % with ViT-S/14, 91.3 % with ViT-B/14 and 93.4 %
with ViT-L/14: 0.917 is ViT-B/14's figure within a reproduction's spread, and far from ViT-S/14's.
The backbone has 86.6 M parameters (``facebook/dinov2-base``: width 768, 12 layers, 14 px patches,
position embeddings for 518 px, LayerScale); with a 1000-class head, 88.1 M. Any resolution is
read by interpolating the position embeddings (224 px in the study).
"""

from __future__ import annotations

from transformers import Dinov2Config, Dinov2ForImageClassification

from gradeff.axes.models._weights import classifier_builders

__all__ = ["CONFIGS", "build", "config"]

CONFIGS: dict[str, dict] = {
    # The tiny ViT-S's sizes (32 px, 8 px patches, width 64), with DINOv2's LayerScale.
    "tiny": dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                 mlp_ratio=4, layerscale_value=1.0, num_labels=100),
    "small": dict(image_size=64, patch_size=8, hidden_size=192, num_hidden_layers=6, num_attention_heads=3,
                  mlp_ratio=4, layerscale_value=1.0, num_labels=100),
    # facebook/dinov2-base with an ImageNet-sized head.
    "paper": dict(image_size=518, patch_size=14, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  mlp_ratio=4, layerscale_value=1.0, num_labels=1000),
}

config, _build = classifier_builders(Dinov2ForImageClassification, Dinov2Config, CONFIGS)


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu"):
    """Build the classifier (see :func:`gradeff.axes.models._weights.classifier_builders`).

    The mask token, which only DINOv2's masked-image pretraining uses, is frozen: classification
    never reads it, so it could never get a gradient.
    """
    model = _build(profile, vocab_size=vocab_size, num_labels=num_labels, weights_dir=weights_dir, device=device)
    model.dinov2.embeddings.mask_token.requires_grad_(False)
    return model
