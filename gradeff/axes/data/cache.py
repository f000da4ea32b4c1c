"""Synthetic data drawn once per machine: a generator's output kept on disk and shared by every process.

Drawing a stand-in is deterministic but not free: the backbones' pretraining task (8,704 images with
FFT-coloured backgrounds) takes about 12 s, the DTD stand-in about 3 s. Without a shared copy every backbone's
pretraining draws the same pretraining task again and every pytest-xdist worker draws every grid's data again.

A file is named by the generator (``module:function``), its arguments, the numpy and torch versions (whose
random streams and kernels draw the samples) and a hash of the source of the :mod:`gradeff.axes.data` package: a
change to any generator draws afresh instead of reading samples of the old one. Only generators of that package
are cached (a registered dataset's builder is code the hash does not cover), and only a dataset that comes back
exactly as it was drawn: its tensors as they are, its other fields through JSON only when JSON gives the same
values back. Its sha256 is written last and checked on every read (:mod:`gradeff.axes.data.checksums`): a file that
fails it or does not load is drawn again, with a warning naming it.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

import numpy
import torch
from filelock import FileLock

from gradeff.axes.data.checksums import read_checked, write_checked
from gradeff.axes.data.dataset import Dataset

__all__ = ["FORMAT", "cache_file", "cached", "source_digest"]

# Bump when the file's layout changes.
FORMAT = 1
_PACKAGE = "gradeff.axes.data."
_SPLITS = ("train", "heldout", "validation")
_FIELDS = ("task", "loss_floor", "floor_note", "info", "decode")


@lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 over the :mod:`gradeff.axes.data` package's Python files (names and bytes, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_file(builder: str, arguments: Mapping, root: Path) -> Path | None:
    """Where ``builder(**arguments)``'s dataset is kept under ``root``; ``None`` for a builder outside
    :mod:`gradeff.axes.data` (its source is not in the key, so a copy could outlive a change to it)."""
    if not builder.startswith(_PACKAGE) or ":" not in builder:
        return None
    key = json.dumps({"format": FORMAT, "builder": builder, "arguments": dict(arguments), "numpy": numpy.__version__,
                      "torch": torch.__version__, "source": source_digest()}, sort_keys=True, default=repr)
    name = builder.removeprefix(_PACKAGE).replace(":", ".")
    return root / "data" / "synthetic" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.pt"


def cached(builder: str, arguments: Mapping, draw: Callable[[], Dataset], *, root: Path) -> Dataset:
    """``draw()``'s dataset, read from ``root``'s copy when there is a sound one, else drawn and kept.

    Processes share the copy through a file lock: one draws, the others wait and read it.
    """
    path = cache_file(builder, arguments, root)
    if path is None:
        return draw()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError:  # a read-only or missing cache folder: the data is drawn as if there were no cache
        return draw()
    try:
        loaded = _read(path)
        if loaded is not None:
            return loaded
        dataset = draw()
        payload = _payload(dataset)
        if payload is not None:
            _write(path, payload)
        return dataset
    finally:
        lock.release()


def _payload(dataset: Dataset) -> dict | None:
    """What is saved of ``dataset``; ``None`` when it would not come back exactly."""
    splits = {"train": dataset, "heldout": dataset.heldout, "validation": dataset.validation}
    tensors, fields = {}, {}
    for name, split in splits.items():
        if split is None:
            continue
        if name != "train" and (split.heldout is not None or split.validation is not None):
            return None
        tensors[name] = {"tensors": dict(split.tensors), "targets": split.targets}
        fields[name] = {field: getattr(split, field) for field in _FIELDS}
    try:
        text = json.dumps(fields, allow_nan=False)
    except (TypeError, ValueError):
        return None
    # JSON turns tuples into lists and keys into strings: such a dataset is not cached rather than changed.
    if json.loads(text) != fields:
        return None
    return {"format": FORMAT, "tensors": tensors, "fields": text}


def _write(path: Path, payload: dict) -> None:
    # A full disk costs the next process a draw (said in a warning), never this one its data.
    write_checked(path, lambda temporary: torch.save(payload, temporary), best_effort=True)


# What reading a copy that is not what it should be raises (torch.load, JSON, the Dataset's own checks).
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, pickle.UnpicklingError)


def _read(path: Path) -> Dataset | None:
    """The copy at ``path``, or ``None`` when there is none, or none that matches its sha256 and loads (then said in
    a warning naming the file, and the copy removed for the caller to draw again)."""
    return read_checked(path, _load, errors=_UNREADABLE)


def _load(path: Path) -> Dataset:
    payload = torch.load(path, weights_only=True)
    if payload.get("format") != FORMAT:
        raise ValueError(f"format {payload.get('format')!r}, not {FORMAT}")
    fields = json.loads(payload["fields"])
    splits = {name: Dataset(**fields[name], **payload["tensors"][name]) for name in fields}
    dataset = splits["train"]
    if "heldout" in splits:
        dataset = dataset.with_heldout(splits["heldout"])
    if "validation" in splits:
        dataset = dataset.with_validation(splits["validation"])
    return dataset
