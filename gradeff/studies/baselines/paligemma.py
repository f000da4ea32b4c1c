"""PaliGemma prompted to classify (the PEFT study's PaliGemma baseline; it needs published weights).

``transformers.PaliGemmaForConditionalGeneration``: a SigLIP image tower, a linear projection and a Gemma decoder
that reads ``[image tokens] [BOS] prompt "\\n"`` as a *prefix* attended bidirectionally, then the answer
causally. The paper profile is ``google/paligemma-3b-pt-224``: SigLIP-So400m/14 at 224 px (256 image tokens)
and Gemma-2B; 2.92 B parameters (2,923,466,480 built here). Each class is scored by the log-likelihood of its name as
the answer to
:data:`PROMPT` (:mod:`gradeff.studies.baselines.prompted`, with a bidirectional prefix), positions counted from 1 as
PaliGemma counts them. The model is gated on the hub and random weights would score at chance, so its cells need
weights (``--gradeff-weights paligemma=PATH``, a ``save_pretrained`` folder with its tokenizer, or the hub id with
``--gradeff-allow-hub``) and skip without them.
"""

from __future__ import annotations

import torch
from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

from gradeff.axes.models._weights import instantiate
from gradeff.studies.baselines.classnames import class_names
from gradeff.studies.baselines.prompted import PromptedConditionalGeneration, resized
from gradeff.studies.baselines.prompts import ClassTokens, load_tokenizer, synthetic_class_tokens

__all__ = ["CONFIGS", "PROMPT", "PromptedPaliGemma", "build", "config"]

# PaliGemma's pretraining task prefix for questions ("answer en ..."); the class name is the answer.
PROMPT = "answer en what is in this image?"


def _shape(*, vision, text, vocab_size, image_tokens):
    image_size, patch_size, width, layers, heads, mlp = vision
    text_width, text_layers, text_heads, kv_heads, head_dim, text_mlp = text
    return dict(
        # PaliGemma reads every patch: SigLIP's attention-pooling head is not part of it.
        vision_config=dict(image_size=image_size, patch_size=patch_size, hidden_size=width, num_hidden_layers=layers,
                           num_attention_heads=heads, intermediate_size=mlp, projection_dim=text_width,
                           vision_use_head=False),
        text_config=dict(vocab_size=vocab_size, hidden_size=text_width, num_hidden_layers=text_layers,
                         num_attention_heads=text_heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                         intermediate_size=text_mlp, num_image_tokens=image_tokens),
        projection_dim=text_width,
        # The image placeholder: the first id past Gemma's text vocabulary, as in the released configs.
        image_token_id=vocab_size - 64 if vocab_size > 1024 else vocab_size - 1,
    )


CONFIGS: dict[str, dict] = {
    # 32 px in 8 px patches: 16 image tokens.
    "tiny": _shape(vision=(32, 8, 32, 2, 2, 64), text=(64, 2, 4, 1, 16, 128), vocab_size=256, image_tokens=16),
    "small": _shape(vision=(64, 8, 128, 4, 4, 512), text=(256, 4, 4, 1, 64, 1024), vocab_size=1024, image_tokens=64),
    # google/paligemma-3b-pt-224: SigLIP-So400m/14 at 224 px + Gemma-2B. Gemma's 256,000 tokens, 1,024 location and
    # 128 segmentation tokens make 257,152; the image token follows, padded to 257,216 ids.
    "paper": _shape(vision=(224, 14, 1152, 27, 16, 4304), text=(2048, 18, 8, 1, 256, 16384), vocab_size=257216,
                    image_tokens=256),
}


def config(profile: str) -> PaliGemmaConfig:
    """The configuration of a profile."""
    return PaliGemmaConfig(**CONFIGS[profile])


class PromptedPaliGemma(PromptedConditionalGeneration):
    """PaliGemma scoring class names as the answer after ``[image] [BOS] prompt "\\n"``, its prefix bidirectional."""

    bidirectional_prefix = True

    def image_embeds(self, pixel_values: torch.Tensor) -> torch.Tensor:
        pixel_values = resized(pixel_values, self.model.config.vision_config.image_size)
        inner = self.model.model
        return inner.get_image_features(pixel_values.to(inner.dtype)).pooler_output

    def decode(self, inputs_embeds, attention_mask, position_ids):
        # PaliGemma counts positions from 1.
        return self.model.model.language_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                               position_ids=position_ids + 1, use_cache=False).last_hidden_state


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu") -> PromptedPaliGemma:
    """Build the prompted classifier of ``num_labels`` classes (100 by default); ``vocab_size`` is ignored.

    ``weights_dir``: a ``PaliGemmaForConditionalGeneration.save_pretrained`` folder (a hub snapshot), read offline;
    its tokenizer makes the prompt and the real class names (each tokenized as the answer, after the newline).
    """
    model = instantiate(PaliGemmaForConditionalGeneration, config(profile), weights_dir=weights_dir, device=device)
    text = model.config.text_config
    num_labels = num_labels or 100
    tokenizer = load_tokenizer(weights_dir)
    if tokenizer is not None:
        def encode(string: str) -> tuple[int, ...]:
            return tuple(tokenizer(string, add_special_tokens=False)["input_ids"])

        tokens = ClassTokens(prompt=encode(PROMPT) + encode("\n"),
                             names=tuple(encode(name) for name in class_names(num_labels)), source="tokenizer")
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else text.bos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    else:
        reserved = {text.bos_token_id, text.eos_token_id, text.pad_token_id, model.config.image_token_id}
        tokens = synthetic_class_tokens(num_labels, vocab_size=text.vocab_size, reserved=reserved - {None})
        bos, pad = text.bos_token_id, text.pad_token_id
    with torch.device(device):
        return PromptedPaliGemma(model, tokens, after_image=(bos,), pad=pad)
