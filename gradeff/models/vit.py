"""Vision Transformer for image classification, built from ``transformers.ViTConfig``."""

from __future__ import annotations

from transformers import ViTConfig, ViTForImageClassification

from gradeff.models._weights import classifier_builders

__all__ = ["CONFIGS", "build", "config"]

CONFIGS: dict[str, dict] = {
    # 32 px images in 8 px patches: 16 patch tokens + [CLS].
    "tiny": dict(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_labels=10),
    "small": dict(image_size=64, patch_size=8, hidden_size=256, intermediate_size=1024, num_hidden_layers=6,
                  num_attention_heads=8, num_labels=10),
    # ViT-B/16 at 224 px with an ImageNet-size head: ~86.6 M parameters.
    "paper": dict(image_size=224, patch_size=16, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                  num_attention_heads=12, num_labels=1000),
}


config, build = classifier_builders(ViTForImageClassification, ViTConfig, CONFIGS)
