"""A task's trivial baselines are computed once per split content, kept with a checksum, and never fail a cell."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from gradeff.axes.data import trivial, trivial_cache
from gradeff.axes.data.checksums import CacheRebuiltWarning
from gradeff.axes.data.dataset import Dataset
from gradeff.axes.data.trivial_cache import TrivialBaselinesWarning, cached_trivial_baselines, splits_digest

_COMPUTE = trivial.trivial_baselines


def _text(rows: list[list[int]]) -> Dataset:
    ids = torch.tensor(rows)
    return Dataset(task="t", tensors={"input_ids": ids, "labels": ids.clone()}, targets=torch.full((len(rows),), 2),
                   loss_floor=None, floor_note="")


def _task(test_rows=((5, 4, 5, 4),)) -> Dataset:
    return _text([[4, 5, 4, 5], [4, 5, 5, 4]]).with_heldout(_text([list(row) for row in test_rows]))


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """The kinds trivial_baselines is called for, with this process's memory emptied before and after."""
    calls: list[str] = []

    def counting(data, kind):
        calls.append(kind)
        return _COMPUTE(data, kind)

    monkeypatch.setattr(trivial_cache, "trivial_baselines", counting)
    monkeypatch.setattr(trivial_cache, "_MEMO", {})
    return calls


def test_computed_once_then_read_back_exactly(tmp_path, counted, monkeypatch):
    data = _task()
    first = cached_trivial_baselines(data, "causal_lm", root=tmp_path)
    assert first == _COMPUTE(data, "causal_lm") and counted == ["causal_lm"]
    # Another process (an empty memory) reads the file: the same figures, no computation.
    monkeypatch.setattr(trivial_cache, "_MEMO", {})
    assert cached_trivial_baselines(data, "causal_lm", root=tmp_path) == first
    assert counted == ["causal_lm"]
    assert len(list((tmp_path / "data" / "trivial").glob("causal_lm-*.json"))) == 1


def test_other_splits_or_another_kind_are_computed_afresh(tmp_path, counted):
    cached_trivial_baselines(_task(), "causal_lm", root=tmp_path)
    other = cached_trivial_baselines(_task(test_rows=((4, 4, 4, 4),)), "causal_lm", root=tmp_path)
    assert counted == ["causal_lm", "causal_lm"]
    assert other == _COMPUTE(_task(test_rows=((4, 4, 4, 4),)), "causal_lm") != _COMPUTE(_task(), "causal_lm")
    cached_trivial_baselines(_task(), "image_captioning", root=tmp_path)
    assert counted[-1] == "image_captioning"


def test_the_digest_follows_every_split_and_nothing_else():
    base = splits_digest(_task())
    assert splits_digest(_task()) == base  # rebuilt from the same numbers
    assert splits_digest(_task(test_rows=((5, 4, 5, 5),))) != base
    assert splits_digest(_task().with_validation(_text([[4, 4, 5, 5]]))) != base
    # The same numbers in another dtype are other tensors (a model would read them otherwise).
    data = _task()
    retyped = Dataset(task="t", tensors={k: v.to(torch.int32) for k, v in data.tensors.items()}, targets=data.targets,
                      loss_floor=None, floor_note="").with_heldout(data.heldout)
    assert splits_digest(retyped) != base


def test_a_dataset_object_is_hashed_once_and_forgotten_with_it(monkeypatch):
    import gc

    hashed = []
    monkeypatch.setattr(trivial_cache, "_digest", lambda dataset: hashed.append(dataset) or f"d{len(hashed)}")
    data = _task()
    assert splits_digest(data) == splits_digest(data) == "d1" and len(hashed) == 1
    key = id(data)
    del data, hashed[:]
    gc.collect()
    assert key not in trivial_cache._DIGESTS


def test_a_corrupt_copy_is_computed_again_with_a_warning(tmp_path, counted, monkeypatch):
    data = _task()
    first = cached_trivial_baselines(data, "causal_lm", root=tmp_path)
    (path,) = (tmp_path / "data" / "trivial").glob("*.json")
    path.write_text(path.read_text().replace("bigram", "bigrem"))
    monkeypatch.setattr(trivial_cache, "_MEMO", {})
    with pytest.warns(CacheRebuiltWarning, match=path.name):
        again = cached_trivial_baselines(data, "causal_lm", root=tmp_path)
    assert again == first and counted == ["causal_lm", "causal_lm"]


def test_an_infinite_loss_survives_the_file(tmp_path, monkeypatch):
    """A class the training split lacks costs the regression an infinite cross-entropy: kept as it is."""
    def images(values, labels):
        pixels = torch.tensor(values, dtype=torch.float32).reshape(-1, 1, 1, 1)
        return Dataset(task="i", tensors={"pixel_values": pixels, "labels": torch.tensor(labels)},
                       targets=torch.ones(len(labels), dtype=torch.long), loss_floor=None, floor_note="")

    data = images([0.0, 0.1, 5.0, 5.1], [0, 0, 1, 1]).with_heldout(images([0.05, 5.05, 2.5], [0, 1, 2]))
    monkeypatch.setattr(trivial_cache, "_MEMO", {})
    first = cached_trivial_baselines(data, "image_classification", root=tmp_path)
    assert math.isinf(first["logistic_regression"]["loss"])
    monkeypatch.setattr(trivial_cache, "_MEMO", {})
    again = cached_trivial_baselines(data, "image_classification", root=tmp_path)
    assert math.isinf(again["logistic_regression"]["loss"]) and again["pixel_1nn"] == first["pixel_1nn"]


def test_no_test_split_or_a_task_the_baselines_do_not_cover_gives_none(tmp_path, counted):
    assert cached_trivial_baselines(_text([[4, 5, 4, 5]]), "causal_lm", root=tmp_path) is None
    assert counted == []  # nothing to score on: not even tried
    # Multi-label genres (scored by F1) have no baselines of their kind: none, and no word in every cell.
    genres = Dataset(task="g", tensors={"pixel_values": torch.zeros(4, 1, 2, 2), "labels": torch.zeros(4, 3)},
                     targets=torch.ones(4), loss_floor=None, floor_note="")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cached_trivial_baselines(genres.with_heldout(genres), "image_classification", root=tmp_path) is None
    assert counted == []
    # Baselines that fail (a kind they do not know) are said once per computation and leave the record without.
    with pytest.warns(TrivialBaselinesWarning, match="no trivial baselines for 'regression'"):
        assert cached_trivial_baselines(_task(), "regression", root=tmp_path) is None
    assert not list((tmp_path / "data" / "trivial").glob("*.json"))  # a failure is not kept: tried again next time


def test_without_a_cache_folder_the_figures_are_computed_once_in_the_process(counted):
    data = _task()
    first = cached_trivial_baselines(data, "causal_lm", root=None)
    assert cached_trivial_baselines(data, "causal_lm", root=None) == first == _COMPUTE(data, "causal_lm")
    assert counted == ["causal_lm"]
