"""A registered model's spec held to the model it builds on meta; the docs' plain torch.nn.Module runs as a cell."""

import re
from pathlib import Path

import pytest

from gradeff.records.store import read_records
from gradeff.studies.spec_check import lora_target_misses, missing_batch_keys

PLUGIN = ("-p", "gradeff.pytest_plugin")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def _docs_conftest() -> str:
    """The docs' plain-module registration, as written there."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    (block,) = [block for block in blocks if "class SmallConvNet" in block]
    return block


@pytest.mark.parametrize(("targets", "misses"), [
    (("q_proj", "fc1"), []),
    (("attn.q_proj",), []),             # a dotted tail of the full name
    (("proj",), ["proj"]),              # a suffix of a name's last part is not a match (peft's rule)
    (("layers.0.attn.q_proj", "qkv"), ["qkv"]),
])
def test_lora_targets_match_as_peft_matches_them(targets, misses):
    names = ["", "layers", "layers.0", "layers.0.attn", "layers.0.attn.q_proj", "layers.0.mlp.fc1"]
    assert lora_target_misses(targets, names) == misses


def test_batch_keys_a_forward_cannot_take():
    def plain(pixel_values, labels=None):
        return None

    def keyword_only(*, pixel_values, labels):
        return None

    def open_ended(pixel_values, **kwargs):
        return None

    def images_only(pixel_values):
        return None

    keys = ("pixel_values", "labels")
    assert missing_batch_keys(plain, keys) == missing_batch_keys(keyword_only, keys) == []
    assert missing_batch_keys(open_ended, keys) == []
    assert missing_batch_keys(images_only, keys) == ["labels"]


def test_the_docs_plain_module_trains_as_a_cell(pytester, tmp_path):
    """The docs' SmallConvNet, registered as written: its cells run, are scored on the test split, and the
    checkpointing cells skip with the reason its spec gives."""
    pytester.makeconftest(_docs_conftest())
    results = tmp_path / "r.jsonl"
    outcome = pytester.runpytest_subprocess(
        *PLUGIN, "-p", "no:cacheprovider", "--pyargs", "gradeff.benchmarks.test_grid", "-k",
        "convnet-adam-standard or convnet-adam-checkpoint", "--gradeff-epochs", "1", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1, skipped=1)
    records = {r.cell: r for r in read_records(results)}
    trained = records["convnet-adam-standard"]
    assert trained.status == "ok" and trained.summary.final_heldout_accuracy is not None
    assert trained.parameters["total"] == sum(p.numel() for p in _convnet(tmp_path).parameters())
    assert records["convnet-adam-checkpoint"].status == "skipped"


def _convnet(tmp_path):
    """The docs' model at tiny (10 classes, 32 px), built here as the cell built it."""
    namespace: dict = {}
    exec(compile(_docs_conftest(), str(tmp_path / "conftest.py"), "exec"), namespace)
    return namespace["build_convnet"]("tiny", num_labels=10, image_size=32)


@pytest.mark.parametrize(("change", "message"), [
    ("native_image_size=True,", "native_image_size=True, lora_targets=('classifier', 'qkv'),"),
    ("def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None)",
     "def forward(self, pixel_values: torch.Tensor, targets: torch.Tensor | None = None)"),
], ids=["lora-target", "batch-key"])
def test_a_spec_the_model_does_not_keep_is_refused_before_any_cell(pytester, change, message):
    source = _docs_conftest()
    assert change in source
    pytester.makeconftest(source.replace(change, message).replace("labels) if labels", "targets) if targets"))
    outcome = pytester.runpytest(*PLUGIN, "--pyargs", "gradeff.benchmarks.test_grid", "--collect-only", "-q")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    expected = ("model 'convnet': lora_targets ['qkv'] match no module of the model it builds; its linear layers "
                "end in: classifier;" if "qkv" in message else
                "model 'convnet': its forward() takes no labels: every cell calls model(**batch), and the "
                "batch of a image_classification task holds pixel_values, labels (gradeff.axes.data.BATCH_KEYS);")
    (line,) = [line for line in outcome.stderr.lines if line.startswith("ERROR: gradeff registration")]
    assert expected in line, line


def test_a_builder_that_cannot_build_on_meta_is_left_unchecked_with_a_warning(pytester):
    pytester.makeconftest(_docs_conftest().replace(
        "return SmallConvNet(num_labels, image_size).to(device)",
        "if str(device) == 'meta':\n        raise RuntimeError('no meta here')\n"
        "    return SmallConvNet(num_labels, image_size).to(device)"))
    with pytest.warns(UserWarning, match=re.escape("model 'convnet': not checked against its model: building it on "
                                                   "meta at tiny failed (RuntimeError: no meta here)")):
        outcome = pytester.runpytest(*PLUGIN, "--pyargs", "gradeff.benchmarks.test_grid", "--collect-only", "-q",
                                     "-m", "convnet")
    assert outcome.ret == pytest.ExitCode.OK
    outcome.stdout.fnmatch_lines(["18/90 tests collected*"])
