"""The synthetic-data cache returns exactly what the generator draws, draws once, and never serves a stale copy."""

from __future__ import annotations

import pytest
import torch

from gradeff.axes.data import TASKS
from gradeff.axes.data.cache import cache_file, cached, source_digest
from gradeff.axes.data.checksums import CacheRebuiltWarning
from gradeff.axes.data.dataset import Dataset

_BUILDER = "gradeff.axes.data.standins:objects"
_SIZES = dict(num_classes=5, image_size=16, num_samples=20, seed=3, heldout_samples=10, validation_samples=5)


def _draw() -> Dataset:
    return TASKS["cifar100"].build(**_SIZES | {"num_classes": 5})


def _counting(calls: list):
    def draw():
        calls.append(1)
        return _draw()
    return draw


def _same(a: Dataset, b: Dataset) -> None:
    for name in ("train", "heldout", "validation"):
        x = a if name == "train" else getattr(a, name)
        y = b if name == "train" else getattr(b, name)
        assert set(x.tensors) == set(y.tensors)
        for key in x.tensors:
            assert x.tensors[key].dtype == y.tensors[key].dtype
            assert torch.equal(x.tensors[key], y.tensors[key]), (name, key)
        assert torch.equal(x.targets, y.targets)
        assert (x.task, x.loss_floor, x.floor_note, x.info, x.decode) == (y.task, y.loss_floor, y.floor_note, y.info,
                                                                          y.decode)


def test_second_call_reads_the_copy_bit_for_bit(tmp_path):
    calls: list = []
    first = cached(_BUILDER, _SIZES, _counting(calls), root=tmp_path)
    second = cached(_BUILDER, _SIZES, _counting(calls), root=tmp_path)
    assert len(calls) == 1
    _same(first, second)
    _same(second, _draw())
    assert second.heldout is not None and second.validation is not None
    assert second.heldout.heldout is None


def test_arguments_name_different_files(tmp_path):
    a = cache_file(_BUILDER, _SIZES, tmp_path)
    b = cache_file(_BUILDER, _SIZES | {"seed": 4}, tmp_path)
    c = cache_file("gradeff.axes.data.standins:textures", _SIZES, tmp_path)
    assert len({a, b, c}) == 3
    assert a == cache_file(_BUILDER, dict(reversed(list(_SIZES.items()))), tmp_path)


def test_the_generators_source_is_in_the_key(tmp_path, monkeypatch):
    before = cache_file(_BUILDER, _SIZES, tmp_path)
    monkeypatch.setattr("gradeff.axes.data.cache.source_digest", lambda: "0" * 64)
    assert cache_file(_BUILDER, _SIZES, tmp_path) != before
    assert len(source_digest()) == 64


def test_builders_outside_the_data_package_are_never_cached(tmp_path):
    calls: list = []
    assert cache_file("myproject.data:build", _SIZES, tmp_path) is None
    for _ in range(2):
        cached("myproject.data:build", _SIZES, _counting(calls), root=tmp_path)
    assert len(calls) == 2
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "checksum", "no-checksum"])
def test_a_damaged_copy_is_drawn_again(tmp_path, damage):
    calls: list = []
    cached(_BUILDER, _SIZES, _counting(calls), root=tmp_path)
    path = cache_file(_BUILDER, _SIZES, tmp_path)
    checksum = path.with_name(path.name + ".sha256")
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-100] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "checksum":
        checksum.write_text("0" * 64 + "\n")
    else:
        checksum.unlink()
    with pytest.warns(CacheRebuiltWarning) as caught:
        again = cached(_BUILDER, _SIZES, _counting(calls), root=tmp_path)
    # One line naming the file and why (a checksum that lies about the bytes reads as the bytes being changed).
    (message,) = [str(w.message) for w in caught]
    why = "no readable" if damage == "no-checksum" else "do not match its sha256"
    assert message.startswith(f"cache {path}: ") and why in message and message.endswith("rebuilding it")
    assert len(calls) == 2
    _same(again, _draw())
    cached(_BUILDER, _SIZES, _counting(calls), root=tmp_path)
    assert len(calls) == 2  # the redrawn copy is sound again


def test_a_dataset_json_would_change_is_not_cached(tmp_path):
    calls: list = []

    def draw():
        calls.append(1)
        base = _draw()
        return Dataset(task=base.task, tensors=base.tensors, targets=base.targets, loss_floor=None, floor_note="",
                       info={"shape": (3, 4)})

    first = cached(_BUILDER, _SIZES, draw, root=tmp_path)
    second = cached(_BUILDER, _SIZES, draw, root=tmp_path)
    assert len(calls) == 2
    assert first.info == second.info == {"shape": (3, 4)}


def test_an_unwritable_cache_still_gives_the_data(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _same(cached(_BUILDER, _SIZES, _draw, root=blocker), _draw())
