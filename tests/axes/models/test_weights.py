"""Weight sources: a file, a folder holding one, a save_pretrained folder, a hub id (only when allowed)."""

import json

import pytest

from gradeff.axes.models.checkpoint import resolve_for
from gradeff.axes.models.weights import WeightSourceError, describe, hub_origin, is_hub_id, resolve, sha256

VIT_REPO = "timm/vit_small_patch16_224.augreg_in21k_ft_in1k"


def _touch(path, content=b"x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_a_file_is_a_state_dict(tmp_path):
    file = _touch(tmp_path / "vim_s_midclstok_80p5acc.pth")
    source = resolve(str(file))
    assert (source.format, source.path, source.repo_id) == ("state_dict", str(file), None)


@pytest.mark.parametrize("name", ["weights.txt", "model.onnx", "model.msgpack"])
def test_a_file_of_another_kind_is_refused(tmp_path, name):
    with pytest.raises(WeightSourceError, match=f"{name}: not a state-dict file"):
        resolve(str(_touch(tmp_path / name)))


def test_a_folder_holding_one_state_dict_is_read_as_it(tmp_path):
    """A hub snapshot of a timm model holds config.json (timm's, no model_type) beside the weights."""
    _touch(tmp_path / "config.json", json.dumps({"architecture": "vit_small_patch16_224"}).encode())
    file = _touch(tmp_path / "mambavision_tiny_1k.pth.tar")
    assert resolve(str(tmp_path), model_type="vit").path == str(file)


def test_a_folder_with_both_formats_takes_safetensors(tmp_path):
    _touch(tmp_path / "pytorch_model.bin")
    _touch(tmp_path / "model.safetensors")
    assert resolve(str(tmp_path)).path == str(tmp_path / "model.safetensors")


def test_an_ambiguous_or_empty_folder_names_its_files(tmp_path):
    _touch(tmp_path / "a.pth")
    _touch(tmp_path / "b.pth")
    with pytest.raises(WeightSourceError, match=r"several state-dict files \(a.pth, b.pth\); name the one"):
        resolve(str(tmp_path))
    with pytest.raises(WeightSourceError, match="holds no state-dict file"):
        resolve(str(_touch(tmp_path / "empty" / "notes.md").parent))


def test_a_save_pretrained_folder_of_the_models_own_class(tmp_path):
    """config.json naming the model's model_type makes a folder a save_pretrained one; another model's does not."""
    _touch(tmp_path / "config.json", json.dumps({"model_type": "gradeff_vim_s"}).encode())
    _touch(tmp_path / "model.safetensors")
    assert resolve_for("vim_s", str(tmp_path)).format == "save_pretrained"
    assert resolve_for("mambavision_t", str(tmp_path)).format == "state_dict"
    # A model without a key map (a baseline) takes folders only, whatever their config says.
    assert resolve_for("clip", str(tmp_path)).format == "save_pretrained"
    with pytest.raises(WeightSourceError, match="a state-dict file needs a key map"):
        resolve_for("clip", str(tmp_path / "model.safetensors"))


def test_a_hub_id_is_refused_without_permission():
    assert is_hub_id(VIT_REPO) and not is_hub_id("no-slash") and not is_hub_id("a/b/c")
    with pytest.raises(WeightSourceError, match="as a hub id it needs --gradeff-allow-hub"):
        resolve_for("vit_s", VIT_REPO)
    with pytest.raises(WeightSourceError, match="^no such file or folder$"):
        resolve_for("vit_s", "/no/such/file.safetensors")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A hub cache as huggingface_hub lays it out (refs/main → a snapshot), used offline."""
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def add(repo_id: str, files: dict[str, bytes], revision: str = "0123456789abcdef") -> str:
        repo = root / f"models--{repo_id.replace('/', '--')}"
        _touch(repo / "refs" / "main", revision.encode())
        for name, content in files.items():
            _touch(repo / "snapshots" / revision / name, content)
        return str(repo / "snapshots" / revision)

    return add


def test_a_hub_id_resolves_through_the_hub_cache(hub_cache):
    snapshot = hub_cache(VIT_REPO, {"model.safetensors": b"w", "pytorch_model.bin": b"w", "config.json": b"{}"})
    source = resolve_for("vit_s", VIT_REPO, allow_hub=True)
    assert source.path == f"{snapshot}/model.safetensors" and source.format == "state_dict"
    assert (source.repo_id, source.revision) == (VIT_REPO, "0123456789abcdef")
    # "hub" is the backbone's documented default repository.
    assert resolve_for("vit_s", "hub", allow_hub=True).path == source.path


def test_the_default_repository_gives_its_documented_checkpoint(hub_cache):
    """MambaVision's repository holds a transformers-format copy beside the official .pth.tar: the latter loads."""
    snapshot = hub_cache("nvidia/MambaVision-T-1K", {"model.safetensors": b"w", "mambavision_tiny_1k.pth.tar": b"w"})
    assert resolve_for("mambavision_t", "hub", allow_hub=True).path == f"{snapshot}/mambavision_tiny_1k.pth.tar"


def test_a_hub_id_missing_from_the_cache_offline_is_an_error_naming_it(hub_cache):
    with pytest.raises(WeightSourceError, match="hub id 'hustvl/Vim-small-midclstok': LocalEntryNotFoundError"):
        resolve_for("vim_s", "hustvl/Vim-small-midclstok", allow_hub=True)


def test_the_record_names_file_hash_and_origin(hub_cache):
    snapshot = hub_cache("hustvl/Vim-small-midclstok", {"vim_s_midclstok_80p5acc.pth": b"abc"}, revision="feed")
    record = describe(resolve_for("vim_s", "hub", allow_hub=True))
    assert record == {"given": "hustvl/Vim-small-midclstok", "format": "state_dict",
                      "path": f"{snapshot}/vim_s_midclstok_80p5acc.pth", "repo_id": "hustvl/Vim-small-midclstok",
                      "revision": "feed",
                      "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
    assert sha256(record["path"]) == record["sha256"]
    assert hub_origin("/elsewhere/model.safetensors") == (None, None)


def test_a_baselines_hub_id_is_its_save_pretrained_snapshot(hub_cache):
    """CLIP's default repository resolves to its snapshot folder, loaded by transformers with its own config."""
    snapshot = hub_cache("openai/clip-vit-base-patch16", {"config.json": b'{"model_type": "clip"}',
                                                          "model.safetensors": b"w", "tokenizer.json": b"{}"})
    source = resolve_for("clip", "hub", allow_hub=True)
    assert (source.path, source.format, source.repo_id) == (snapshot, "save_pretrained", "openai/clip-vit-base-patch16")
