"""Classification by prompting an autoregressive VLM: each class's logit is the log-likelihood of its name.

The decoder reads ``[text before the image] [image tokens] [prompt]`` (the prefix) and scores,
for every class ``k``, ``log P(name_k | prefix) = Σ_j log P(name_k[j] | prefix, name_k[:j])``.
The logits of an image are those ``K`` log-likelihoods; the loss is their cross-entropy against the
labels (the class posterior under a uniform prior).

All classes are scored in one decoder pass per image batch. The prefix is shared, so instead of
``K`` sequences the pass reads one: the prefix followed by every class's name tokens but its last,
as ``K`` branches of a tree. A custom attention mask lets each branch token see the whole prefix
and the earlier tokens of its own branch only, and its position is the one it would have in its
own sequence; so each branch is computed exactly as if it followed the prefix alone. The first
name token of every class is read from the prefix's last position. The sequence is
``prefix + K·(L-1)`` tokens long for names of ``L`` tokens, instead of ``K·(prefix + L)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import ImageClassifierOutput

from gradeff.studies.baselines.prompts import ClassTokens

__all__ = ["PromptedClassifier", "PromptedConditionalGeneration", "class_log_likelihoods", "tree_attention"]

# Rows of the language-model head evaluated at once: bounds the (rows, vocabulary) logits in memory.
_HEAD_ROWS = 2048


def tree_attention(prefix_len: int, branches: int, depth: int, *, device=None,
                   bidirectional_prefix: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention pattern and positions of a prefix followed by ``branches`` branches of ``depth`` tokens.

    Args:
        bidirectional_prefix: every prefix token sees the whole prefix (a prefix-LM such as PaliGemma, which
            reads the image and the prompt bidirectionally); otherwise the prefix is causal.

    Returns:
        ``(allowed, positions)``: ``allowed[q, k]`` is whether token ``q`` may attend to token ``k``
        (``(S, S)`` booleans, ``S = prefix_len + branches · depth``), and each token's position id
        (``prefix_len + j`` for the ``j``-th token of every branch).
    """
    size = prefix_len + branches * depth
    allowed = torch.zeros(size, size, dtype=torch.bool, device=device)
    prefix = torch.ones(prefix_len, prefix_len, dtype=torch.bool, device=device)
    allowed[:prefix_len, :prefix_len] = prefix if bidirectional_prefix else prefix.tril()
    allowed[prefix_len:, :prefix_len] = True
    branch = torch.arange(branches, device=device).repeat_interleave(depth)
    level = torch.arange(depth, device=device).repeat(branches)
    allowed[prefix_len:, prefix_len:] = (branch[:, None] == branch[None, :]) & (level[None, :] <= level[:, None])
    positions = torch.cat([torch.arange(prefix_len, device=device), prefix_len + level])
    return allowed, positions


def _token_log_probs(hidden: torch.Tensor, targets: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor]):
    """``log softmax(head(hidden))[target]`` row by row, ``_HEAD_ROWS`` rows of logits at a time."""
    flat, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    out = [F.log_softmax(head(rows).float(), dim=-1).gather(-1, t[:, None]).squeeze(-1)
           for rows, t in zip(flat.split(_HEAD_ROWS), flat_targets.split(_HEAD_ROWS))]
    return torch.cat(out).reshape(targets.shape)


def class_log_likelihoods(prefix: torch.Tensor, names: torch.Tensor, name_mask: torch.Tensor, *,
                          embed: Callable[[torch.Tensor], torch.Tensor],
                          decode: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                          head: Callable[[torch.Tensor], torch.Tensor],
                          bidirectional_prefix: bool = False) -> torch.Tensor:
    """``log P(name_k | prefix)`` of every class, for a batch of prefixes, in one decoder pass.

    Args:
        prefix: ``(batch, P, hidden)`` input embeddings of the prefix.
        names: ``(K, L)`` name token ids, right-padded.
        name_mask: ``(K, L)`` booleans, true on a name's own tokens (each name has at least one).
        embed: token ids → input embeddings.
        decode: ``(inputs_embeds, attention_mask (batch, 1, S, S) additive, position_ids (batch, S))`` →
            last hidden states ``(batch, S, hidden)``.
        head: hidden states → vocabulary logits.
        bidirectional_prefix: the decoder reads the prefix bidirectionally (see :func:`tree_attention`).

    Returns:
        ``(batch, K)`` summed log-probabilities of each class's name tokens.
    """
    batch, prefix_len, _ = prefix.shape
    classes, length = names.shape
    depth = length - 1
    allowed, positions = tree_attention(prefix_len, classes, depth, device=prefix.device,
                                        bidirectional_prefix=bidirectional_prefix)
    branches = embed(names[:, :-1].reshape(-1)).to(prefix.dtype)
    inputs = torch.cat([prefix, branches.unsqueeze(0).expand(batch, -1, -1)], dim=1)
    mask = torch.zeros(allowed.shape, dtype=prefix.dtype, device=prefix.device)
    mask = mask.masked_fill(~allowed, torch.finfo(prefix.dtype).min)
    hidden = decode(inputs, mask[None, None].expand(batch, 1, -1, -1), positions[None].expand(batch, -1))
    # The first name token of every class follows the prefix's last position.
    first = F.log_softmax(head(hidden[:, prefix_len - 1]).float(), dim=-1)[:, names[:, 0]]
    if depth == 0:
        return first
    # Token j + 1 of class k follows the branch token (k, j).
    rest_hidden = hidden[:, prefix_len:].reshape(batch, classes, depth, -1)
    rest = _token_log_probs(rest_hidden, names[:, 1:].expand(batch, -1, -1), head)
    return first + (rest * name_mask[:, 1:]).sum(dim=-1)


def resized(pixel_values: torch.Tensor, size: int) -> torch.Tensor:
    """Images at the vision tower's square ``size`` (bilinear), unchanged when they already are."""
    if pixel_values.shape[-1] != size or pixel_values.shape[-2] != size:
        return F.interpolate(pixel_values, size=(size, size), mode="bilinear", align_corners=False)
    return pixel_values


class PromptedClassifier(nn.Module):
    """An autoregressive VLM as a classifier over a fixed set of class names.

    Subclasses give the model's parts: :meth:`image_embeds`, :meth:`embed`, :meth:`decode` and
    :meth:`head`. The text before the image, the prompt after it and the class names are token
    ids fixed at construction.

    Args:
        tokens: the prompt and class names (:mod:`gradeff.studies.baselines.prompts`).
        before_image: ids before the image tokens (BOS, a chat turn's opening).
        after_image: ids between the image and the prompt (e.g. the end of an image block).
        pad: id that right-pads names to the longest (never scored).
    """

    # A prefix-LM (PaliGemma) reads the image and prompt bidirectionally.
    bidirectional_prefix = False

    def __init__(self, tokens: ClassTokens, *, before_image: tuple[int, ...] = (), after_image: tuple[int, ...] = (),
                 pad: int = 0):
        super().__init__()
        width = max(len(name) for name in tokens.names)
        names = torch.full((tokens.num_classes, width), pad, dtype=torch.long)
        mask = torch.zeros((tokens.num_classes, width), dtype=torch.bool)
        for k, name in enumerate(tokens.names):
            names[k, :len(name)] = torch.tensor(name)
            mask[k, :len(name)] = True
        # Not persistent: the prompts are rebuilt with the model, never saved with its weights.
        self.register_buffer("name_ids", names, persistent=False)
        self.register_buffer("name_mask", mask, persistent=False)
        self.register_buffer("before_ids", torch.tensor(before_image, dtype=torch.long), persistent=False)
        self.register_buffer("after_ids", torch.tensor(after_image + tokens.prompt, dtype=torch.long),
                             persistent=False)
        self.token_source = tokens.source

    @property
    def num_labels(self) -> int:
        return self.name_ids.shape[0]

    def image_embeds(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(batch, image tokens, hidden)``: the image as the decoder reads it."""
        raise NotImplementedError

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids → the decoder's input embeddings."""
        raise NotImplementedError

    def decode(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor,
               position_ids: torch.Tensor) -> torch.Tensor:
        """The decoder's last hidden states under a custom 4-D additive attention mask."""
        raise NotImplementedError

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states → vocabulary logits."""
        raise NotImplementedError

    def prefix(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(batch, P, hidden)``: text before the image, the image, the prompt."""
        image = self.image_embeds(pixel_values)
        batch = image.shape[0]
        parts = [self.embed(ids).to(image.dtype).unsqueeze(0).expand(batch, -1, -1)
                 for ids in (self.before_ids, self.after_ids)]
        return torch.cat([parts[0], image, parts[1]], dim=1)

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None) -> ImageClassifierOutput:
        """Logits ``(batch, num_classes)``: the log-likelihood of every class's name after the prompt."""
        logits = class_log_likelihoods(self.prefix(pixel_values), self.name_ids, self.name_mask, embed=self.embed,
                                       decode=self.decode, head=self.head,
                                       bidirectional_prefix=self.bidirectional_prefix)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return ImageClassifierOutput(loss=loss, logits=logits)


class PromptedConditionalGeneration(PromptedClassifier):
    """A prompted transformers ``...ForConditionalGeneration`` VLM (SmolVLM, PaliGemma): the parts they share.

    ``model.model`` is the multimodal model (its input embeddings), ``model.lm_head`` the output layer; the
    subclass gives the image embeddings and the decoder pass.
    """

    def __init__(self, model: nn.Module, tokens: ClassTokens, *, before_image: tuple[int, ...] = (),
                 after_image: tuple[int, ...] = (), pad: int = 0):
        super().__init__(tokens, before_image=before_image, after_image=after_image, pad=pad)
        self.model = model

    @property
    def config(self):
        return self.model.config

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None) -> None:
        """Checkpoint the layers of both towers (same API as a transformers model)."""
        self.model.activation_checkpointing_enable(activation_checkpointing_kwargs)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.model.get_input_embeddings()(ids)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(hidden)
