"""CLIP ViT-B/16 as a zero-shot classifier (the PEFT study's OpenCLIP baseline).

``transformers.CLIPModel`` at the shape of ``openai/clip-vit-base-patch16``: a ViT-B/16 image tower
(width 768, 12 layers, 224 px), a 12-layer text Transformer of width 512 with 77 positions and
49,408 tokens, both projected to 512 dimensions; 149.6 M parameters. The logits are the model's
scaled cosine similarities to one prompt per class (:mod:`gradeff.studies.baselines.contrastive`).
"""

from __future__ import annotations

from transformers import CLIPConfig, CLIPModel

from gradeff.studies.baselines.contrastive import TextStyle, ZeroShotClassifier, build_zero_shot

__all__ = ["CONFIGS", "build", "config", "text_style"]


def _towers(*, image_size, patch_size, vision, text, vocab_size, positions, projection):
    width, layers, heads = vision
    text_width, text_layers, text_heads = text
    return dict(
        vision_config=dict(image_size=image_size, patch_size=patch_size, hidden_size=width,
                           intermediate_size=4 * width, num_hidden_layers=layers, num_attention_heads=heads),
        # BOS and EOS are the vocabulary's last two ids, as in OpenAI's tokenizer; the text is pooled at
        # the first EOS.
        text_config=dict(vocab_size=vocab_size, hidden_size=text_width, intermediate_size=4 * text_width,
                         num_hidden_layers=text_layers, num_attention_heads=text_heads,
                         max_position_embeddings=positions, bos_token_id=vocab_size - 2,
                         eos_token_id=vocab_size - 1, pad_token_id=vocab_size - 1),
        projection_dim=projection,
    )


CONFIGS: dict[str, dict] = {
    # 32 px in 8 px patches, as the tiny ViT-S; a 512-token vocabulary and 16 positions hold the class prompts.
    "tiny": _towers(image_size=32, patch_size=8, vision=(64, 2, 2), text=(64, 2, 2), vocab_size=512, positions=16,
                    projection=64),
    "small": _towers(image_size=64, patch_size=8, vision=(192, 4, 3), text=(128, 4, 2), vocab_size=1024,
                     positions=32, projection=128),
    # openai/clip-vit-base-patch16.
    "paper": _towers(image_size=224, patch_size=16, vision=(768, 12, 12), text=(512, 12, 8), vocab_size=49408,
                     positions=77, projection=512),
}


def config(profile: str) -> CLIPConfig:
    """The configuration of a profile."""
    return CLIPConfig(**CONFIGS[profile])


def text_style(text_config) -> TextStyle:
    """CLIP's text conventions: BOS, prompt, EOS (the vocabulary's last ids), padded with EOS, with a mask.

    A legacy configuration (``eos_token_id == 2``) pools at the highest id, which is then the EOS too.
    """
    vocab = text_config.vocab_size
    return TextStyle(bos=vocab - 2, eos=vocab - 1, pad=vocab - 1, length=None, attention_mask=True)


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu") -> ZeroShotClassifier:
    """Build the zero-shot classifier of ``num_labels`` classes (100 by default); ``vocab_size`` is ignored.

    ``weights_dir``: a ``CLIPModel.save_pretrained`` folder (a hub snapshot of the model), read
    offline; a tokenizer saved in it makes the prompts from the real class names.
    """
    return build_zero_shot(CLIPModel, config(profile), style=text_style, num_labels=num_labels or 100,
                           weights_dir=weights_dir, device=device)
