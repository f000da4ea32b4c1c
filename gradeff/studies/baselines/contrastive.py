"""Zero-shot classification with a contrastive image-text model (CLIP, SigLIP).

The logits of an image are its similarity to one text prompt per class, as the model scores an
image-text pair: ``exp(logit_scale) · cos(image, text)`` (+ ``logit_bias`` for SigLIP). The loss is
the cross-entropy of those logits against the labels.

The class prompts' text embeddings do not depend on the image: they are computed once and cached
per (device, dtype). The cache stays valid as long as the text tower's weights do; any in-place
change of one of them (an optimizer step, a ``load_state_dict``) bumps the parameter's version
counter and the next call recomputes. When the text tower trains (gradients enabled and a text
parameter requiring them), the embeddings are computed afresh in every forward so that gradients
reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import ImageClassifierOutput

from gradeff.axes.models._weights import instantiate
from gradeff.studies.baselines.classnames import class_names
from gradeff.studies.baselines.prompts import PROMPT, load_tokenizer, synthetic_class_tokens

__all__ = ["TextStyle", "ZeroShotClassifier", "build_zero_shot", "class_text_inputs"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TextStyle:
    """How a model's text tower reads a prompt (its tokenizer's conventions).

    Attributes:
        bos / eos / pad: special ids put before, after and behind the synthetic ids (``bos=None``: none).
        length: pad every prompt to this many tokens (SigLIP was trained at a fixed 64); ``None``:
            to the longest prompt.
        attention_mask: pass an attention mask to the text tower (CLIP); SigLIP reads its padding as it
            was trained, without one.
    """

    bos: int | None
    eos: int
    pad: int
    length: int | None
    attention_mask: bool

    @property
    def reserved(self) -> set[int]:
        return {i for i in (self.bos, self.eos, self.pad) if i is not None}


def class_text_inputs(num_classes: int, *, vocab_size: int, style: TextStyle, max_length: int,
                      tokenizer=None, prompt: str = PROMPT) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of one prompt per class.

    Without a tokenizer: ``[bos] + prompt + name + [eos]`` with the synthetic ids of
    :func:`~gradeff.studies.baselines.prompts.synthetic_class_tokens`, padded with ``pad``. With one: the
    tokenizer's own encoding of ``"a photo of a <class name>"`` (its special tokens, its padding).
    """
    if tokenizer is not None:
        texts = [f"{prompt} {name}" for name in class_names(num_classes)]
        padding = "max_length" if style.length is not None else "longest"
        encoded = tokenizer(texts, padding=padding, max_length=style.length or max_length, truncation=True,
                            return_tensors="pt")
        mask = encoded.get("attention_mask", torch.ones_like(encoded["input_ids"]))
        return {"input_ids": encoded["input_ids"], "attention_mask": mask}
    tokens = synthetic_class_tokens(num_classes, vocab_size=vocab_size, reserved=style.reserved)
    bos = [] if style.bos is None else [style.bos]
    rows = [bos + list(text) + [style.eos] for text in tokens.texts()]
    longest = max(len(row) for row in rows)
    width = style.length or longest
    if longest > min(width, max_length):
        raise ValueError(f"class prompts of {longest} tokens do not fit the text tower's {min(width, max_length)} "
                         "positions")
    ids = torch.full((len(rows), width), style.pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask}


class ZeroShotClassifier(nn.Module):
    """A ``CLIPModel`` or ``SiglipModel`` as a classifier over a fixed set of class prompts.

    Args:
        model: the contrastive model (``get_image_features``, ``get_text_features``, ``logit_scale``,
            and for SigLIP ``logit_bias``).
        text_inputs: ``input_ids`` and ``attention_mask`` of one prompt per class
            (:func:`class_text_inputs`).
        attention_mask: pass the prompts' attention mask to the text tower.
    """

    def __init__(self, model: nn.Module, text_inputs: dict[str, torch.Tensor], *, attention_mask: bool):
        super().__init__()
        self.model = model
        self.use_attention_mask = attention_mask
        # Not persistent: the prompts are rebuilt with the model, never saved with its weights.
        self.register_buffer("class_input_ids", text_inputs["input_ids"], persistent=False)
        self.register_buffer("class_attention_mask", text_inputs["attention_mask"], persistent=False)
        self._text_cache: dict[tuple, tuple[tuple, torch.Tensor]] = {}

    @property
    def num_labels(self) -> int:
        return self.class_input_ids.shape[0]

    @property
    def config(self):
        return self.model.config

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None) -> None:
        """Checkpoint the layers of both towers (same API as a transformers model)."""
        self.model.activation_checkpointing_enable(activation_checkpointing_kwargs)

    def _text_parameters(self) -> list[nn.Parameter]:
        return [p for name, p in self.model.named_parameters() if name.startswith(("text_model.", "text_projection."))]

    def _stamp(self) -> tuple:
        # A parameter's version counter moves with every in-place change of its values.
        return tuple((id(p), p._version) for p in self._text_parameters())

    def encode_text(self) -> torch.Tensor:
        """The class prompts' normalised text embeddings ``(num_classes, dim)``, computed now."""
        kwargs = {"input_ids": self.class_input_ids}
        if self.use_attention_mask:
            kwargs["attention_mask"] = self.class_attention_mask
        return F.normalize(self.model.get_text_features(**kwargs).pooler_output, dim=-1)

    def class_embeddings(self) -> torch.Tensor:
        """The class prompts' normalised text embeddings, from the cache unless the text tower trains."""
        if torch.is_grad_enabled() and any(p.requires_grad for p in self._text_parameters()):
            return self.encode_text()
        key = (self.class_input_ids.device, self.model.logit_scale.dtype)
        stamp = self._stamp()
        cached = self._text_cache.get(key)
        if cached is None or cached[0] != stamp:
            with torch.no_grad():
                cached = self._text_cache[key] = (stamp, self.encode_text())
        return cached[1]

    def set_class_embeddings(self, embeddings: torch.Tensor) -> None:
        """Use these class embeddings (normalised here) until the text tower's weights change.

        For class embeddings made elsewhere, e.g. averaged over several prompt templates.
        """
        if embeddings.shape[0] != self.num_labels:
            raise ValueError(f"{embeddings.shape[0]} class embeddings for {self.num_labels} classes")
        key = (self.class_input_ids.device, self.model.logit_scale.dtype)
        normalised = F.normalize(embeddings.detach().to(device=key[0], dtype=key[1]), dim=-1)
        self._text_cache[key] = (self._stamp(), normalised)

    def image_embeddings(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Normalised image embeddings ``(batch, dim)``; other resolutions interpolate the position embeddings."""
        resize = pixel_values.shape[-1] != self.model.config.vision_config.image_size
        features = self.model.get_image_features(pixel_values=pixel_values, interpolate_pos_encoding=resize)
        return F.normalize(features.pooler_output, dim=-1)

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None) -> ImageClassifierOutput:
        """Logits ``(batch, num_classes)``: the model's image-text scores against every class prompt."""
        image = self.image_embeddings(pixel_values)
        text = self.class_embeddings().to(image.dtype)
        logits = image @ text.T * self.model.logit_scale.exp()
        bias = getattr(self.model, "logit_bias", None)
        if bias is not None:
            logits = logits + bias
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return ImageClassifierOutput(loss=loss, logits=logits)


def build_zero_shot(model_cls, config, *, style: Callable[[object], TextStyle], num_labels: int, weights_dir,
                    device) -> ZeroShotClassifier:
    """A zero-shot classifier of ``num_labels`` classes around ``model_cls``.

    With ``weights_dir`` the model is loaded from it (offline) and a tokenizer saved in the same
    folder, if there is one, tokenizes the real class names (:mod:`gradeff.studies.baselines.classnames`).

    Args:
        style: the text tower's conventions, from its (possibly loaded) text configuration.
    """
    model = instantiate(model_cls, config, weights_dir=weights_dir, device=device)
    tokenizer = load_tokenizer(weights_dir)
    text_config = model.config.text_config
    text_style = style(text_config)
    inputs = class_text_inputs(num_labels, vocab_size=text_config.vocab_size, style=text_style,
                               max_length=text_config.max_position_embeddings, tokenizer=tokenizer)
    return ZeroShotClassifier(model, {k: v.to(device) for k, v in inputs.items()},
                              attention_mask=text_style.attention_mask)
