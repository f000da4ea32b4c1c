"""Weight sources: what ``--gradeff-weights KEY=SOURCE`` and
:func:`gradeff.axes.models.checkpoint.from_checkpoint` accept.

A source is one of

- a **state-dict file** (``.safetensors``, ``.pth``, ``.pt``, ``.bin``, ``.pth.tar``), e.g. timm's
  ``model.safetensors`` or the official Vim / MambaVision checkpoints, loaded through the backbone's explicit key
  map (:mod:`gradeff.axes.models.keymaps`);
- a **folder holding one** (the layout of a hub cache snapshot, ``.../snapshots/<revision>/``): its state-dict
  file, or, where a repository ships the same weights twice, the first of :data:`PREFERRED_FILES`;
- a **save_pretrained folder** of the model's own class (``config.json`` with its ``model_type``), loaded by
  transformers' ``from_pretrained`` as before; for a model without a key map (the baselines) every folder is one;
- a **hub id** (``owner/name``), only with ``--gradeff-allow-hub`` (``allow_hub=True``): the repository's weight
  and configuration files are downloaded into the hub cache once, before the first cell, and the snapshot folder
  is then read as above. Without the flag nothing is downloaded and the id is refused with that hint.

Files are read without running code: safetensors by their header, ``torch.load`` with ``weights_only=True``
(argument namespaces, which training scripts save beside the weights, are allowed as data).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from safetensors import safe_open

__all__ = ["PREFERRED_FILES", "STATE_DICT_SUFFIXES", "StartingWeights", "WeightSource", "WeightSourceError", "describe",
           "hub_origin", "is_hub_id", "load_state_dict", "read_shapes", "resolve", "sha256"]

STATE_DICT_SUFFIXES = (".safetensors", ".pth.tar", ".pth", ".pt", ".bin")
# A hub snapshot may hold the same weights in two formats (timm: model.safetensors and pytorch_model.bin).
PREFERRED_FILES = ("model.safetensors", "pytorch_model.bin")
# What a hub download fetches: weights in the formats read here, configuration and tokenizer files. Not the
# TensorFlow / Flax copies many repositories also hold.
_HUB_PATTERNS = ("*.json", "*.safetensors", "*.pth", "*.pth.tar", "*.txt", "*.model", "pytorch_model*.bin")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_HUB_CACHE_PATH = re.compile(r".*/models--(?P<owner>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<revision>[^/]+)(?:/.*)?")


class WeightSourceError(ValueError):
    """A source that cannot be used: missing, unreadable, ambiguous, or a hub id without permission."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightSource:
    """A resolved source.

    Attributes:
        given: what the user wrote (a path or a hub id).
        path: the local file (``state_dict``) or folder (``save_pretrained``) to load.
        format: ``state_dict`` or ``save_pretrained``.
        repo_id / revision: the hub repository and revision the files come from, when they lie in a hub cache.
    """

    given: str
    path: str
    format: str
    repo_id: str | None = None
    revision: str | None = None


def is_hub_id(text: str) -> bool:
    """Whether ``text`` reads as a hub repository id (``owner/name``) rather than a local path."""
    return bool(_HUB_ID.fullmatch(text)) and not Path(text).exists()


def hub_origin(path: str | Path) -> tuple[str | None, str | None]:
    """``(repo_id, revision)`` of a path inside a hub cache snapshot (``models--owner--name/snapshots/rev``)."""
    found = _HUB_CACHE_PATH.fullmatch(str(Path(path).resolve()).replace(os.sep, "/"))
    if found is None:
        return None, None
    return f"{found['owner']}/{found['name']}", found["revision"]


def _is_state_dict_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(STATE_DICT_SUFFIXES)


def _is_own_save_pretrained(folder: Path, model_type: str | None) -> bool:
    """A ``save_pretrained`` folder of the model's class: its ``config.json`` names the class's ``model_type``
    (``None``: any folder with a ``config.json`` is one). A timm or MambaVision hub snapshot has a
    ``config.json`` too, of another kind."""
    config = folder / "config.json"
    if not config.is_file():
        return False
    if model_type is None:
        return True
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == model_type
    except (OSError, ValueError):
        return False


def _state_dict_in(folder: Path, prefer: str | None = None) -> Path:
    files = sorted(p for p in folder.iterdir() if _is_state_dict_file(p))
    if not files:
        raise WeightSourceError(f"{folder} holds no state-dict file ({', '.join(STATE_DICT_SUFFIXES)}) and is not "
                                f"a save_pretrained folder of this model")
    for name in (prefer, *PREFERRED_FILES):
        if name is not None and folder / name in files:
            return folder / name
    if len(files) > 1:
        raise WeightSourceError(f"{folder} holds several state-dict files ({', '.join(p.name for p in files)}); "
                                f"name the one to load")
    return files[0]


def _download(repo_id: str) -> Path:
    """The snapshot folder of ``repo_id`` in the hub cache, downloading what is missing.

    The cache folder and offline mode are read when called (``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``), so a
    session that set them after importing huggingface_hub is obeyed.
    """
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        folder = snapshot_download(repo_id, allow_patterns=list(_HUB_PATTERNS), local_files_only=offline,
                                   cache_dir=os.environ.get("HF_HUB_CACHE") or None)
    except Exception as exc:  # noqa: BLE001 - the hub client's errors have many classes; all mean the same here
        raise WeightSourceError(f"hub id {repo_id!r}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    return Path(folder)


def resolve(text: str, *, allow_hub: bool = False, model_type: str | None = None, state_dicts: bool = True,
            prefer: str | None = None) -> WeightSource:
    """Resolve a source to a local file or folder (see the module docstring).

    Args:
        text: a path or a hub id.
        allow_hub: whether a hub id may be downloaded (``--gradeff-allow-hub``).
        model_type: the ``model_type`` of the model's own config class: a folder whose ``config.json`` names
            it is a ``save_pretrained`` folder, any other is read as holding a state dict.
        state_dicts: whether the model takes state dicts at all (only the backbones with a key map do); if
            not, every folder is a ``save_pretrained`` folder and a file is refused.
        prefer: the file to take in a folder that holds several (a repository's documented checkpoint).

    Raises:
        WeightSourceError: a path that does not exist, a folder without weights, a hub id without permission
            or that cannot be fetched, a state-dict file for a model without a key map.
    """
    path = Path(text).expanduser()
    if not path.exists():
        if not is_hub_id(text):
            raise WeightSourceError("no such file or folder")
        if not allow_hub:
            raise WeightSourceError("no such file or folder; as a hub id it needs --gradeff-allow-hub (nothing is "
                                    "downloaded without it)")
        path = _download(text)
    repo_id, revision = hub_origin(path)
    if path.is_dir() and (not state_dicts or _is_own_save_pretrained(path, model_type)):
        if not (path / "config.json").is_file():
            raise WeightSourceError(f"{path} is not a save_pretrained folder (no config.json)")
        return WeightSource(given=text, path=str(path), format="save_pretrained", repo_id=repo_id, revision=revision)
    if not state_dicts:
        raise WeightSourceError("a state-dict file needs a key map, which only the PEFT backbones have; give a "
                                "save_pretrained folder or a hub id")
    file = _state_dict_in(path, prefer) if path.is_dir() else path
    if not _is_state_dict_file(file):
        raise WeightSourceError(f"{file.name}: not a state-dict file ({', '.join(STATE_DICT_SUFFIXES)})")
    return WeightSource(given=text, path=str(file), format="state_dict", repo_id=repo_id, revision=revision)


def _torch_load(path: Path):
    import torch

    # Training scripts (DeiT's, timm's) save their argparse namespace beside the weights: plain data.
    with torch.serialization.safe_globals([argparse.Namespace]):
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            # The legacy (pre-zip) format cannot be memory-mapped.
            return torch.load(path, map_location="cpu", weights_only=True)


def load_state_dict(path: str | Path) -> Mapping:
    """Everything a state-dict file holds (a state dict, or a checkpoint dict wrapping one), on the CPU.

    Raises:
        WeightSourceError: a file that cannot be read (truncated, corrupt, pickling code).
    """
    path = Path(path)
    try:
        if path.name.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(path)
        return _torch_load(path)
    except Exception as exc:  # noqa: BLE001 - safetensors, pickle and zip errors all mean "cannot read this file"
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        if found:
            raise WeightSourceError(f"{path}: cannot be read: it pickles {found[1]}, which weights_only loading "
                                    f"refuses (a checkpoint's code is never run)") from None
        raise WeightSourceError(f"{path}: cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None


def read_shapes(path: str | Path) -> Mapping:
    """The key → shape map of a state-dict file (nested as the file nests it), reading as little as it can.

    A safetensors file is read by its header; the size of its data is checked against the header, so a
    truncated file is refused here. A pickled file is memory-mapped: its tensors' bytes are not read.

    Raises:
        WeightSourceError: a file that cannot be read.
    """
    path = Path(path)
    if not path.name.endswith(".safetensors"):
        return _shapes_of(load_state_dict(path))
    try:
        with safe_open(path, framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except Exception as exc:  # noqa: BLE001 - any reader error means the same: this file cannot be read
        raise WeightSourceError(f"{path}: cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0]})") from None


def _shapes_of(value):
    if isinstance(value, Mapping):
        return {key: _shapes_of(item) for key, item in value.items()}
    return tuple(value.shape) if hasattr(value, "shape") else value


@lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256(path: str | Path) -> str:
    """The file's SHA-256, computed once per session (keyed by size and modification time)."""
    stat = Path(path).stat()
    return _sha256(str(path), stat.st_size, stat.st_mtime_ns)


def describe(source: WeightSource) -> dict:
    """The record of a source: what was given, what was read, and where it came from."""
    record = {"given": source.given, "format": source.format, "path": source.path}
    if source.repo_id is not None:
        record |= {"repo_id": source.repo_id, "revision": source.revision}
    if source.format == "state_dict":
        record["sha256"] = sha256(source.path)
    return record


@dataclass(frozen=True, slots=True, kw_only=True)
class StartingWeights:
    """Where a cell's weights come from.

    Attributes:
        source: ``random`` (seeded initialisation), ``pretrained`` (the suite's cached
            pretraining) or ``local`` (a folder the user gave).
        path: the weights folder (``None`` for random).
        pretraining: the pretraining's record (task, steps, seconds, held-out accuracy) with
            ``reused: True`` when this session loaded it from the cache.
        format: how ``path`` is loaded: ``save_pretrained`` (transformers) or ``state_dict`` (a published
            checkpoint, through the model's key map; see :mod:`gradeff.axes.models.checkpoint`).
        checkpoint: what a user-given source is (file, hash, hub repository, layout, the head's fate).
        stand_in: for a model meant to start from published weights (a fine-tuned backbone, a foundation-model
            baseline) that starts from something else, what it starts from instead; ``None`` otherwise.
    """

    source: str
    path: str | None = None
    pretraining: dict | None = None
    format: str | None = None
    checkpoint: dict | None = None
    stand_in: str | None = None

    def to_record(self) -> dict:
        # ``real``: weights the user gave (a published checkpoint, or their own) were loaded, so a report can
        # name what actually ran, and a stand-in as one.
        return asdict(self) | {"real": self.source == "local"}
