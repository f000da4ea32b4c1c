"""Checkpoints in the published layouts, made from our own models (no timm, no download).

Inverting the key maps turns any of our models' state dicts, at any profile, into the state dict the reference
implementation would hold at the same shapes (each key checked by mapping it forward again), saved the way each
reference saves it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch

from gradeff.axes.models import build_model
from gradeff.axes.models.keymaps import KEY_MAPS


def _as_template(pattern: str) -> str:
    """A rule's reference regex as a format template: each capturing group becomes ``{i}``, escapes are undone."""
    out, index, depth, i = [], 0, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if depth == 0:
                out.append(pattern[i + 1])
            i += 2
            continue
        if char == "(":
            if depth == 0 and not pattern.startswith("(?", i):
                out.append(f"{{{index}}}")
                index += 1
                depth = 1
            elif depth:
                depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
        i += 1
    return "".join(out)


def _reference_key(key_map, key: str) -> tuple[str, int]:
    """The reference key one of ours comes from, and which part of it (a fused tensor's index)."""
    for rule in key_map.rules:
        for part, template in enumerate(rule.ours):
            slots = [int(n) for n in re.findall(r"\{(\d+)\}", template)]
            regex = re.escape(template)
            for n in slots:
                regex = regex.replace(re.escape(f"{{{n}}}"), "(.+?)", 1)
            found = re.fullmatch(regex, key)
            if found is None:
                continue
            values = dict(zip(slots, found.groups(), strict=True))
            reference = _as_template(rule.reference).format(*(values[n] for n in sorted(values)))
            if rule.match(reference) is not None and rule.match(reference)[part] == key:
                return reference, part
    raise KeyError(f"no rule of {key_map.model}'s map gives {key}")


def to_reference(model: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict in the reference layout (fused tensors concatenated back), checked by mapping it forward."""
    key_map = KEY_MAPS[model]
    parts: dict[str, dict[int, torch.Tensor]] = {}
    for key, tensor in state.items():
        reference, part = _reference_key(key_map, key)
        parts.setdefault(reference, {})[part] = tensor
    return {key: torch.cat([p[i] for i in sorted(p)]) if len(p) > 1 else p[0] for key, p in parts.items()}


def perturb(network: torch.nn.Module, scale: float = 0.05) -> torch.nn.Module:
    """Move every tensor of a model off its initial value (zero-initialised biases, BatchNorm's running statistics,
    the zero-scaled last BN of an MBConv), so that a tensor loaded into the wrong place shows."""
    with torch.no_grad():
        for name, tensor in network.state_dict().items():
            if tensor.is_floating_point():
                noise = scale * torch.randn_like(tensor)
                tensor.copy_(tensor.abs() + 0.5 + noise.abs() if name.endswith("running_var") else tensor + noise)
    return network


def perturbed(model: str, profile: str = "tiny", *, seed: int = 0, num_labels: int | None = None) -> torch.nn.Module:
    """One of our models, seeded, every tensor perturbed (:func:`perturb`), in eval mode."""
    torch.manual_seed(seed)
    return perturb(build_model(model, profile, num_labels=num_labels)).eval()


def save_reference(model: str, state: dict[str, torch.Tensor], folder: Path) -> Path:
    """Save a reference-layout state dict as its reference does: timm a bare safetensors file, Vim a DeiT-style
    ``{"model": ...}`` pickle with the training arguments, MambaVision a timm-trainer ``{"state_dict": ...}``
    saved from a DistributedDataParallel (``module.`` keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    if model in ("vit_s", "tinyvit"):
        from safetensors.torch import save_file

        path = folder / "model.safetensors"
        save_file({key: tensor.contiguous() for key, tensor in state.items()}, path)
    elif model == "vim_s":
        path = folder / "vim_s_midclstok.pth"
        torch.save({"model": state, "epoch": 299, "args": argparse.Namespace(model="vim_small", lr=5e-4)}, path)
    else:
        path = folder / "mambavision_tiny_1k.pth.tar"
        torch.save({"epoch": 309, "state_dict": {f"module.{key}": t for key, t in state.items()}}, path)
    return path
