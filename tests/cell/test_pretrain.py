"""Starting weights: random for the main study, a user's folder, or the suite's cached pretraining."""

import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import pytest
import torch

from gradeff.axes.models import build_model
from gradeff.axes.models.weights import WeightSourceError
from gradeff.cell.pretrain import MANIFEST, CacheRebuiltWarning, pretrained_folder, starting_weights, verify_folder
from gradeff.studies import hparams
from gradeff.studies.hparams import PretrainHParams

# A few steps are enough to test the cache; the real recipe is measured by the grid.
QUICK = PretrainHParams(num_classes=8, train_samples=64, heldout_samples=32, epochs=1, batch_size=32, lr=1e-3)


@pytest.fixture
def quick_recipe(monkeypatch):
    monkeypatch.setitem(hparams.PRETRAIN_HPARAMS, "tiny", QUICK)


def test_main_study_models_start_from_random_weights(tmp_path):
    """A model the suite trains from scratch has no weights folder, and is no stand-in for anything."""
    weights = starting_weights("llm", "tiny", 0, cache_dir=tmp_path)
    assert weights.source == "random" and weights.path is None and not list(tmp_path.iterdir())
    assert weights.to_record()["real"] is False and weights.stand_in is None


def test_a_baseline_without_weights_is_a_named_stand_in(tmp_path):
    """A foundation-model baseline from random weights says so in its record."""
    record = starting_weights("clip", "tiny", 0, cache_dir=tmp_path).to_record()
    assert record["real"] is False and record["stand_in"] == "random initialisation (no published weights loaded)"


def test_a_local_folder_wins_and_a_missing_one_is_an_error(tmp_path):
    """--gradeff-weights MODEL=PATH is used as given (recorded as real weights); a missing path fails clearly."""
    build_model("vit_s", "tiny").save_pretrained(tmp_path / "vit_s")
    weights = starting_weights("vit_s", "tiny", 0, local={"vit_s": str(tmp_path / "vit_s")}, cache_dir=tmp_path / "c")
    assert (weights.source, weights.path, weights.format) == ("local", str(tmp_path / "vit_s"), "save_pretrained")
    assert weights.to_record()["real"] is True and weights.stand_in is None
    with pytest.raises(WeightSourceError, match="no such file or folder"):
        starting_weights("vit_s", "tiny", 0, local={"vit_s": str(tmp_path / "absent")})


def test_pretraining_runs_once_and_is_reused(tmp_path, quick_recipe):
    """The first call pretrains and records its cost; later calls load the same folder and say so."""
    first = starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path)
    second = starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path)
    assert first.source == "pretrained" and first.path == second.path
    assert "the suite's own pretraining" in first.stand_in and first.to_record()["real"] is False
    assert first.pretraining["reused"] is False and second.pretraining["reused"] is True
    assert first.pretraining["optimizer_steps"] == 2 and first.pretraining["seconds"] > 0
    assert 0 <= first.pretraining["heldout_accuracy"] <= 1
    info = json.loads((tmp_path / "pretrained" / first.path.rsplit("/", 1)[-1] / "pretraining.json").read_text())
    assert info["task"]["num_classes"] == 8


def test_fine_tuning_loads_the_backbone_and_starts_a_fresh_head(tmp_path, quick_recipe):
    """The cached folder has no head: every backbone weight loads as saved, the head is new and seeded."""
    from safetensors.torch import load_file

    weights = starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path)
    saved = load_file(f"{weights.path}/model.safetensors")
    assert saved and not any(name.startswith("classifier") for name in saved)
    models = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        models.append(build_model("vit_s", "tiny", num_labels=47, weights_dir=weights.path).state_dict())
    torch.manual_seed(3)
    random = build_model("vit_s", "tiny", num_labels=47).state_dict()
    backbone = [name for name in random if not name.startswith("classifier")]
    # Every seed loads the same backbone, which is not a random initialisation ...
    assert all(torch.equal(models[0][n], models[2][n]) for n in backbone)
    assert not all(torch.equal(models[0][n], random[n]) for n in backbone)
    # ... and the same number of saved tensors; the head is fresh: seeded, sized for the new classes.
    assert len(saved) == len(backbone)
    assert models[0]["classifier.weight"].shape[0] == 47
    assert torch.equal(models[0]["classifier.weight"], models[1]["classifier.weight"])
    assert not torch.equal(models[0]["classifier.weight"], models[2]["classifier.weight"])


def test_the_cache_is_keyed_by_seed_and_recipe(tmp_path, monkeypatch, quick_recipe):
    """Another seed or another recipe is another folder; the same ones are the same folder."""
    base = pretrained_folder("vit_s", "tiny", 0, tmp_path)
    assert base == pretrained_folder("vit_s", "tiny", 0, tmp_path)
    assert base != pretrained_folder("vit_s", "tiny", 1, tmp_path)
    monkeypatch.setitem(hparams.PRETRAIN_HPARAMS, "tiny", PretrainHParams(
        num_classes=9, train_samples=64, heldout_samples=32, epochs=1, batch_size=32, lr=1e-3))
    assert base != pretrained_folder("vit_s", "tiny", 0, tmp_path)


def test_concurrent_callers_pretrain_once(tmp_path, quick_recipe):
    """Two callers at once (xdist workers) share one pretraining through the lock."""
    results = []
    threads = [threading.Thread(target=lambda: results.append(starting_weights("vit_s", "tiny", 0,
                                                                               cache_dir=tmp_path)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.pretraining["reused"] for r in results) == [False, True]
    assert len(list((tmp_path / "pretrained").glob("vit_s-*seed0-*[!k]"))) == 1


def test_a_truncated_cache_is_pretrained_again_with_a_warning(tmp_path, quick_recipe):
    """Weights cut short (a full disk, an interrupted copy) fail their sha256: the folder is named in a warning and
    pretrained again, instead of failing every cell that loads it."""
    first = starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path)
    weights = Path(first.path) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.warns(CacheRebuiltWarning) as caught:
        again = starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path)
    (warning,) = caught
    assert str(warning.message) == (f"pretrained cache {first.path}: model.safetensors does not match its sha256 "
                                    "(truncated or changed); pretraining it again")
    assert again.path == first.path and again.pretraining["reused"] is False
    assert verify_folder(Path(again.path)) is None
    build_model("vit_s", "tiny", num_labels=47, weights_dir=again.path)  # loads: the header is whole again


@pytest.mark.parametrize(("damage", "problem"), [
    (lambda folder: (folder / MANIFEST).unlink(), "no readable checksums.sha256 (written last: the folder was never "
                                                  "completed)"),
    (lambda folder: (folder / "config.json").unlink(), "config.json is missing"),
    (lambda folder: (folder / MANIFEST).write_text("garbage\n"), "checksums.sha256 is malformed"),
    (lambda folder: (folder / MANIFEST).write_text(""), "checksums.sha256 is malformed"),
])
def test_a_damaged_folder_says_what_is_wrong(tmp_path, quick_recipe, damage, problem):
    folder = Path(starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path).path)
    damage(folder)
    assert verify_folder(folder) == problem


def test_the_manifest_is_written_last_and_vouches_for_every_file(tmp_path, quick_recipe):
    """sha256sum's format, one line per other file of the folder (the pretraining record included)."""
    folder = Path(starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path).path)
    lines = (folder / MANIFEST).read_text().splitlines()
    names = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST)
    assert [line.split("  ")[1] for line in lines] == names and "pretraining.json" in names
    assert all(line.split("  ")[0] == hashlib.sha256((folder / line.split("  ")[1]).read_bytes()).hexdigest()
               for line in lines)
    assert max(p.stat().st_mtime_ns for p in folder.iterdir() if p.name != MANIFEST) \
        <= (folder / MANIFEST).stat().st_mtime_ns


def test_the_cache_is_keyed_by_the_thread_count(tmp_path):
    """Pretraining with two threads sums in another order than with one: another folder."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = pretrained_folder("vit_s", "tiny", 0, tmp_path)
        torch.set_num_threads(2)
        assert pretrained_folder("vit_s", "tiny", 0, tmp_path) != one
    finally:
        torch.set_num_threads(threads)


def test_pretraining_ahead_leaves_a_claimed_backbone_to_its_claimant(tmp_path, quick_recipe):
    """A backbone another process is pretraining (its lock held) is skipped, not waited for; the next is taken.
    The first cell of the process that pretrained ahead says it was pretrained in this session, later ones reused."""
    from filelock import FileLock

    from gradeff.cell.pretrain import pretrain_ahead

    busy = pretrained_folder("vit_s", "tiny", 0, tmp_path)
    busy.parent.mkdir(parents=True)
    with FileLock(str(busy) + ".lock"):
        done = pretrain_ahead([("vit_s", 0), ("mambavision_t", 0), ("vit_s", 0)], "tiny", cache_dir=tmp_path)
    assert done == ["mambavision_t"]
    assert not busy.exists()
    first = starting_weights("mambavision_t", "tiny", 0, cache_dir=tmp_path)
    again = starting_weights("mambavision_t", "tiny", 0, cache_dir=tmp_path)
    assert first.pretraining["reused"] is False and again.pretraining["reused"] is True
    # Nothing left to claim: a second pass pretrains nothing (vit_s is pretrained by its cell, as before).
    assert pretrain_ahead([("mambavision_t", 0)], "tiny", cache_dir=tmp_path) == []


def test_pretraining_ahead_skips_given_weights_scratch_models_and_failures(tmp_path, quick_recipe, monkeypatch):
    from gradeff.cell import pretrain as module

    assert module.pretrain_ahead([("vit", 0), ("llm", 0)], "tiny", cache_dir=tmp_path) == []
    assert module.pretrain_ahead([("vit_s", 0)], "tiny", local={"vit_s": str(tmp_path)}, cache_dir=tmp_path) == []
    assert not (tmp_path / "pretrained").exists() or not any((tmp_path / "pretrained").iterdir())

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(module, "pretrain", broken)
    assert module.pretrain_ahead([("vit_s", 0)], "tiny", cache_dir=tmp_path) == []
    with pytest.raises(RuntimeError, match="out of memory"):  # the cell meets the failure and records it
        starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path)


def test_a_backbone_pretrains_with_its_own_rate_on_the_profiles_samples():
    """A model's own pretraining fields replace the profile's (and name another cache folder); the source task's
    sizes cannot be a model's own, and a typo names the fields that can."""
    from dataclasses import replace

    from gradeff.axes.models import MODELS
    from gradeff.specs.registry import open_for_registration

    assert hparams.pretrain_hparams("vim_s", "tiny") == replace(hparams.PRETRAIN_HPARAMS["tiny"], lr=4e-3)
    assert hparams.pretrain_hparams("vit_s", "tiny") == hparams.PRETRAIN_HPARAMS["tiny"]
    before = pretrained_folder("vit_s", "tiny", 0)

    def own(fields):
        with open_for_registration([MODELS]):
            MODELS.register(replace(MODELS["vit_s"], pretraining={"tiny": fields}), source="test", replace=True)

    try:
        own({"lr": 1e-3})
        assert hparams.pretrain_hparams("vit_s", "tiny").lr == 1e-3 and pretrained_folder("vit_s", "tiny", 0) != before
        for fields, message in (({"train_samples": 64}, "cannot be a model's own"), ({"lrr": 1.0}, "valid: epochs")):
            own(fields)
            with pytest.raises(ValueError, match=message):
                hparams.pretrain_hparams("vit_s", "tiny")
    finally:
        MODELS.reset()


def test_a_registered_backbone_pretrains_at_its_own_image_size(tmp_path):
    """A backbone registered with its own ``ModelSpec.hparams`` gets a pretraining recipe at the image size its
    cells fine-tune at, not a KeyError."""
    from dataclasses import replace

    from gradeff.axes.models import MODELS
    from gradeff.cell.pretrain import _recipe
    from gradeff.specs.registry import open_for_registration

    own = {profile: replace(MODELS["vit_s"].hparams[profile], image_size=48)
           for profile in ("tiny", "small", "paper")}
    with open_for_registration([MODELS]):
        MODELS.register(replace(MODELS["vit_s"], key="my_vit", hparams=own), source="test")
    try:
        assert _recipe("my_vit", "tiny")["image_size"] == 48
        assert pretrained_folder("my_vit", "tiny", 0, tmp_path).name.startswith("my_vit-tiny-seed0-")
    finally:
        MODELS.reset()


def test_hostile_a_pretrained_folder_gets_the_permissions_of_a_plain_mkdir(tmp_path, quick_recipe):
    """mkdtemp's staging folder is owner-only (0700): renamed into place as it was, a cache on a shared disk would
    serve one account only. It gets what mkdir gives under the umask."""
    umask = os.umask(0o022)
    try:
        folder = Path(starting_weights("vit_s", "tiny", 0, cache_dir=tmp_path).path)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755


def test_the_weights_checksum_names_the_weights_not_the_runs_wall_time(tmp_path):
    """Two caches that pretrained the same weights agree, though each pretraining's account holds its own seconds;
    a changed byte of the weights is another checksum."""
    from gradeff.axes.data.checksums import write_manifest
    from gradeff.cell.pretrain import INFO_FILE, weights_checksum

    sums = []
    for name, seconds, weights in (("a", 14.7, b"w"), ("b", 29.6, b"w"), ("c", 14.7, b"x")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(weights)
        (folder / INFO_FILE).write_text(json.dumps({"seconds": seconds}))
        write_manifest(folder)
        sums.append(weights_checksum(folder))
    assert sums[0] == sums[1] != sums[2]
    assert weights_checksum(tmp_path) is None  # no manifest
