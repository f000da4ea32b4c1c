"""ModernBERT encoder with a masked-LM head, built from ``transformers.ModernBertConfig``."""

from __future__ import annotations

from transformers import ModernBertConfig, ModernBertForMaskedLM

from gradeff.axes.models._weights import instantiate

__all__ = ["CONFIGS", "build", "config"]

# Special token ids for the synthetic tasks' small vocabularies (see gradeff.axes.data.text):
# 0 pad, 1 mask, 2 bos/cls, 3 sep. The paper config keeps ModernBERT-base's own ids.
_SMALL_VOCAB_IDS = dict(pad_token_id=0, bos_token_id=2, cls_token_id=2, eos_token_id=3, sep_token_id=3)

CONFIGS: dict[str, dict] = {
    "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, max_position_embeddings=512, local_attention=16,
                 **_SMALL_VOCAB_IDS),
    "small": dict(vocab_size=1024, hidden_size=256, intermediate_size=384, num_hidden_layers=6,
                  num_attention_heads=4, max_position_embeddings=1024, local_attention=64,
                  **_SMALL_VOCAB_IDS),
    # ModernBERT-base: 22 layers, hidden 768, GeGLU MLP 1152, alternating global/local (128) attention.
    "paper": dict(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                  num_attention_heads=12, max_position_embeddings=8192, local_attention=128),
}


def config(profile: str, *, vocab_size: int | None = None) -> ModernBertConfig:
    """The ``ModernBertConfig`` of a profile, optionally with another vocabulary size."""
    kwargs = dict(CONFIGS[profile])
    if vocab_size is not None:
        kwargs["vocab_size"] = vocab_size
    return ModernBertConfig(**kwargs)


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu"):
    """Build the encoder with its MLM head; ``num_labels`` is ignored."""
    return instantiate(ModernBertForMaskedLM, config(profile, vocab_size=vocab_size), weights_dir=weights_dir,
                       device=device)
