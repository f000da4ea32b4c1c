"""ViT-Small/16 for image classification (the PEFT study's plain Transformer backbone).

The same ``transformers.ViTForImageClassification`` as the main study's ViT, at the DeiT/ViT-S
shape: width 384, 12 layers, 6 heads, MLP 1536. At 224 px with 1000 classes that is 22.05 M
parameters, the published ViT-S/16 size.
"""

from __future__ import annotations

from transformers import ViTConfig, ViTForImageClassification

from gradeff.axes.models._weights import classifier_builders

__all__ = ["CONFIGS", "build", "config"]

CONFIGS: dict[str, dict] = {
    # 32 px images (CIFAR's own size) in 8 px patches: 16 patch tokens + [CLS]; the ViT-S ratios
    # (head dim 64, MLP 4x) at a width that trains in milliseconds per step on two cores.
    "tiny": dict(image_size=32, patch_size=8, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                 num_attention_heads=2, num_labels=100),
    "small": dict(image_size=64, patch_size=8, hidden_size=192, intermediate_size=768, num_hidden_layers=6,
                  num_attention_heads=3, num_labels=100),
    # LayerNorm epsilon 1e-6 as in timm's ViTs, whose published checkpoints this loads (transformers' ViT default,
    # 1e-12, moves ViT-S's logits by ~4e-4 against timm's on the same weights).
    "paper": dict(image_size=224, patch_size=16, hidden_size=384, intermediate_size=1536, num_hidden_layers=12,
                  num_attention_heads=6, num_labels=1000, layer_norm_eps=1e-6),
}


config, build = classifier_builders(ViTForImageClassification, ViTConfig, CONFIGS)
