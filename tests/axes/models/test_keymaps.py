"""The key maps against the published checkpoints' layouts (committed key/shape fixtures).

``tests/fixtures/checkpoints/<model>.json`` lists every key and shape of the reference implementation's state
dict, exported by ``scripts/export_checkpoint_layouts.py`` in the reference environment: timm 1.0.31's
``vit_small_patch16_224.augreg_in21k_ft_in1k`` and ``tiny_vit_21m_224.dist_in22k_ft_in1k``, and the official
``hustvl/Vim`` and ``NVlabs/MambaVision`` model code (each built by its own constructor; the commits are in the
files). Through its map, each must give our paper model's state dict exactly: every key, every shape.
"""

import json
from pathlib import Path

import pytest

from gradeff.axes.models import build_model
from gradeff.axes.models.keymaps import KEY_MAPS, KeyMap, Rule, unwrap

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"


def reference_shapes(model: str) -> dict[str, tuple[int, ...]]:
    return {key: tuple(shape) for key, shape in json.loads((FIXTURES / f"{model}.json").read_text())["keys"].items()}


def split_shape(shape, parts):
    return tuple((shape[0] // parts, *shape[1:]) for _ in range(parts))


@pytest.mark.parametrize("model", sorted(KEY_MAPS))
def test_the_map_turns_the_published_layout_into_ours_key_for_key(model):
    """Every reference key lands on one of ours, every one of ours is given, with the same shape."""
    fixture = json.loads((FIXTURES / f"{model}.json").read_text())
    mapped = KEY_MAPS[model].apply(reference_shapes(model), split_shape)
    ours = {key: tuple(t.shape) for key, t in build_model(model, "paper", device="meta").state_dict().items()}
    assert mapped.unexpected == ()
    assert mapped.ours == ours
    # The published parameter count, which the fixture's producer counted on the reference module.
    assert sum(p.numel() for p in build_model(model, "paper", device="meta").parameters()) == fixture["parameters"]


@pytest.mark.parametrize("model", sorted(KEY_MAPS))
def test_no_two_reference_keys_land_on_one_of_ours(model):
    """The map is one-to-one (a split key's parts count once each): nothing is overwritten silently."""
    reference = reference_shapes(model)
    landed = [target for key in reference for target in KEY_MAPS[model].our_keys(key)]
    assert len(landed) == len(set(landed))


def test_timm_fused_qkv_is_split_in_order_into_q_k_v():
    """The first third of timm's qkv rows is q, then k, then v (timm reshapes qkv to (3, heads, dim))."""
    import torch

    qkv = torch.arange(12.0).view(6, 2)
    mapped = KEY_MAPS["vit_s"].apply({"blocks.3.attn.qkv.weight": qkv}, lambda t, n: t.chunk(n))
    assert torch.equal(mapped.ours["vit.layers.3.attention.q_proj.weight"], qkv[:2])
    assert torch.equal(mapped.ours["vit.layers.3.attention.k_proj.weight"], qkv[2:4])
    assert torch.equal(mapped.ours["vit.layers.3.attention.v_proj.weight"], qkv[4:])


def test_timm_tinyvit_patch_merging_moves_back_one_stage():
    """timm puts each patch merging at the start of the next stage; ours (and Cream's) end the stage."""
    key_map = KEY_MAPS["tinyvit"]
    assert key_map.our_keys("stages.1.downsample.conv1.conv.weight") == (
        "tinyvit.stages.0.downsample.conv1.conv.weight",)
    assert key_map.our_keys("stages.3.downsample.conv3.bn.bias") == ("tinyvit.stages.2.downsample.conv3.bn.bias",)
    assert key_map.our_keys("stages.0.downsample.conv1.conv.weight") is None


@pytest.mark.parametrize("key", ["blocks.0.attn.qkv", "blocks.x.norm1.weight", "pos_embed.extra", "fc_norm.weight"])
def test_a_key_no_rule_covers_is_unexpected(key):
    """Rules match whole keys only: no prefix, suffix or similarity matching."""
    assert KEY_MAPS["vit_s"].our_keys(key) is None
    assert KEY_MAPS["vit_s"].apply({key: (1,)}, split_shape).unexpected == (key,)


def test_wrappers_are_unwrapped_as_declared():
    """A DeiT-style {'model': ...} checkpoint and a DDP 'module.' prefix are found; anything else is named."""
    key_map = KEY_MAPS["vim_s"]
    state, how = unwrap({"model": {"module.cls_token": (1, 1, 4)}, "epoch": 3}, key_map)
    assert state == {"cls_token": (1, 1, 4)} and how == "['model'], 'module.' prefix removed"
    with pytest.raises(ValueError, match="top-level keys: weights, epoch"):
        unwrap({"weights": {"cls_token": (1,)}, "epoch": 3}, key_map)
    # MambaVision's hub copy nests the model under ``model.``; the map accepts that prefix, Vim's does not.
    assert unwrap({"model.head.weight": (1000, 640)}, KEY_MAPS["mambavision_t"])[0] == {"head.weight": (1000, 640)}
    assert unwrap({"model.head.weight": (1000, 640)}, key_map)[0] == {"model.head.weight": (1000, 640)}


def test_a_rule_fills_its_templates_from_the_whole_match():
    rule = Rule(r"layers\.(\d+)\.mixer\.(.+)", ("vim.layers.{0}.mixer.{1}",))
    assert rule.match("layers.12.mixer.A_b_log") == ("vim.layers.12.mixer.A_b_log",)
    assert rule.match("xlayers.12.mixer.A_b_log") is None
    assert KeyMap(model="m", reference="r", rules=(rule,)).our_keys("layers.1.norm.weight") is None
