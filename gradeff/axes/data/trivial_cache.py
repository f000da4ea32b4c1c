"""A task's trivial baselines, computed once per machine for its splits and kept beside the drawn data.

Every cell of a grid that trains on the same splits reads the same baselines (:mod:`gradeff.axes.data.trivial`): the
logistic regression on a classifier's pixels costs up to a few seconds, counting a text's bigrams a few
milliseconds. So they are computed once per split content, not once per cell: a cell's record carries them (its
task section's ``trivial_baselines``) at the cost of hashing its splits and reading one small file.

The key is what the figures are a function of: the task's kind and every split's tensors (names, dtypes, shapes and
bytes; how stored images are decoded), with the :mod:`gradeff.axes.data` package's source digest and the numpy and
scikit-learn versions (a change to a baseline, or to the solver, computes afresh). Keying by content rather than by
the task's builder arguments covers real data (whose training split a cell cuts to whole steps) and a registered
dataset alike. The file is JSON with its sha256 written last (:mod:`gradeff.axes.data.checksums`); one that fails it is
computed again with a warning naming it. Processes share a file through a lock: one computes, the others read.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import weakref
from importlib import metadata
from pathlib import Path

import numpy
import torch
from filelock import FileLock

from gradeff.axes.data.cache import source_digest
from gradeff.axes.data.checksums import read_checked, write_checked
from gradeff.axes.data.dataset import Dataset
from gradeff.axes.data.trivial import trivial_baselines

__all__ = ["FORMAT", "TrivialBaselinesWarning", "cached_trivial_baselines", "splits_digest"]

# Bump when the file's layout changes.
FORMAT = 1
# This process's baselines by key: every cell of a worker after the first reads no file at all.
_MEMO: dict[str, dict] = {}
# This process's split digests by the id of the dataset object (dropped with the object).
_DIGESTS: dict[int, str] = {}


class TrivialBaselinesWarning(UserWarning):
    """A task's trivial baselines could not be computed (the message says why); its records carry ``None``."""


def splits_digest(dataset: Dataset) -> str:
    """sha256 over the training split and its attached test and validation splits: each split's tensors (name,
    dtype, shape, bytes, in name order), its targets and its decoding; the same splits give the same digest.

    Hashing is cheap beside what it saves (the tiny profile's splits are a few MB: 0.5–25 ms), and it is done once
    per dataset object: a process's cells share their task's object (:func:`gradeff.cell.plan.task_dataset`), and a
    dataset's splits never change (frozen, and no cell writes its tensors).
    """
    key = id(dataset)
    if key not in _DIGESTS:
        _DIGESTS[key] = _digest(dataset)
        # The object's id may be another's once it is gone.
        weakref.finalize(dataset, _DIGESTS.pop, key, None)
    return _DIGESTS[key]


def _digest(dataset: Dataset) -> str:
    digest = hashlib.sha256()
    for name, split in (("train", dataset), ("test", dataset.heldout), ("validation", dataset.validation)):
        digest.update(f"{name}:{split is not None}\0".encode())
        if split is None:
            continue
        for key, tensor in sorted([*split.tensors.items(), ("targets", split.targets)]):
            tensor = tensor.detach().cpu().contiguous()
            digest.update(f"{key}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
        digest.update(json.dumps(split.decode, sort_keys=True, default=repr).encode())
    return digest.hexdigest()


def _key(dataset: Dataset, kind: str) -> str:
    return hashlib.sha256(json.dumps(
        {"format": FORMAT, "kind": kind, "splits": splits_digest(dataset), "source": source_digest(),
         # Read from the installed metadata: importing scikit-learn costs a text task's process a second for nothing.
         "numpy": numpy.__version__, "sklearn": metadata.version("scikit-learn")}, sort_keys=True).encode()).hexdigest()


def _covered(dataset: Dataset, kind: str) -> bool:
    """Whether the baselines know the task: a multi-label classifier (MM-IMDb's genres, scored by F1) has none, and
    every one of its cells would otherwise warn that they were not computed."""
    labels = dataset.tensors.get("labels")
    return not (kind == "image_classification" and labels is not None and labels.dim() != 1)


def _read(path: Path) -> dict:
    payload = json.loads(path.read_text(encoding="utf-8"))
    if payload.get("format") != FORMAT or not isinstance(payload.get("baselines"), dict):
        raise ValueError(f"format {payload.get('format')!r}, not {FORMAT}")
    return payload["baselines"]


def _compute(dataset: Dataset, kind: str) -> dict | None:
    try:
        return trivial_baselines(dataset, kind)
    # A baseline is a yardstick beside the cell, never a reason for the cell to fail: a task it does not cover
    # (multi-label genres, no test split) or a solver that gave up leaves the record without one.
    except Exception as exc:  # noqa: BLE001 — any failure of the yardstick is recorded as "not known"
        warnings.warn(f"trivial baselines of {dataset.task!r} not computed ({type(exc).__name__}: {exc}); its "
                      f"records carry none", TrivialBaselinesWarning, stacklevel=3)
        return None


def cached_trivial_baselines(dataset: Dataset, kind: str, *, root: Path | None) -> dict | None:
    """The trivial baselines of ``dataset``'s splits (:func:`gradeff.axes.data.trivial.trivial_baselines`), from this
    process's memory, else ``root``'s copy, else computed and kept there.

    Args:
        dataset: the training split a cell trains on, with its test (and validation) split attached.
        kind: the task's kind (``TaskSpec.kind``).
        root: the cache folder (``None``: computed in this process only).

    Returns:
        name → ``{"metric", "value", "what", ...}``; ``None`` where there is no test split, the task is
        multi-label classification (no baselines of its kind), or they could not be computed (a warning says why).
    """
    if dataset.heldout is None or len(dataset.heldout) == 0 or not _covered(dataset, kind):
        return None
    key = _key(dataset, kind)
    if key in _MEMO:
        return _MEMO[key]
    path = root / "data" / "trivial" / f"{kind}-{key[:20]}.json" if root is not None else None
    baselines = _shared(path, dataset, kind) if path is not None else _compute(dataset, kind)
    if baselines is not None:
        _MEMO[key] = baselines
    return baselines


def _shared(path: Path, dataset: Dataset, kind: str) -> dict | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError:  # a read-only or missing cache folder: computed as if there were no cache
        return _compute(dataset, kind)
    try:
        found = read_checked(path, _read, errors=(OSError, ValueError, KeyError, TypeError, AttributeError))
        if found is not None:
            return found
        baselines = _compute(dataset, kind)
        if baselines is not None:
            # JSON writes an infinite loss (a class the training split lacks) as Infinity, which json reads back.
            text = json.dumps({"format": FORMAT, "kind": kind, "baselines": baselines}, sort_keys=True)
            write_checked(path, lambda temporary: temporary.write_text(text, encoding="utf-8"), best_effort=True)
        return baselines
    finally:
        lock.release()
