"""--gradeff-weights end to end: a checkpoint that does not fit stops the session before the first cell, with the
offending keys named; one that fits starts the cells, and their records say what was loaded."""

import fnmatch

import pytest

from gradeff.records.store import read_records
from tests.axes.models.published import perturbed, save_reference, to_reference

PLUGIN = ("-p", "gradeff.pytest_plugin")
ONE_CELL = ("-m", "peft and cell(model='vit_s', method='full', strategy='standard', dataset='cifar100')")


@pytest.fixture(scope="module")
def vit_s_state():
    """A tiny ViT-S with a 10-class head, in timm's layout."""
    return to_reference("vit_s", perturbed("vit_s", num_labels=10).state_dict())


def _refused(pytester, results, *args):
    outcome = pytester.runpytest(*PLUGIN, *ONE_CELL, f"--gradeff-results={results}", *args)
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    assert not results.exists()  # not one cell ran
    return "\n".join(outcome.errlines + outcome.outlines)


def test_a_corrupt_checkpoint_is_refused_before_the_first_cell(grid_pytester, vit_s_state, tmp_path):
    path = save_reference("vit_s", vit_s_state, tmp_path)
    path.write_bytes(path.read_bytes()[:-100])
    text = _refused(grid_pytester, tmp_path / "r.jsonl", f"--gradeff-weights=vit_s={path}")
    assert fnmatch.fnmatch(text, f"*--gradeff-weights vit_s={path} (profile tiny): {path}: cannot be read*")


def test_a_mismatched_checkpoint_is_refused_with_the_keys_named(grid_pytester, vit_s_state, tmp_path):
    state = dict(vit_s_state)
    del state["blocks.2.attn.proj.weight"]
    state["blocks.2.attn.extra"] = state["blocks.2.attn.proj.bias"].clone()
    path = save_reference("vit_s", state, tmp_path)
    text = _refused(grid_pytester, tmp_path / "r.jsonl", f"--gradeff-weights=vit_s={path}")
    assert "1 missing (model keys the checkpoint does not give): vit.layers.2.attention.o_proj.weight" in text
    assert "1 unexpected (checkpoint keys that land nowhere): blocks.2.attn.extra" in text


def test_a_checkpoint_for_another_profile_is_refused(grid_pytester, vit_s_state, tmp_path):
    path = save_reference("vit_s", vit_s_state, tmp_path)
    text = _refused(grid_pytester, tmp_path / "r.jsonl", f"--gradeff-weights=vit_s={path}", "--gradeff-profile=small")
    assert f"--gradeff-weights vit_s={path} (profile small): does not fit vit_s" in text
    assert "vit.embeddings.cls_token [1, 1, 64], [1, 1, 192] (from cls_token)" in text


def test_a_hub_id_is_refused_without_allow_hub(grid_pytester, tmp_path):
    text = _refused(grid_pytester, tmp_path / "r.jsonl", "--gradeff-weights=vit_s=timm/vit_small_patch16_224")
    assert "as a hub id it needs --gradeff-allow-hub (nothing is downloaded without it)" in text


def test_a_fitting_checkpoint_starts_the_cell_and_is_recorded(grid_pytester, vit_s_state, tmp_path):
    """The 10-class checkpoint on CIFAR-100's 100 classes: backbone loaded, head re-initialised from the seed."""
    path = save_reference("vit_s", vit_s_state, tmp_path)
    results = tmp_path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(*PLUGIN, *ONE_CELL, "--gradeff-epochs=1",
                                                 f"--gradeff-results={results}",
                                                 f"--gradeff-weights=vit_s={path}")
    outcome.assert_outcomes(passed=1)
    (record,) = read_records(results)
    weights = record.weights
    assert (weights["source"], weights["format"], weights["real"], weights["stand_in"]) == (
        "local", "state_dict", True, None)
    checkpoint = weights["checkpoint"]
    assert checkpoint["reference"] == "timm vit_small_patch16_224" and checkpoint["head"] == "reinitialised"
    assert (checkpoint["checkpoint_classes"], checkpoint["head_seed"], checkpoint["path"]) == (10, 0, str(path))
