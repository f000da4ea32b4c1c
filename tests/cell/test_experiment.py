"""A cell's experiment fingerprint: every input that can change its numbers changes it, and nothing else does (no
path, session, process or time), so --gradeff-resume keeps a record for the very same experiment only."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from gradeff.axes.data.real_sources import DataSource
from gradeff.cell.config import RunConfig
from gradeff.cell.experiment import experiment, experiment_inputs
from gradeff.records.fingerprint import differences, experiment_section, fingerprint
from gradeff.studies.grid import Cell

LLM = Cell("llm", "adam", "standard", grid="main")
CIFAR = Cell("vit_s", "adamw", "standard", method="lora", dataset="cifar100", grid="peft")
BASE = RunConfig(profile="tiny", seed=0, threads=1, device="cpu", session="s1")


def parquet(path, labels):
    import datasets
    import numpy as np
    from PIL import Image

    images = [Image.fromarray(np.full((8, 8, 3), 40 * i % 255, dtype=np.uint8)) for i in range(len(labels))]
    features = datasets.Features({"img": datasets.Image(), "fine_label": datasets.ClassLabel(num_classes=100)})
    datasets.Dataset.from_dict({"img": images, "fine_label": labels}, features=features).to_parquet(str(path))
    return path


# Each of the resumed options, and more: (what changes, the cell, the config it runs under, an input it names).
CHANGES = [
    ("--gradeff-threads 2", LLM, replace(BASE, threads=2), "threads"),
    ("--gradeff-fused", LLM, replace(BASE, fused=True), "fused"),
    ("--gradeff-tune lr", LLM, replace(BASE, tune="lr"), "tune"),
    ("--gradeff-tune-points 3", LLM, replace(BASE, tune="lr", tune_points=3), "tune"),
    ("--gradeff-memory-budget 1KiB", LLM, replace(BASE, memory_budget=1024), "memory_budget"),
    ("--gradeff-compile", LLM, replace(BASE, compile="inductor"), "compile"),
    ("--gradeff-protocol shared", LLM, replace(BASE, protocol="shared"), "protocol"),
    ("--gradeff-epochs 1", LLM, replace(BASE, epochs=1), "hparams.epochs"),
    ("--gradeff-precision bf16", LLM, replace(BASE, precision="bf16"), "precision"),
    ("--gradeff-isolate", LLM, replace(BASE, isolate=True), "isolate"),
    ("--gradeff-grid-intensity", LLM, replace(BASE, meters=replace(BASE.meters, grid_gco2_per_kwh=50.0)),
     "meters.grid_gco2_per_kwh"),
]


@pytest.mark.parametrize(("option", "cell", "config", "named"), CHANGES, ids=[c[0] for c in CHANGES])
def test_hostile_each_setting_that_changes_the_numbers_changes_the_fingerprint(option, cell, config, named):
    before, after = experiment(cell, BASE), experiment(cell, config)
    assert before["fingerprint"] and after["fingerprint"] and before["fingerprint"] != after["fingerprint"]
    said = differences(before, after)
    assert any(line.startswith(f"{named} ") for line in said), said


def test_hostile_real_data_in_place_of_a_stand_in_and_a_changed_byte_change_it(tmp_path):
    """--gradeff-data cifar100=real.parquet once resumed onto the stand-in's record; the source is named by its
    content: a changed byte is another experiment, the same bytes elsewhere are the same one."""
    real = parquet(tmp_path / "real.parquet", [3, 1, 4, 1, 5, 9, 2, 6])
    stand_in = experiment(CIFAR, BASE)
    given = experiment(CIFAR, replace(BASE, data=(DataSource(key="cifar100", path=str(real)),)))
    assert stand_in["inputs"]["data"] == {"task": "cifar100", "source": "synthetic"}
    assert given["inputs"]["data"]["source"] == "cifar100" and len(given["inputs"]["data"]["sha256"]) == 64
    assert any(line.startswith("data.source \"synthetic\" → \"cifar100\"") for line in differences(stand_in, given))
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / "copy.parquet"
    moved.write_bytes(real.read_bytes())
    same = experiment(CIFAR, replace(BASE, data=(DataSource(key="cifar100", path=str(moved)),)))
    assert same["fingerprint"] == given["fingerprint"]
    other = parquet(tmp_path / "other.parquet", [3, 1, 4, 1, 5, 9, 2, 7])
    changed = experiment(CIFAR, replace(BASE, data=(DataSource(key="cifar100", path=str(other)),)))
    assert [line.split(" ")[0] for line in differences(given, changed)] == ["data.sha256"]


def test_hostile_given_weights_are_named_by_their_content(tmp_path):
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights one")
    with_weights = replace(BASE, weights=(("llm", str(folder)),))
    first = experiment(LLM, with_weights)
    assert first["inputs"]["weights"]["source"] == "given"
    (folder / "model.safetensors").write_bytes(b"weights two")
    assert [line.split(" ")[0] for line in differences(first, experiment(LLM, with_weights))] == ["weights.sha256"]


@pytest.mark.slow
def test_nothing_volatile_is_an_input(tmp_path):
    """The session, the cache folder, the process and the clock are not the experiment: two -n 2 workers and a rerun
    in another process agree on the fingerprint."""
    here = experiment(LLM, BASE)
    elsewhere = experiment(LLM, replace(BASE, session="other", cache_dir=str(tmp_path), device="auto",
                                        process="isolated", isolate=False))
    assert here["fingerprint"] == elsewhere["fingerprint"]
    code = ("import json; from gradeff.cell.config import RunConfig; from gradeff.cell.experiment import experiment;"
            "from gradeff.studies.grid import Cell; print(json.dumps(experiment(Cell('llm', 'adam', 'standard'), "
            "RunConfig(profile='tiny', seed=0, threads=1, device='cpu', session='s2'))))")
    other = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      check=True).stdout)
    assert other == here


def test_the_record_carries_what_resume_computes():
    """The record builder and --gradeff-resume ask one function: a skipped cell's record has the fingerprint a resumed
    session computes for it."""
    from gradeff.cell.run import run_cell

    cell = Cell("vlm", "cgd", "standard")
    config = replace(BASE, precision="fp16")  # cgd in fp16: skipped before anything is built
    record = run_cell(cell, config)
    assert record.status == "skipped"
    assert record.experiment == experiment(cell, config)
    assert record.experiment["inputs"]["skip"] == record.detail


def test_fingerprints_are_canonical_and_differences_name_the_inputs():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": (1, 2), "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 1.5}) and fingerprint({"a": 1}).startswith("v1:")
    before, after = experiment_section({"a": 1, "d": {"x": "y" * 80}}), experiment_section({"a": 2, "d": {}})
    assert differences(before, after) == ["a 1 → 2", f"d.x \"{'y' * 38}… → absent"]
    tuned = differences(experiment_section({"tune": None}), experiment_section({"tune": {"param": "lr", "points": 2}}))
    assert tuned == ['tune null → {"param": "lr", "points": 2}']
    assert differences(before, before) == []
    assert differences({}, after) == ["the earlier record has no experiment fingerprint (made before fingerprints, "
                                      "or by hand)"]
    assert experiment_inputs(LLM, BASE)["code_version"]
