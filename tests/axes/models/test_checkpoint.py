"""Published-layout checkpoints into the four backbones: every tensor where it belongs, or an error naming keys.

The checkpoints are made from our own tiny models in the reference layouts (``tests/axes/models/published.py``);
timm's own ViT-S/16 and TinyViT-21M are compared logit for logit in the reference environment
(``tests/reference``).
"""

import pytest
import torch

from gradeff.axes.models.checkpoint import CheckpointError, check_source, from_checkpoint, load_checkpoint, resolve_for
from gradeff.axes.models.keymaps import KEY_MAPS
from gradeff.axes.models.weights import WeightSourceError
from tests.axes.models.published import perturbed, save_reference, to_reference

BACKBONES = sorted(KEY_MAPS)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Per backbone: the tiny model (10 classes) and its checkpoint in the reference's layout and wrapping."""
    root = tmp_path_factory.mktemp("published")
    made = {}
    for model in BACKBONES:
        network = perturbed(model, num_labels=10)
        made[model] = (network, save_reference(model, to_reference(model, network.state_dict()), root / model))
    return made


@pytest.mark.parametrize("model", BACKBONES)
def test_every_tensor_loads_where_the_reference_had_it(model, published):
    """from_checkpoint gives the model back tensor for tensor, head included, and the same logits."""
    network, path = published[model]
    loaded = from_checkpoint(model, path, profile="tiny")
    expected, got = network.state_dict(), loaded.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[key], expected[key]) for key in expected)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(pixel_values=pixels).logits, network(pixel_values=pixels).logits)
    assert loaded.gradeff_weights["head"] == "loaded" and loaded.gradeff_weights["checkpoint_classes"] == 10
    assert not loaded.training


def test_the_record_says_how_the_state_dict_was_found(published):
    """Vim's {'model': ...} pickle and MambaVision's DDP-saved {'state_dict': {'module.…'}} are named as such."""
    assert from_checkpoint("vim_s", published["vim_s"][1], profile="tiny").gradeff_weights["unwrapped"] == "['model']"
    record = from_checkpoint("mambavision_t", published["mambavision_t"][1], profile="tiny").gradeff_weights
    assert record["unwrapped"] == "['state_dict'], 'module.' prefix removed"
    assert record["format"] == "state_dict" and len(record["sha256"]) == 64
    assert record["keys"] == len(published["mambavision_t"][0].state_dict())


@pytest.mark.parametrize("model", ["vit_s", "tinyvit"])
def test_other_classes_get_a_fresh_seeded_head_and_everything_else_loads(model, published):
    """100 classes on a 10-class checkpoint: the head is the seed's, the backbone the checkpoint's."""
    network, path = published[model]
    heads = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        loaded = from_checkpoint(model, path, num_labels=100, profile="tiny")
        assert loaded.gradeff_weights["head"] == "reinitialised"
        state = loaded.state_dict()
        heads.append(state["classifier.weight"])
        assert all(torch.equal(state[key], tensor) for key, tensor in network.state_dict().items()
                   if not key.startswith("classifier."))
    assert heads[0].shape == (100, heads[0].shape[1])
    assert torch.equal(heads[0], heads[1]) and not torch.equal(heads[0], heads[2])


def _state_of(model, published):
    return to_reference(model, published[model][0].state_dict())


def _check(model, state, tmp_path, profile="tiny", num_labels=None):
    path = save_reference(model, state, tmp_path)
    return check_source(model, resolve_for(model, str(path)), profile, num_labels=num_labels)


def test_a_missing_key_is_named(published, tmp_path):
    state = _state_of("vit_s", published)
    del state["blocks.1.mlp.fc2.bias"]
    with pytest.raises(CheckpointError, match=r"1 missing \(model keys the checkpoint does not give\): "
                                              r"vit\.layers\.1\.mlp\.fc2\.bias$") as error:
        _check("vit_s", state, tmp_path)
    assert error.value.missing == ("vit.layers.1.mlp.fc2.bias",)


def test_an_unexpected_key_is_named_with_where_it_would_land(published, tmp_path):
    """A key no rule covers, and one a rule covers that the model lacks (a fifth block of a four-block model)."""
    state = _state_of("vit_s", published)
    state["fc_norm.weight"] = torch.ones(64)
    state["blocks.4.norm1.weight"] = torch.ones(64)
    with pytest.raises(CheckpointError) as error:
        _check("vit_s", state, tmp_path)
    assert error.value.unexpected == ("blocks.4.norm1.weight (as vit.layers.4.layernorm_before.weight)",
                                      "fc_norm.weight") or set(error.value.unexpected) == {
        "fc_norm.weight", "blocks.4.norm1.weight (as vit.layers.4.layernorm_before.weight)"}
    assert "2 unexpected (checkpoint keys that land nowhere)" in str(error.value)


def test_a_checkpoint_of_another_size_names_the_shapes(published, tmp_path):
    """The tiny checkpoint against the small profile: shapes first, each with the reference key it came from."""
    with pytest.raises(CheckpointError) as error:
        _check("vit_s", _state_of("vit_s", published), tmp_path, profile="small")
    message = str(error.value)
    assert message.startswith("does not fit vit_s (timm vit_small_patch16_224 layout): ")
    assert "vit.embeddings.cls_token [1, 1, 64], [1, 1, 192] (from cls_token)" in message
    assert ("vit.embeddings.position_embeddings", "pos_embed", (1, 17, 64), (1, 65, 192)) in error.value.mismatched


def test_a_head_of_another_width_is_a_mismatch_even_when_classes_differ(published, tmp_path):
    """Re-initialising a head replaces its rows; a head reading features of another width cannot be right."""
    state = _state_of("vit_s", published)
    state["head.weight"] = torch.zeros(10, 32)
    with pytest.raises(CheckpointError, match=r"classifier\.weight \[10, 32\], \[100, 64\] \(from head\.weight\)"):
        _check("vit_s", state, tmp_path, num_labels=100)


def test_another_backbones_checkpoint_is_refused(published, tmp_path):
    with pytest.raises(CheckpointError) as error:
        _check("vit_s", _state_of("tinyvit", published), tmp_path)
    assert "head.fc.weight" in error.value.unexpected and "vit.embeddings.cls_token" in error.value.missing


def test_batchnorm_counters_may_be_absent(published, tmp_path):
    """Some training scripts strip num_batches_tracked; the model keeps its own counter."""
    state = {k: v for k, v in _state_of("tinyvit", published).items() if not k.endswith("num_batches_tracked")}
    assert _check("tinyvit", state, tmp_path).head == "loaded"
    assert KEY_MAPS["tinyvit"].is_optional("tinyvit.stages.0.blocks.0.conv1.bn.num_batches_tracked")
    assert not KEY_MAPS["tinyvit"].is_optional("tinyvit.stages.0.blocks.0.conv1.bn.running_mean")


def test_a_truncated_or_garbage_file_cannot_be_read(published, tmp_path):
    path = published["vit_s"][1]
    truncated = tmp_path / "model.safetensors"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(WeightSourceError, match="model.safetensors: cannot be read"):
        check_source("vit_s", resolve_for("vit_s", str(truncated)), "tiny")
    garbage = tmp_path / "weights.pth"
    garbage.write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(WeightSourceError, match="weights.pth: cannot be read"):
        check_source("vim_s", resolve_for("vim_s", str(garbage)), "tiny")


class Payload:
    """An object a pickle would rebuild by running code: never loaded."""


def test_a_checkpoint_that_pickles_code_is_refused(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"model": {"cls_token": torch.zeros(1)}, "extra": Payload()}, path)
    with pytest.raises(WeightSourceError, match="evil.pth: cannot be read: it pickles "
                                                "tests.axes.models.test_checkpoint.Payload, which weights_only"):
        check_source("vim_s", resolve_for("vim_s", str(path)), "tiny")


def test_loading_into_a_built_model_checks_the_tensors_too(published):
    """load_checkpoint refuses a model of another size with the same error as the header check."""
    from gradeff.axes.models import build_model

    with pytest.raises(CheckpointError, match="of another shape"):
        load_checkpoint(build_model("vim_s", "small"), "vim_s", published["vim_s"][1], num_labels=10)


def test_a_wrapped_timm_pickle_is_split_from_its_shapes_too(published, tmp_path):
    """A ViT-S state dict pickled inside {'model': ...}: its fused qkv is split whether shapes or tensors are read."""
    path = tmp_path / "vit_s.pth"
    torch.save({"model": _state_of("vit_s", published), "epoch": 3}, path)
    assert check_source("vit_s", resolve_for("vit_s", str(path)), "tiny").unwrapped == "['model']"
    loaded = from_checkpoint("vit_s", path, profile="tiny")
    assert torch.equal(loaded.state_dict()["vit.layers.1.attention.v_proj.weight"],
                       published["vit_s"][0].state_dict()["vit.layers.1.attention.v_proj.weight"])
