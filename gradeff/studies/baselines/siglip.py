"""SigLIP B/16-224 as a zero-shot classifier (the PEFT study's SigLIP baseline).

``transformers.SiglipModel`` at the shape of ``google/siglip-base-patch16-224``: a ViT-B/16 image
tower pooled by attention (MAP head), a 12-layer text Transformer of width 768 with 64 positions
and 32,000 tokens, pooled at the last position; 203.2 M parameters. SigLIP's pairwise score has a
learned bias besides the scale: ``exp(t) · cos(image, text) + b`` (:mod:`gradeff.studies.baselines.contrastive`).
"""

from __future__ import annotations

from transformers import SiglipConfig, SiglipModel

from gradeff.studies.baselines.contrastive import TextStyle, ZeroShotClassifier, build_zero_shot

__all__ = ["CONFIGS", "build", "config", "text_style"]

# SigLIP's SentencePiece vocabulary: padding and EOS are both id 1; there is no BOS.
_PAD = 1


def _towers(*, image_size, patch_size, width, layers, heads, vocab_size, positions):
    tower = dict(hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers, num_attention_heads=heads)
    return dict(
        vision_config=dict(image_size=image_size, patch_size=patch_size, **tower),
        # The text head projects to the image width: the two embeddings meet in one space.
        text_config=dict(vocab_size=vocab_size, max_position_embeddings=positions, pad_token_id=_PAD,
                         eos_token_id=_PAD, bos_token_id=None, **tower),
    )


CONFIGS: dict[str, dict] = {
    "tiny": _towers(image_size=32, patch_size=8, width=64, layers=2, heads=2, vocab_size=512, positions=16),
    "small": _towers(image_size=64, patch_size=8, width=192, layers=4, heads=3, vocab_size=1024, positions=32),
    # google/siglip-base-patch16-224.
    "paper": _towers(image_size=224, patch_size=16, width=768, layers=12, heads=12, vocab_size=32000, positions=64),
}


def config(profile: str) -> SiglipConfig:
    """The configuration of a profile."""
    return SiglipConfig(**CONFIGS[profile])


def text_style(text_config) -> TextStyle:
    """SigLIP's text conventions: prompt, EOS, padded to the full text length, no attention mask."""
    vocab = text_config.vocab_size
    pad = text_config.pad_token_id if text_config.pad_token_id is not None else _PAD
    eos = text_config.eos_token_id if text_config.eos_token_id is not None and text_config.eos_token_id < vocab else pad
    return TextStyle(bos=None, eos=eos, pad=pad, length=text_config.max_position_embeddings, attention_mask=False)


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu") -> ZeroShotClassifier:
    """Build the zero-shot classifier of ``num_labels`` classes (100 by default); ``vocab_size`` is ignored.

    ``weights_dir``: a ``SiglipModel.save_pretrained`` folder (a hub snapshot of the model), read
    offline; a tokenizer saved in it makes the prompts from the real class names.
    """
    return build_zero_shot(SiglipModel, config(profile), style=text_style, num_labels=num_labels or 100,
                           weights_dir=weights_dir, device=device)
