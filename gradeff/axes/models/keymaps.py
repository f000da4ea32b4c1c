"""Explicit key maps from published checkpoints to the PEFT study's four backbones.

gradeff's ``vit_s``, ``tinyvit``, ``vim_s`` and ``mambavision_t`` have exactly the parameter shapes of the
published models (timm's ``vit_small_patch16_224`` and ``tiny_vit_21m_224``, hustvl's Vim-S, NVlabs'
MambaVision-T), under names of their own. Each map below lists, rule by rule, which reference key becomes
which of ours; nothing is matched by similarity. A rule is a regular expression over the whole reference key
and the template(s) of our key, filled with its groups. A rule with several templates splits the reference
tensor into that many equal parts along its first dimension (timm's fused ``qkv`` becomes transformers'
``q_proj``, ``k_proj``, ``v_proj``). A reference key no rule matches is *unexpected*; one of ours no
reference key reaches is *missing*; both are errors that name the keys (see
:mod:`gradeff.axes.models.checkpoint`).

Checkpoints come wrapped in different ways: a bare state dict (timm), ``{"model": ...}`` (Vim, DeiT-style),
``{"state_dict": ...}`` (MambaVision's timm training script), keys prefixed by ``module.`` (saved from a
``DistributedDataParallel``). ``containers`` and ``prefixes`` name the wrappers each map accepts, in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["KEY_MAPS", "KeyMap", "MappedKeys", "Rule", "unwrap"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Rule:
    """One reference key pattern and the key(s) of ours it becomes.

    Attributes:
        reference: a regular expression the whole reference key must match.
        ours: ``str.format`` templates of our key, filled with the match's groups; several templates split
            the tensor into equal parts along its first dimension, one per template.
    """

    reference: str
    ours: tuple[str, ...]
    _pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_pattern", re.compile(self.reference))

    def match(self, key: str) -> tuple[str, ...] | None:
        """Our key(s) for a reference key, or ``None`` when the rule does not apply."""
        found = self._pattern.fullmatch(key)
        return None if found is None else tuple(template.format(*found.groups()) for template in self.ours)


def _rule(reference: str, *ours: str) -> Rule:
    return Rule(reference, ours)


@dataclass(frozen=True, slots=True, kw_only=True)
class MappedKeys:
    """The result of mapping a reference state dict (or its shapes) to our keys.

    Attributes:
        ours: our key → value (a tensor, or a shape when only shapes were mapped).
        origin: our key → the reference key it came from.
        unexpected: reference keys no rule matches.
    """

    ours: dict
    origin: dict[str, str]
    unexpected: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyMap:
    """How one published checkpoint's state dict becomes one of our models' state dicts.

    Attributes:
        model: our model key.
        reference: what the map reads, in words (the library or repository and its model).
        rules: the rules, tried in order; the first that matches a key decides.
        head: our classification head's keys: re-initialised (seeded) when the checkpoint's classes are not
            the cell's, the one exception to "every key loads".
        optional: regular expressions of our keys a checkpoint may lack without error (BatchNorm's
            ``num_batches_tracked`` counter, which some training scripts strip); the model keeps its own value.
        containers: keys of a wrapping dict that hold the state dict, tried in order.
        prefixes: key prefixes stripped before mapping, when every key carries one of them.
        hub_file: the checkpoint the model's hub repository (:attr:`gradeff.axes.models.ModelSpec.hub_id`) documents,
            taken where the snapshot holds another copy beside it.
    """

    model: str
    reference: str
    rules: tuple[Rule, ...]
    head: tuple[str, ...] = ("classifier.weight", "classifier.bias")
    optional: tuple[str, ...] = ()
    containers: tuple[str, ...] = ("state_dict", "model")
    prefixes: tuple[str, ...] = ("module.",)
    hub_file: str = ""

    def our_keys(self, key: str) -> tuple[str, ...] | None:
        """The key(s) of ours a reference key becomes, ``None`` if no rule covers it."""
        for rule in self.rules:
            ours = rule.match(key)
            if ours is not None:
                return ours
        return None

    def apply(self, reference: Mapping[str, T], split: Callable[[T, int], tuple[T, ...]]) -> MappedKeys:
        """Map a reference state dict (keys → tensors, or keys → shapes) to our keys.

        Args:
            reference: the unwrapped reference state dict (see :func:`unwrap`).
            split: how to cut one value into ``n`` equal parts along the first dimension (tensors:
                ``chunk``; shapes: divide the first size).
        """
        ours, origin, unexpected = {}, {}, []
        for key, value in reference.items():
            targets = self.our_keys(key)
            if targets is None:
                unexpected.append(key)
                continue
            parts = (value,) if len(targets) == 1 else split(value, len(targets))
            for target, part in zip(targets, parts, strict=True):
                ours[target] = part
                origin[target] = key
        return MappedKeys(ours=ours, origin=origin, unexpected=tuple(unexpected))

    def is_optional(self, key: str) -> bool:
        return any(re.fullmatch(pattern, key) for pattern in self.optional)


def unwrap(checkpoint: Mapping, key_map: KeyMap) -> tuple[dict, str]:
    """The state dict inside a loaded checkpoint and how it was found (``"state_dict"``, ``"module." prefix``).

    A mapping whose values are all tensors (or shapes) is a state dict already; otherwise the first of
    ``key_map.containers`` it holds is. A prefix of ``key_map.prefixes`` shared by every key is removed.

    Raises:
        ValueError: no state dict where one was expected, naming the checkpoint's top-level keys.
    """
    how = []
    state = checkpoint
    if not _is_state_dict(state):
        container = next((name for name in key_map.containers if name in state and isinstance(state[name], Mapping)),
                         None)
        if container is None:
            raise ValueError(f"not a state dict and none of {', '.join(map(repr, key_map.containers))} holds one; "
                             f"top-level keys: {', '.join(map(str, list(state)[:12]))}")
        state = state[container]
        how.append(f"[{container!r}]")
    for prefix in key_map.prefixes:
        if state and all(str(key).startswith(prefix) for key in state):
            state = {key[len(prefix):]: value for key, value in state.items()}
            how.append(f"{prefix!r} prefix removed")
    return dict(state), ", ".join(how)


def _is_state_dict(mapping: Mapping) -> bool:
    # A state dict holds tensors (or, when only shapes are read, tuples of ints); a checkpoint wrapping one
    # holds dicts, numbers and argument namespaces beside it.
    return bool(mapping) and all(hasattr(v, "shape") or isinstance(v, tuple) for v in mapping.values())


_BLOCK = r"blocks\.(\d+)"
_BN = ("^(?:.*\\.)?num_batches_tracked$",)

KEY_MAPS: dict[str, KeyMap] = {
    # timm vision_transformer.py: fused qkv (rows [q; k; v], each head-major, the layout q_proj/k_proj/v_proj
    # take one third each), pre-norm blocks, the class token's state through the final norm to the head.
    "vit_s": KeyMap(
        model="vit_s", reference="timm vit_small_patch16_224",
        hub_file="model.safetensors",
        rules=(
            _rule(r"cls_token", "vit.embeddings.cls_token"),
            _rule(r"pos_embed", "vit.embeddings.position_embeddings"),
            _rule(r"patch_embed\.proj\.(weight|bias)", "vit.embeddings.patch_embeddings.projection.{0}"),
            _rule(_BLOCK + r"\.norm1\.(weight|bias)", "vit.layers.{0}.layernorm_before.{1}"),
            _rule(_BLOCK + r"\.attn\.qkv\.(weight|bias)", "vit.layers.{0}.attention.q_proj.{1}",
                  "vit.layers.{0}.attention.k_proj.{1}", "vit.layers.{0}.attention.v_proj.{1}"),
            _rule(_BLOCK + r"\.attn\.proj\.(weight|bias)", "vit.layers.{0}.attention.o_proj.{1}"),
            _rule(_BLOCK + r"\.norm2\.(weight|bias)", "vit.layers.{0}.layernorm_after.{1}"),
            _rule(_BLOCK + r"\.mlp\.(fc1|fc2)\.(weight|bias)", "vit.layers.{0}.mlp.{1}.{2}"),
            _rule(r"norm\.(weight|bias)", "vit.layernorm.{0}"),
            _rule(r"head\.(weight|bias)", "classifier.{0}"),
        ),
    ),
    # timm tiny_vit.py: the same module tree as Cream's (and ours) except that timm moves each patch merging to
    # the start of the next stage (timm stages.{i+1}.downsample = our stages.{i}.downsample) and names the head
    # norm and linear head.norm / head.fc.
    "tinyvit": KeyMap(
        model="tinyvit", reference="timm tiny_vit_21m_224", optional=_BN,
        hub_file="model.safetensors",
        rules=(
            _rule(r"patch_embed\.(conv[12]\.(?:conv|bn)\..+)", "tinyvit.patch_embed.{0}"),
            _rule(r"stages\.(\d)\.blocks\.(.+)", "tinyvit.stages.{0}.blocks.{1}"),
            _rule(r"stages\.1\.downsample\.(.+)", "tinyvit.stages.0.downsample.{0}"),
            _rule(r"stages\.2\.downsample\.(.+)", "tinyvit.stages.1.downsample.{0}"),
            _rule(r"stages\.3\.downsample\.(.+)", "tinyvit.stages.2.downsample.{0}"),
            _rule(r"head\.norm\.(weight|bias)", "tinyvit.norm.{0}"),
            _rule(r"head\.fc\.(weight|bias)", "classifier.{0}"),
        ),
    ),
    # hustvl/Vim vim/models_mamba.py (VisionMamba, bimamba v2): the mixers' parameter names are the reference's.
    "vim_s": KeyMap(
        model="vim_s", reference="hustvl/Vim vim_small_patch16_224_bimambav2 (middle class token)",
        hub_file="vim_s_midclstok_80p5acc.pth",
        rules=(
            _rule(r"patch_embed\.proj\.(weight|bias)", "vim.embeddings.projection.{0}"),
            _rule(r"cls_token", "vim.embeddings.cls_token"),
            _rule(r"pos_embed", "vim.embeddings.position_embeddings"),
            _rule(r"layers\.(\d+)\.norm\.weight", "vim.layers.{0}.norm.weight"),
            _rule(r"layers\.(\d+)\.mixer\.(.+)", "vim.layers.{0}.mixer.{1}"),
            _rule(r"norm_f\.weight", "vim.norm_f.weight"),
            _rule(r"head\.(weight|bias)", "classifier.{0}"),
        ),
    ),
    # NVlabs/MambaVision mambavision/models/mamba_vision.py: our tree is the reference's under ``mambavision.``;
    # the hub repository's transformers-format copy wraps it in ``model.``.
    "mambavision_t": KeyMap(
        model="mambavision_t", reference="NVlabs/MambaVision mamba_vision_T", optional=_BN,
        prefixes=("module.", "model."),
        hub_file="mambavision_tiny_1k.pth.tar",
        rules=(
            _rule(r"patch_embed\.(conv_down\.\d\..+)", "mambavision.patch_embed.{0}"),
            _rule(r"levels\.(\d)\.(.+)", "mambavision.levels.{0}.{1}"),
            _rule(r"norm\.(.+)", "mambavision.norm.{0}"),
            _rule(r"head\.(weight|bias)", "classifier.{0}"),
        ),
    ),
}
