"""nanoVLM-style vision-language model composed from transformers parts.

SigLIP vision encoder → pixel shuffle (factor 2: 4 neighbouring patches become one token with
4× the channels) → linear projector → Llama-style decoder. The image tokens are prefixed to the
caption and the loss is cross-entropy on the caption tokens only. At the paper size (SigLIP-B/16-224,
SmolLM2-135M decoder) 196 patches become 49 image tokens and the model has ~222 M parameters.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, SiglipVisionConfig, SiglipVisionModel

from gradeff.axes.models._weights import instantiate

__all__ = ["CONFIGS", "NanoVLM", "build", "pixel_shuffle"]

IGNORE_INDEX = -100  # the label value HF losses skip

CONFIGS: dict[str, dict] = {
    "tiny": dict(
        vision=dict(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, vision_use_head=False),
        decoder=dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                     tie_word_embeddings=True, bos_token_id=2, eos_token_id=2, pad_token_id=0),
        shuffle_factor=2,
    ),
    "small": dict(
        vision=dict(image_size=64, patch_size=8, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                    num_attention_heads=4, vision_use_head=False),
        decoder=dict(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                     num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                     tie_word_embeddings=True, bos_token_id=2, eos_token_id=2, pad_token_id=0),
        shuffle_factor=2,
    ),
    # nanoVLM-222M: SigLIP-B/16-224 (no pooling head) + SmolLM2-135M.
    "paper": dict(
        vision=dict(image_size=224, patch_size=16, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                    num_attention_heads=12, vision_use_head=False),
        decoder=dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                     rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
        shuffle_factor=2,
    ),
}


def pixel_shuffle(x: torch.Tensor, factor: int) -> torch.Tensor:
    """Merge each ``factor × factor`` block of patch tokens into one token (space-to-depth).

    Args:
        x: ``(batch, h*w, dim)`` patch embeddings on a square grid.
        factor: block side; must divide the grid side.

    Returns:
        ``(batch, h*w / factor², dim * factor²)``.
    """
    batch, seq, dim = x.shape
    side = int(round(seq**0.5))
    if side * side != seq or side % factor:
        raise ValueError(f"pixel_shuffle needs a square grid divisible by {factor}, got {seq} tokens")
    x = x.reshape(batch, side // factor, factor, side // factor, factor, dim)
    x = x.permute(0, 1, 3, 2, 4, 5)
    return x.reshape(batch, (side // factor) ** 2, factor * factor * dim)


class NanoVLM(nn.Module):
    """Vision encoder + pixel-shuffle projector + causal decoder; loss on caption tokens only."""

    def __init__(self, vision: SiglipVisionModel, decoder: LlamaForCausalLM, shuffle_factor: int):
        super().__init__()
        self.vision = vision
        self.decoder = decoder
        self.shuffle_factor = shuffle_factor
        in_dim = vision.config.hidden_size * shuffle_factor**2
        self.projector = nn.Linear(in_dim, decoder.config.hidden_size, bias=False)
        grid = vision.config.image_size // vision.config.patch_size
        self.num_image_tokens = (grid // shuffle_factor) ** 2

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None) -> None:
        """Checkpoint the layers of both towers (same API as a transformers model)."""
        self.vision.activation_checkpointing_enable(activation_checkpointing_kwargs)
        self.decoder.activation_checkpointing_enable(activation_checkpointing_kwargs)

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        """Prefix image tokens to the caption; ``labels`` mark caption targets (image positions ignored)."""
        patches = self.vision(pixel_values=pixel_values).last_hidden_state
        image_embeds = self.projector(pixel_shuffle(patches, self.shuffle_factor))
        text_embeds = self.decoder.get_input_embeddings()(input_ids)
        inputs_embeds = torch.cat([image_embeds, text_embeds], dim=1)
        full_labels = None
        if labels is not None:
            ignore = labels.new_full((labels.shape[0], image_embeds.shape[1]), IGNORE_INDEX)
            full_labels = torch.cat([ignore, labels], dim=1)
        return self.decoder(inputs_embeds=inputs_embeds, labels=full_labels)


def _configs(profile: str, vocab_size: int | None) -> tuple[SiglipVisionConfig, LlamaConfig, int]:
    spec = CONFIGS[profile]
    decoder = dict(spec["decoder"])
    if vocab_size is not None:
        decoder["vocab_size"] = vocab_size
    return SiglipVisionConfig(**spec["vision"]), LlamaConfig(**decoder, use_cache=False), spec["shuffle_factor"]


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu") -> NanoVLM:
    """Build the VLM; ``weights_dir`` may hold ``vision/`` and/or ``decoder/`` ``save_pretrained`` folders.

    The projector is always freshly initialised: it is what a nanoVLM run trains from scratch.
    """
    vision_cfg, decoder_cfg, factor = _configs(profile, vocab_size)
    root = Path(weights_dir) if weights_dir is not None else None
    vision_dir = root / "vision" if root is not None and (root / "vision").is_dir() else None
    decoder_dir = root / "decoder" if root is not None and (root / "decoder").is_dir() else None
    if root is not None and vision_dir is None and decoder_dir is None:
        raise FileNotFoundError(f"{root} has neither a vision/ nor a decoder/ weights folder")
    vision = instantiate(SiglipVisionModel, vision_cfg, weights_dir=vision_dir, device=device)
    decoder = instantiate(LlamaForCausalLM, decoder_cfg, weights_dir=decoder_dir, device=device)
    with torch.device(device):
        return NanoVLM(vision, decoder, factor)
