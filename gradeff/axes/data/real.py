"""Real data: local datasets read with Hugging Face ``datasets``, prepared once into the suite's tensors.

A source is a task key and a path (``--gradeff-data cifar100=PATH``). The path is whatever
``datasets`` reads without a network: a folder written by ``save_to_disk``, a folder of data files
(class sub-folders of images, parquet/CSV/JSON/text files named by split), or one such file. Which
columns hold the image, label or text comes from the key (CIFAR-100's ``img``/``fine_label``) and
can be overridden per source. Images are resized to the model's size with torch ops and stored as
``uint8`` (decoded to ``[-1, 1]`` per batch); text is tokenised with a local ``AutoTokenizer`` folder
or, without one, a byte-level BPE trained on the training split. The prepared tensors are cached on
disk under a key of the source's files and every setting, and memory-mapped when read back, so
cells after the first (in this process or any other) do not prepare them again. Every file kept here (the prepared
tensors, the built-in datasets, the trained tokenizers) carries a sha256 written last and checked on every read
(:mod:`gradeff.axes.data.checksums`): a copy cut short or changed on disk is built again with a warning naming it, never
read as it is. A source's own content checksum (``source_sha256`` in the task's info, and the tokenizer folder's) is
what a record's experiment fingerprint names it by.

Three splits. The **test** split (every reported held-out figure) is the dataset's own ``test`` split, else its
own ``validation`` split (what datasets without public test labels publish for evaluation), else a fixed seeded
share of the training rows. The **validation** split (what tuning reads) is the dataset's own ``validation`` split
when it was not taken as the test split, else a fixed seeded share of what is left of the training rows. Both
carve-outs are the same for every cell and every ``--gradeff-seed``, and disjoint from the rows trained on. A
real task has no known loss floor: ``None``.

Nothing here reaches a hub unless the source allows it (``--gradeff-allow-hub``).

This module opens, checks, prepares and loads a source; what a source is and which datasets the suite knows are
:mod:`gradeff.axes.data.real_sources`', the built-in datasets :mod:`gradeff.axes.data.builtin_data`', the columns'
tensors and the tokenizer :mod:`gradeff.axes.data.real_tensors`'.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path

from gradeff.axes.data.builtin_data import builtin_path
from gradeff.axes.data.checksums import content_sha256, read_checked, write_checked
from gradeff.axes.data.image_rows import decode_images, undecoded_column
from gradeff.axes.data.real_sources import BUILTIN, ROLES, SUPPORTED_FORMATS, DataSource
from gradeff.axes.data.real_tensors import (
    PREP_VERSION,
    Tokenizer,
    cache_key,
    caption_tensors,
    label_ids,
    lm_chunks,
    nonempty_texts,
    to_uint8_images,
)

__all__ = ["HELDOUT_FRACTION", "VALIDATION_FRACTION", "build_task", "load_real", "open_splits", "source_checksum",
           "validate_source"]

# The share of the training rows held out as the test split when a dataset has no test split of its own, and the
# share of the rest held out as the validation split when it has no validation split either; the seeds that draw
# them: fixed, so every cell and every --gradeff-seed is scored (and tuned) on the same rows.
HELDOUT_FRACTION = 0.2
VALIDATION_FRACTION = 0.1
_SPLIT_SEED = 1234
_VALIDATION_SEED = 1235
# Split names read as the test split, in order of preference, and as the validation split.
_HELDOUT_SPLITS = ("test", "validation", "valid", "val")
_VALIDATION_SPLITS = ("validation", "valid", "val")
_FILE_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json", ".txt": "text"}


def _hub_guard(allow_hub: bool) -> None:
    """Keep ``datasets`` off the network unless the hub is allowed.

    The variables count for libraries imported after this; the flags of those already imported (datasets and
    huggingface_hub read them at import, and check the module attribute at call time) are set as well.
    """
    if not allow_hub:
        for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            os.environ[variable] = "1"
    import datasets
    import datasets.config
    import huggingface_hub.constants

    # A cell's output is its record; per-split progress bars would interleave with pytest's.
    datasets.disable_progress_bars()
    if allow_hub:
        return
    datasets.config.HF_HUB_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    if hasattr(datasets.config, "HF_DATASETS_OFFLINE"):
        datasets.config.HF_DATASETS_OFFLINE = True


def _resolve_path(source: DataSource, cache_root: Path) -> Path:
    return builtin_path(source.key, cache_root) if source.key in BUILTIN else Path(source.path).expanduser()


def _open(path: Path, key: str):
    """The ``DatasetDict`` at ``path``, and the format it was read as."""
    import datasets

    label = f"{key}={path}"
    if not path.exists():
        raise ValueError(f"{label}: no such file or folder")
    if path.is_dir():
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            try:
                loaded, fmt = datasets.load_from_disk(str(path)), "save_to_disk"
            except IndexError:
                # What datasets raises when a saved split has no rows.
                raise ValueError(f"{label}: a split saved in it is empty") from None
        else:
            try:
                loaded = datasets.load_dataset(str(path))
            except (datasets.exceptions.DataFilesNotFoundError, FileNotFoundError, ValueError) as exc:
                empty = re.search(r'Instruction "(\w+)" corresponds to no data', str(exc))
                if empty:
                    raise ValueError(f"{label}: the {empty.group(1)!r} split is empty") from None
                raise ValueError(f"{label}: no data files datasets can read ({str(exc).splitlines()[0]}); "
                                 f"supported formats: {'; '.join(SUPPORTED_FORMATS)}") from None
            fmt = "folder"
    else:
        builder = _FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(f"{label}: unsupported format {path.suffix or '(no extension)'!r}; "
                             f"supported formats: {'; '.join(SUPPORTED_FORMATS)}")
        loaded, fmt = datasets.load_dataset(builder, data_files=str(path)), builder
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    return loaded, fmt


def open_splits(source: DataSource, cache_root: Path):
    """The training, test and validation splits of a source, the format, and how the test and validation splits
    were chosen.

    Returns:
        ``(train, test, validation, format, notes)``, notes holding ``heldout_split`` and ``validation_split``.

    Raises:
        ValueError: no such path, an unsupported format, no training split, or an empty split.
    """
    _hub_guard(source.allow_hub)
    path = _resolve_path(source, cache_root)
    loaded, fmt = _open(path, source.key)
    label = f"{source.key}={path}"
    if "train" not in loaded:
        raise ValueError(f"{label}: no 'train' split; splits: {', '.join(loaded) or '(none)'}")
    train = loaded["train"]
    if len(train) == 0:
        raise ValueError(f"{label}: the 'train' split is empty")
    notes = {}
    own = next((name for name in _HELDOUT_SPLITS if name in loaded), None)
    if own is not None:
        heldout, notes["heldout_split"] = loaded[own], f"the dataset's own {own!r} split"
    else:
        train, heldout = _carve(train, HELDOUT_FRACTION, _SPLIT_SEED, label, "a test split")
        notes["heldout_split"] = f"{HELDOUT_FRACTION:.0%} of 'train' held out (seed {_SPLIT_SEED}): the dataset " \
                                 f"has no test split"
    own_validation = next((name for name in _VALIDATION_SPLITS if name in loaded and name != own), None)
    if own_validation is not None:
        validation = loaded[own_validation]
        notes["validation_split"] = f"the dataset's own {own_validation!r} split"
    else:
        train, validation = _carve(train, VALIDATION_FRACTION, _VALIDATION_SEED, label, "a validation split")
        notes["validation_split"] = (f"{VALIDATION_FRACTION:.0%} of the training rows held out (seed "
                                     f"{_VALIDATION_SEED}): the dataset has no validation split of its own")
    for name, split in (("test", heldout), ("validation", validation)):
        if len(split) == 0:
            raise ValueError(f"{label}: the {name} split is empty")
    return train, heldout, validation, fmt, notes


def _carve(train, fraction: float, seed: int, label: str, what: str):
    """``(rest, carved)``: a fixed seeded share of the training rows, the rest left to train on."""
    if len(train) < 3:
        raise ValueError(f"{label}: the 'train' split has {len(train)} rows; carving out {what} needs at least 3")
    parts = train.train_test_split(test_size=fraction, seed=seed)
    return parts["train"], parts["test"]


def _columns(source: DataSource, column_names: list[str]) -> dict[str, str]:
    """Role → column for the source's kind; a missing one raises naming the role and the columns there are."""
    spec = source.spec
    given = dict(source.columns)
    chosen = {}
    for role in ROLES[spec.kind]:
        if role in given:
            if given[role] not in column_names:
                raise ValueError(f"{source.key}: column {given[role]!r} (given for {role}) is not in the dataset; "
                                 f"columns: {', '.join(column_names)}")
            chosen[role] = given[role]
            continue
        found = next((c for c in spec.columns[role] if c in column_names), None)
        if found is None:
            raise ValueError(f"{source.key}: no {role} column (tried {', '.join(spec.columns[role])}); columns: "
                             f"{', '.join(column_names)}; "
                             f"name it with --gradeff-data-columns {source.key}:{role}=COLUMN")
        chosen[role] = found
    return chosen


def validate_source(source: DataSource, cache_root: Path, caps: tuple[int, int] | None = None, *,
                    step: int | None = None) -> dict:
    """Open a source and check its splits and columns, as a cell would; returns what was found.

    With ``caps`` (the most training and held-out rows any cell of the run reads: what :func:`_prepare` selects,
    :func:`gradeff.studies.hparams.largest_caps` gives them per profile), every image a cell can read (the first rows
    of each split, up to those caps) is decoded too, so a corrupt one (or an empty cell) is named, by file and row,
    before the first cell, and so is an empty label. With ``step`` (the most samples an optimizer step of the run
    takes: :func:`gradeff.studies.hparams.largest_step`), a training split of fewer rows than one whole step (after
    the test and validation rows are carved out of it) is refused too: every cell trains in whole steps.
    """
    train, heldout, validation, fmt, notes = open_splits(source, cache_root)
    columns = _columns(source, list(train.column_names))
    for name, split in (("test", heldout), ("validation", validation)):
        missing = [c for c in columns.values() if c not in split.column_names]
        if missing:
            raise ValueError(f"{source.key}: the {name} split lacks column(s) {', '.join(missing)}")
    kind = source.spec.kind
    if step is not None and kind != "causal_lm" and len(train) < step:
        # A language model's samples are token windows, counted only once the text is tokenised; rows are samples
        # for the others.
        raise ValueError(f"{source.key}: the 'train' split has {len(train)} rows ({notes['heldout_split']}; "
                         f"{notes['validation_split']}), fewer than one optimizer step of this profile takes "
                         f"({step}); give at least {step} training rows")
    decoded = 0
    if caps is not None:
        _check_empty_cells(source, cache_root, columns)
        train_cap, heldout_cap = caps
        splits = (("train", train, train_cap), ("held-out", heldout, heldout_cap),
                  ("validation", validation, heldout_cap))
        if "image" in columns:
            for name, split, cap in splits:
                cells = undecoded_column(split.select(range(min(len(split), cap))), columns["image"])
                decoded += len(decode_images(cells, where=_where(source, cache_root, name),
                                             folder=_folder(source, cache_root)))
    return {"format": fmt, "columns": columns, "train_rows": len(train), "heldout_rows": len(heldout),
            "validation_rows": len(validation), "heldout": notes["heldout_split"],
            "validation": notes["validation_split"], "images_decoded": decoded}


def _check_empty_cells(source: DataSource, cache_root: Path, columns: dict[str, str]) -> None:
    """Every image and label of the source's own splits holds something (a label: an int, a string or a list of
    them): an empty one is named by its split and row in the file, before any cell (a cell would fail on it inside
    its training, or on a later row of another split). Reading the columns undecoded costs no decoding."""
    loaded, _ = _open(_resolve_path(source, cache_root), source.key)
    roles = [role for role in ("image", "label") if role in columns]
    for split_name, split in loaded.items():
        for role in roles:
            column = columns[role]
            if column not in split.column_names:
                continue
            values = undecoded_column(split, column) if role == "image" else split[column]
            for row, value in enumerate(values):
                if value is None or (role == "label" and isinstance(value, dict)):
                    what = "empty (null)" if value is None else "a dict"
                    need = "an image" if role == "image" else "an int, a string or a list of them"
                    raise ValueError(f"{source.key}={_resolve_path(source, cache_root)}, the {split_name!r} split, "
                                     f"row {row}: the {role} ({column!r}) is {what}; each row needs {need}")


def _where(source: DataSource, cache_root: Path, split: str) -> str:
    return f"{source.key}={_resolve_path(source, cache_root)}, the {split!r} split"


def _folder(source: DataSource, cache_root: Path) -> Path:
    """Where relative image paths of a source are looked for: its folder, or the folder of its one file."""
    path = _resolve_path(source, cache_root)
    return path if path.is_dir() else path.parent


# ---------------------------------------------------------------------------------------------- preparation


def _fingerprint(path: Path) -> list:
    """What identifies the files' contents cheaply: every file's relative path, size and modification time."""
    if path.is_file():
        stat = path.stat()
        return [[path.name, stat.st_size, stat.st_mtime_ns]]
    entries = []
    for root, _, files in sorted(os.walk(path)):
        for name in sorted(files):
            stat = (Path(root) / name).stat()
            entries.append([os.path.relpath(Path(root) / name, path), stat.st_size, stat.st_mtime_ns])
    return entries


def _prepare(source: DataSource, *, image_size, seq_len, caption_len, vocab_size, train_cap, heldout_cap,
             cache_root: Path) -> dict:
    """Read, preprocess and tensorise a source's splits (see :func:`load_real`): a dict of tensors + info."""
    import torch

    train, heldout, validation, fmt, notes = open_splits(source, cache_root)
    columns = _columns(source, list(train.column_names))
    kind = source.spec.kind
    # Rows beyond what a cell can use are never decoded (CIFAR-100 at the tiny profile reads 256 of 50,000). A text
    # sample is a window of seq_len tokens and a row holds at least one token: cap × seq_len rows always suffice.
    per_sample = seq_len if kind == "causal_lm" else 1
    rows = {"train": train.select(range(min(len(train), train_cap * per_sample))),
            "heldout": heldout.select(range(min(len(heldout), heldout_cap * per_sample))),
            "validation": validation.select(range(min(len(validation), heldout_cap * per_sample)))}
    info = {"source": str(_resolve_path(source, cache_root)), "format": fmt, "columns": columns, **notes,
            "real": True}
    splits: dict[str, dict] = {name: {} for name in rows}
    if "image" in columns:
        for name, split in rows.items():
            splits[name]["pixel_values"] = to_uint8_images(
                undecoded_column(split, columns["image"]), image_size,
                where=_where(source, cache_root, "held-out" if name == "heldout" else name),
                folder=_folder(source, cache_root))
        info["image_size"] = image_size
    if kind == "image_classification":
        *labels, names = label_ids(list(rows.values()), columns["label"])
        for name, split_labels in zip(rows, labels):
            splits[name]["labels"] = split_labels
        info |= {"num_classes": len(names), "class_names": names[:200], "multi_label": labels[0].dim() == 2}
    else:
        train_texts = nonempty_texts(rows["train"], columns["text"])
        if not train_texts:
            raise ValueError(f"{source.key}: the training split has no text in column {columns['text']!r}")
        fingerprint = [_fingerprint(_resolve_path(source, cache_root)), columns, train_cap, heldout_cap]
        tok = Tokenizer(source, train_texts, vocab_size, cache_root, fingerprint)
        info |= {"tokenizer": tok.name, "vocab_size": tok.vocab_size}
        if kind == "causal_lm":
            for name, split in rows.items():
                cap = train_cap if name == "train" else heldout_cap
                texts = train_texts if name == "train" else nonempty_texts(split, columns["text"])
                windows = lm_chunks(tok.encode(texts), tok.eos, seq_len, cap)
                splits[name] |= {"input_ids": windows, "labels": windows.clone(),
                                 "targets": torch.full((len(windows),), seq_len - 1)}
            info["seq_len"] = seq_len
        else:
            for name, split in rows.items():
                texts = [t if isinstance(t, str) else "" for t in split[columns["text"]]]
                input_ids, labels = caption_tensors(tok.encode(texts), tok, caption_len)
                splits[name] |= {"input_ids": input_ids, "labels": labels,
                                 "targets": (labels != -100).sum(dim=1).clamp(min=1)}
            info["caption_len"] = caption_len
    for split in splits.values():
        if "targets" not in split:
            split["targets"] = torch.ones(len(split["labels"]), dtype=torch.long)
    return {"splits": splits, "info": info}


def load_real(source: DataSource, *, kind: str, image_size: int | None = None, seq_len: int | None = None,
              caption_len: int | None = None, vocab_size: int = 512, train_cap: int, heldout_cap: int,
              cache_root: Path, task: str | None = None):
    """A source's training split (with its test and validation splits attached) as the suite's :class:`Dataset`.

    Args:
        kind: the task kind the model expects; a source of another kind is refused.
        image_size / seq_len / caption_len: the model's sizes (from the profile).
        vocab_size: the BPE's vocabulary when no tokenizer folder is given.
        train_cap / heldout_cap: at most this many samples in the training split and in each of the test and
            validation splits (rows; text windows for a language model).
        cache_root: where prepared tensors and trained tokenizers are kept.

    The tensors are prepared once per (files, settings) and cached as a torch file read back memory-mapped.
    """
    import torch

    from gradeff.axes.data.dataset import Dataset  # noqa: PLC0415 - torch, 2.3 s: the plugin imports this module

    if source.spec.kind != kind:
        raise ValueError(f"{source.key} is {source.spec.kind} data; this model takes {kind}")
    path = _resolve_path(source, cache_root)
    key = cache_key(PREP_VERSION, source.key, str(path.resolve()) if path.exists() else str(path),
                     _fingerprint(path) if path.exists() else None, source.columns, source.tokenizer, image_size,
                     seq_len, caption_len, vocab_size, train_cap, heldout_cap)
    cached = cache_root / "data" / "prepared" / f"{source.key}-{key}.pt"
    cached.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    # One process prepares a source's tensors; the others wait and read them (checked against their sha256).
    with FileLock(str(cached) + ".lock"):
        prepared = read_checked(cached, _load_prepared, errors=_UNREADABLE)
        if prepared is not None:
            prepared["info"]["cache"] = "hit"
        else:
            prepared = _prepare(source, image_size=image_size, seq_len=seq_len, caption_len=caption_len,
                                vocab_size=vocab_size, train_cap=train_cap, heldout_cap=heldout_cap,
                                cache_root=cache_root)
            prepared["info"] |= _checksums(source, cache_root)
            write_checked(cached, lambda tmp: torch.save(prepared | {"info": json.dumps(prepared["info"])}, tmp),
                          best_effort=True)
            prepared["info"]["cache"] = "miss"
    info = prepared["info"] | {"cache_file": str(cached)}
    decode = {"pixel_values": (1 / 127.5, -1.0)} if "image_size" in info else {}
    if info.get("multi_label"):
        # Float indicators: transformers' classifiers then take the multi-label (binary cross-entropy) loss.
        decode["labels"] = (1.0, 0.0)
    built = {}
    for name in ("train", "heldout", "validation"):
        split = dict(prepared["splits"][name])
        targets = split.pop("targets")
        built[name] = Dataset(task=task or source.key, tensors=split, targets=targets, loss_floor=None,
                              floor_note="unknown: real data", info=info, decode=decode)
    return built["train"].with_heldout(built["heldout"]).with_validation(built["validation"])


# What loading a prepared file that is not what it should be raises (torch.load, its JSON, a missing key).
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, pickle.UnpicklingError)


def _load_prepared(path: Path) -> dict:
    import torch

    prepared = torch.load(path, mmap=True, weights_only=True)
    prepared["info"] = json.loads(prepared["info"])
    for name in ("train", "heldout", "validation"):
        if "targets" not in prepared["splits"][name]:
            raise KeyError(f"the {name} split has no targets")
    return prepared


def _checksums(source: DataSource, cache_root: Path) -> dict:
    """The source's content checksums for the task's info: its files' (:func:`source_checksum`) and, where a
    tokenizer folder is given, that folder's."""
    sums = {"source_sha256": source_checksum(source, cache_root)}
    if source.tokenizer:
        sums["tokenizer_sha256"] = content_sha256(Path(source.tokenizer))
    return sums


def source_checksum(source: DataSource, cache_root: Path) -> str:
    """The SHA-256 of a source's content (a file's bytes; a folder's files, by relative path): what a record's
    experiment fingerprint names its data by, wherever the files are kept. Computed once per process while the
    files' sizes and modification times stay as they are."""
    return content_sha256(_resolve_path(source, cache_root))


def build_task(*, key: str, **_) -> None:
    """The registry's builder of a real task: real data needs its source, which only the runner holds."""
    raise ValueError(f"{key!r} is real data: it is read by gradeff.axes.data.real.load_real from a DataSource "
                     f"(--gradeff-data {key}=PATH{'' if key not in BUILTIN else ', or built in'})")
