"""SmolVLM prompted to classify (the PEFT study's small autoregressive VLM baseline).

``transformers.Idefics3ForConditionalGeneration``, the architecture of SmolVLM: a SigLIP image
encoder, a pixel shuffle by ``scale_factor`` (``s²`` neighbouring patches become one token), an MLP
connector and a Llama decoder (SmolLM2). The paper profile is the shape of
``HuggingFaceTB/SmolVLM-Instruct``, the model the name SmolVLM stands for: SigLIP-SO400M at 384 px
in 14 px patches (729 patches → 81 image tokens) and SmolLM2-1.7B with untied embeddings; 2.25 B
parameters.

The decoder reads ``[BOS] [image tokens] "a photo of a"`` and each class is scored by the
log-likelihood of its name (:mod:`gradeff.studies.baselines.prompted`). With a real tokenizer (saved with
the weights), the image is wrapped in SmolVLM's own image-block tokens and the turn is SmolVLM's
chat format, the answer starting with the prompt. Images are resized to the encoder's size: the
pixel shuffle needs its full patch grid.
"""

from __future__ import annotations

import torch
from transformers import Idefics3Config, Idefics3ForConditionalGeneration

from gradeff.axes.models._weights import instantiate
from gradeff.studies.baselines.classnames import class_names
from gradeff.studies.baselines.prompted import PromptedConditionalGeneration, resized
from gradeff.studies.baselines.prompts import load_tokenizer, synthetic_class_tokens, tokenizer_class_tokens

__all__ = ["CHAT", "CONFIGS", "PromptedSmolVLM", "build", "config"]


def _shape(*, vision, text, vocab_size, scale_factor, positions, **text_extra):
    image_size, patch_size, width, layers, heads, mlp = vision
    text_width, text_layers, text_heads, kv_heads, text_mlp = text
    return dict(
        vision_config=dict(image_size=image_size, patch_size=patch_size, hidden_size=width, num_hidden_layers=layers,
                           num_attention_heads=heads, intermediate_size=mlp),
        text_config=dict(model_type="llama", vocab_size=vocab_size, hidden_size=text_width,
                         num_hidden_layers=text_layers, num_attention_heads=text_heads, num_key_value_heads=kv_heads,
                         intermediate_size=text_mlp, max_position_embeddings=positions, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, **text_extra),
        scale_factor=scale_factor,
        # The image placeholder is the vocabulary's last id (never a synthetic word).
        image_token_id=vocab_size - 1,
        tie_word_embeddings=False,
    )


CONFIGS: dict[str, dict] = {
    # 32 px in 8 px patches: 16 patches, shuffled by 2 into 4 image tokens.
    "tiny": _shape(vision=(32, 8, 64, 2, 2, 256), text=(64, 2, 4, 2, 128), vocab_size=256, scale_factor=2,
                   positions=256, bos_token_id=1, eos_token_id=2, pad_token_id=0),
    "small": _shape(vision=(64, 8, 192, 4, 3, 768), text=(256, 4, 8, 4, 688), vocab_size=1024, scale_factor=2,
                    positions=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0),
    # HuggingFaceTB/SmolVLM-Instruct: SigLIP-SO400M/14 at 384 px + SmolLM2-1.7B.
    "paper": _shape(vision=(384, 14, 1152, 27, 16, 4304), text=(2048, 24, 32, 32, 8192), vocab_size=49155,
                    scale_factor=3, positions=16384, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                    rope_parameters={"rope_type": "default", "rope_theta": 273768.0}),
}

# SmolVLM's chat turn around the image, used with its real tokenizer: text after BOS (SmolVLM's BOS is
# <|im_start|>, which opens the turn) and before the image block, and text after it; the image block is
# <fake_token_around_image><global-img> [image] <fake_token_around_image>.
CHAT = ("User:", "Classify the image.<end_of_utterance>\nAssistant:")
_IMAGE_OPEN = ("<fake_token_around_image>", "<global-img>")
_IMAGE_CLOSE = ("<fake_token_around_image>",)


def config(profile: str) -> Idefics3Config:
    """The configuration of a profile."""
    return Idefics3Config(**CONFIGS[profile])


class PromptedSmolVLM(PromptedConditionalGeneration):
    """SmolVLM scoring class names after ``[text] [image] [text] prompt``."""

    def image_embeds(self, pixel_values: torch.Tensor) -> torch.Tensor:
        pixel_values = resized(pixel_values, self.model.config.vision_config.image_size)
        inner = self.model.model
        # The vision tower directly (every image is whole: no padding images to drop, no patch mask).
        patches = inner.vision_model(pixel_values=pixel_values.to(inner.dtype)).last_hidden_state
        return inner.connector(patches)

    def decode(self, inputs_embeds, attention_mask, position_ids):
        return self.model.model.text_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                           position_ids=position_ids, use_cache=False).last_hidden_state


def _special_ids(tokenizer, tokens: tuple[str, ...]) -> tuple[int, ...]:
    """The ids of special tokens the tokenizer knows (those it does not are left out)."""
    ids = [tokenizer.convert_tokens_to_ids(token) for token in tokens]
    return tuple(i for i in ids if i is not None and i != tokenizer.unk_token_id)


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu") -> PromptedSmolVLM:
    """Build the prompted classifier of ``num_labels`` classes (100 by default); ``vocab_size`` is ignored.

    ``weights_dir``: an ``Idefics3ForConditionalGeneration.save_pretrained`` folder (a hub snapshot
    of SmolVLM), read offline; a tokenizer saved in it makes the prompts from the real class names
    in SmolVLM's chat format.
    """
    model = instantiate(Idefics3ForConditionalGeneration, config(profile), weights_dir=weights_dir, device=device)
    text = model.config.text_config
    num_labels = num_labels or 100
    tokenizer = load_tokenizer(weights_dir)
    if tokenizer is not None:
        tokens = tokenizer_class_tokens(tokenizer, class_names(num_labels))

        def encode(string: str) -> tuple[int, ...]:
            return tuple(tokenizer(string, add_special_tokens=False)["input_ids"])

        bos = (tokenizer.bos_token_id,) if tokenizer.bos_token_id is not None else ()
        before = bos + encode(CHAT[0]) + _special_ids(tokenizer, _IMAGE_OPEN)
        after = _special_ids(tokenizer, _IMAGE_CLOSE) + encode(CHAT[1])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    else:
        reserved = {text.bos_token_id, text.eos_token_id, text.pad_token_id, model.config.image_token_id}
        tokens = synthetic_class_tokens(num_labels, vocab_size=text.vocab_size, reserved=reserved - {None})
        before, after, pad = (text.bos_token_id,), (), text.pad_token_id
    with torch.device(device):
        return PromptedSmolVLM(model, tokens, before_image=before, after_image=after, pad=pad)
