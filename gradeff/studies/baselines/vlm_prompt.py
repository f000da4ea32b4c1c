"""The suite's nanoVLM, prompted to classify (``vlm_prompt``).

A model of its own rather than a method on ``vlm``: prompting turns a captioning model into a
classifier (its inputs, outputs and task change: images and labels of a classification dataset in,
one logit per class out), which is what a model of the grid is, while a method only chooses which
parameters train.

The decoder reads ``[image tokens] [BOS] "a photo of a"`` and each class is scored by the
log-likelihood of its name (:mod:`gradeff.studies.baselines.prompted`); the image tokens come first, as in
the captions ``vlm`` is trained on. Images of another size than the vision tower's are resized.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from gradeff.axes.data.dataset import SPECIAL_TOKENS
from gradeff.axes.models import vlm
from gradeff.axes.models.vlm import NanoVLM, pixel_shuffle
from gradeff.studies.baselines.classnames import class_names
from gradeff.studies.baselines.prompted import PromptedClassifier, resized
from gradeff.studies.baselines.prompts import load_tokenizer, synthetic_class_tokens, tokenizer_class_tokens

__all__ = ["CONFIGS", "PromptedNanoVLM", "build"]

CONFIGS = vlm.CONFIGS
_PROJECTOR = "projector.safetensors"


class PromptedNanoVLM(PromptedClassifier):
    """nanoVLM scoring class names after ``[image] [BOS] prompt``."""

    def __init__(self, model: NanoVLM, tokens, *, bos: int, pad: int):
        super().__init__(tokens, before_image=(), after_image=(bos,), pad=pad)
        self.vlm = model

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None) -> None:
        """Checkpoint the layers of both towers (same API as a transformers model)."""
        self.vlm.activation_checkpointing_enable(activation_checkpointing_kwargs)

    def image_embeds(self, pixel_values: torch.Tensor) -> torch.Tensor:
        pixel_values = resized(pixel_values, self.vlm.vision.config.image_size)
        patches = self.vlm.vision(pixel_values=pixel_values).last_hidden_state
        return self.vlm.projector(pixel_shuffle(patches, self.vlm.shuffle_factor))

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.vlm.decoder.get_input_embeddings()(ids)

    def decode(self, inputs_embeds, attention_mask, position_ids):
        return self.vlm.decoder.model(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                      position_ids=position_ids, use_cache=False).last_hidden_state

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.vlm.decoder.lm_head(hidden)


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu") -> PromptedNanoVLM:
    """Build the prompted classifier of ``num_labels`` classes (100 by default).

    ``weights_dir`` holds what :func:`gradeff.axes.models.vlm.build` loads (``vision/``, ``decoder/``) and
    may hold the trained projector, ``projector.safetensors`` (without it the projector is freshly
    initialised and the decoder cannot read the image), and a tokenizer (in the folder itself or in
    ``decoder/``), which makes the prompts from the real class names.
    """
    model = vlm.build(profile, vocab_size=vocab_size, weights_dir=weights_dir, device=device)
    root = Path(weights_dir) if weights_dir is not None else None
    if root is not None and (root / _PROJECTOR).is_file():
        model.projector.load_state_dict(load_file(root / _PROJECTOR, device=str(device)))
    tokenizer = load_tokenizer(root, root / "decoder" if root is not None else None)
    decoder = model.decoder.config
    num_labels = num_labels or 100
    if tokenizer is not None:
        tokens = tokenizer_class_tokens(tokenizer, class_names(num_labels))
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else decoder.bos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    else:
        tokens = synthetic_class_tokens(num_labels, vocab_size=decoder.vocab_size,
                                        reserved=SPECIAL_TOKENS.values())
        bos, pad = SPECIAL_TOKENS["bos"], SPECIAL_TOKENS["pad"]
    with torch.device(device):
        return PromptedNanoVLM(model, tokens, bos=bos, pad=pad)
