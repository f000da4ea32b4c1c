"""Starting weights of a cell: a user's local folder, the suite's own cached pretraining, or random.

The PEFT study fine-tunes pretrained backbones. Real pretrained weights cannot be downloaded here,
so unless the user gives a local ``save_pretrained`` folder (``--gradeff-weights MODEL=PATH``), the
suite pretrains each backbone once on a related synthetic source task (see
:class:`gradeff.studies.hparams.PretrainHParams`) and caches the result on disk by model, profile, seed and
recipe. Every cell and session reuses it; what the pretraining cost is recorded once, in the cache,
and never counted in a cell's timings. The head is not saved: fine-tuning starts with a fresh head
for the new dataset's classes.

Concurrent sessions (pytest-xdist workers) share the cache through a file lock: one pretrains,
the others wait and load. Before its first cell a session's process pretrains, one by one, the backbones its
cells need that no other process has claimed (:func:`pretrain_ahead`), so workers pretrain side by side instead
of waiting on each other; the pretraining task's samples are drawn once and cached too (:mod:`gradeff.axes.data.cache`).

A cached folder is trusted only when its files match the sha256 manifest written last (``checksums.sha256``,
``sha256sum`` format, flushed to disk before the folder is renamed into place; :mod:`gradeff.axes.data.checksums`, the
helper every cache uses): a folder cut short by a full disk, a copy interrupted or bytes rotted on disk is pretrained
again, with a warning naming it, instead of failing every cell that loads it. The folder gets the permissions a
plain ``mkdir`` would (the umask's), so a cache on a shared disk serves every account that may read it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path

from gradeff.axes.data.checksums import MANIFEST, CacheRebuiltWarning, verify_manifest, write_manifest
from gradeff.axes.methods import within
from gradeff.axes.models import MODELS, build_model
from gradeff.axes.models.checkpoint import given_weights
from gradeff.axes.models.weights import StartingWeights
from gradeff.studies.hparams import hparams_for, pretrain_hparams

__all__ = ["FORMAT", "INFO_FILE", "MANIFEST", "CacheRebuiltWarning", "StartingWeights", "cache_root", "pretrain",
           "pretrain_ahead", "pretrained_folder", "starting_weights", "verify_folder", "weights_checksum"]

# Bump when what a pretraining produces changes, so that old caches are not reused.
FORMAT = 2
INFO_FILE = "pretraining.json"


_RANDOM_STAND_IN = "random initialisation (no published weights loaded)"
_PRETRAINED_STAND_IN = "the suite's own pretraining on a synthetic source task (no published weights loaded)"


def cache_root(explicit: str | Path | None = None) -> Path:
    """The cache folder: ``explicit``, else ``$GRADEFF_CACHE``, else ``$XDG_CACHE_HOME/gradeff`` (``~/.cache``)."""
    if explicit is not None:
        return Path(explicit)
    if os.environ.get("GRADEFF_CACHE"):
        return Path(os.environ["GRADEFF_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gradeff"


def _recipe(model: str, profile: str) -> dict:
    return {"format": FORMAT, "model": model, "profile": profile,
            "config": importlib.import_module(MODELS[model].module).CONFIGS[profile],
            "image_size": hparams_for(model, profile).image_size,
            "pretraining": asdict(pretrain_hparams(model, profile)),
            # The thread count orders the pretraining's float sums: backbones pretrained with another one differ
            # in their last bits, so a cell's numbers would depend on which session filled the cache.
            "torch_threads": _torch_threads()}


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def pretrained_folder(model: str, profile: str, seed: int, cache_dir: str | Path | None = None) -> Path:
    """The cache folder of a backbone's pretraining: named by model, profile, seed and a hash of the recipe."""
    digest = hashlib.sha256(json.dumps(_recipe(model, profile), sort_keys=True, default=str).encode()).hexdigest()
    return cache_root(cache_dir) / "pretrained" / f"{model}-{profile}-seed{seed}-{digest[:12]}"


def starting_weights(model: str, profile: str, seed: int, *, local: Mapping[str, str] | None = None,
                     cache_dir: str | Path | None = None, device: str = "cpu",
                     num_labels: int | None = None) -> StartingWeights:
    """The weights a cell of ``model`` starts from, pretraining (once) when needed.

    Args:
        local: model key → a source given by the user (a local file or folder, see :mod:`gradeff.axes.models.weights`).
        num_labels: the cell's classes (whether a given checkpoint's head is loaded or re-initialised).
        cache_dir: where pretrained backbones are cached (see :func:`cache_root`).
        device: where to pretrain if the cache has no copy.

    Raises:
        WeightSourceError, CheckpointError: a given source that cannot be read or does not fit.
    """
    if local and model in local:
        return given_weights(model, local[model], profile, num_labels=num_labels, seed=seed)
    spec = MODELS[model]
    if not spec.fine_tunes:
        # A main-study model trains from scratch by design; a baseline (evaluated its own way) without weights
        # given is a stand-in for the published model.
        return StartingWeights(source="random", stand_in=_RANDOM_STAND_IN if spec.methods else None)
    from filelock import FileLock

    folder = pretrained_folder(model, profile, seed, cache_dir)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        pretrained_now = _fill(folder, model, profile, seed, device=device, cache_dir=cache_dir)
    # The first cell of the process that pretrained a backbone (now, or ahead of the cells) says so.
    reused = not (pretrained_now or _take_ahead(folder))
    info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8")) | {"reused": reused}
    return StartingWeights(source="pretrained", path=str(folder), pretraining=info, stand_in=_PRETRAINED_STAND_IN)


def _fill(folder: Path, model: str, profile: str, seed: int, *, device: str, cache_dir) -> bool:
    """Pretrain into ``folder`` unless it holds a sound copy (the caller holds its lock); ``True`` if it pretrained."""
    if folder.exists() and (problem := verify_folder(folder)) is not None:
        warnings.warn(f"pretrained cache {folder}: {problem}; pretraining it again", CacheRebuiltWarning,
                      stacklevel=3)  # gradeff.axes.data.checksums' warning, worded for a backbone
        shutil.rmtree(folder)
    if (folder / INFO_FILE).is_file():
        return False
    pretrain(model, profile, seed, folder, device=device, cache_dir=cache_dir)
    return True


# Folders this process pretrained ahead of its cells (:func:`pretrain_ahead`), until a cell loads them.
_AHEAD: set[str] = set()


def _take_ahead(folder: Path) -> bool:
    if str(folder) in _AHEAD:
        _AHEAD.discard(str(folder))
        return True
    return False


def pretrain_ahead(backbones: Iterable[tuple[str, int]], profile: str, *, local: Mapping[str, str] | None = None,
                   cache_dir: str | Path | None = None, device: str = "cpu") -> list[str]:
    """Pretrain the session's backbones before its cells, each by whichever process claims it first.

    ``backbones``: (model, seed) pairs in the order the cells need them. A backbone another process is
    pretraining (its lock is held) is left to it rather than waited for: pytest-xdist workers pretrain different
    backbones side by side and then go on to their cells, instead of one pretraining while the others wait on
    the same lock. A model the user gave weights for, one that trains from scratch, or one whose pretraining
    fails here is left to its cells (which record the failure). Returns the models pretrained here.
    """
    from filelock import FileLock, Timeout

    done = []
    for model, seed in dict.fromkeys(backbones):
        if (local and model in local) or model not in MODELS or not MODELS[model].fine_tunes:
            continue
        folder = pretrained_folder(model, profile, seed, cache_dir)
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(folder) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        try:
            if _fill(folder, model, profile, seed, device=device, cache_dir=cache_dir):
                _AHEAD.add(str(folder))
                done.append(model)
        except Exception:  # noqa: BLE001 - the cells pretrain it again and record what went wrong
            continue
        finally:
            lock.release()
    return done


def pretrain(model: str, profile: str, seed: int, folder: Path, *, device: str = "cpu",
             cache_dir: str | Path | None = None) -> dict:
    """Pretrain ``model`` on the source task and save it (without its head) to ``folder``.

    The folder appears complete or not at all: it is written next to its final place and renamed.

    Returns:
        The pretraining's record, also written to ``folder/pretraining.json``.
    """
    import torch

    from gradeff.axes.data.cache import cached  # noqa: PLC0415
    from gradeff.axes.data.standins import source_task  # noqa: PLC0415

    # torch, 2.3 s: the plugin imports this module
    from gradeff.cell.evaluation import evaluate  # noqa: PLC0415
    from gradeff.cell.loop import TrainState, train_epoch  # noqa: PLC0415

    hp = pretrain_hparams(model, profile)
    # The image size its cells fine-tune at (its ModelSpec.hparams, built in or registered).
    image_size = hparams_for(model, profile).image_size
    sizes = dict(num_classes=hp.num_classes, image_size=image_size, num_samples=hp.train_samples, seed=seed,
                 heldout_samples=hp.heldout_samples)
    # Every backbone of a profile pretrains on the same samples: drawn once, next to the backbones.
    data = cached("gradeff.axes.data.standins:source_task", sizes, lambda: source_task(**sizes),
                  root=cache_root(cache_dir))
    target = torch.device(device)
    torch.manual_seed(seed)
    network = build_model(model, profile, num_labels=hp.num_classes).to(target)
    optimizer = torch.optim.AdamW(network.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
    steps = hp.epochs * (hp.train_samples // hp.batch_size)
    warmup = max(1, math.ceil(hp.warmup_ratio * steps))

    def schedule(step: int) -> float:
        # Linear warm-up, then cosine decay to zero: the usual ViT pretraining schedule.
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    state = TrainState(model=network, optimizer=optimizer, dataset=data, batch_size=hp.batch_size,
                       micro_batches_per_step=1, seed=seed, device=target,
                       scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, schedule))
    start = time.perf_counter()
    for _ in range(hp.epochs):
        train_epoch(state)
    seconds = time.perf_counter() - start
    heldout = evaluate(network, data.heldout, batch_size=hp.batch_size, device=target, accuracy=True)
    head = MODELS[model].head
    record = {
        "task": {"num_classes": hp.num_classes, "image_size": image_size, "families": data.info["families"],
                 "train_samples": hp.train_samples},
        "hparams": asdict(hp), "optimizer_steps": state.global_step, "seconds": seconds,
        "final_loss": state.history[-1].loss, "heldout_loss": heldout.loss, "heldout_accuracy": heldout.accuracy,
        "bayes_accuracy": data.heldout.info["bayes_accuracy"], "device": str(target),
        "torch_threads": torch.get_num_threads(),
    }
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    _readable_by_all(staging)
    try:
        backbone = {name: tensor for name, tensor in network.state_dict().items() if not within(name, head)}
        network.save_pretrained(staging, state_dict=backbone)
        (staging / INFO_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
        write_manifest(staging)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def verify_folder(folder: Path) -> str | None:
    """Why a cached backbone's folder cannot be trusted (no manifest, a file missing or changed), or ``None`` when
    every file matches its checksum (:func:`gradeff.axes.data.checksums.verify_manifest`)."""
    return verify_manifest(folder, required=INFO_FILE)


def weights_checksum(folder: str | Path) -> str | None:
    """The checksum of a cached backbone's weights: the SHA-256 of its manifest's lines (each file's sha256) for every
    file but the pretraining's account (:data:`INFO_FILE`, which holds the run's wall time), the same wherever the
    cache folder is and whichever machine pretrained the same weights; ``None`` where the folder has no manifest."""
    manifest = Path(folder) / MANIFEST
    if not manifest.is_file():
        return None
    lines = [line for line in manifest.read_text(encoding="utf-8").splitlines()
             if line and line.split("  ", 1)[-1] != INFO_FILE]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _readable_by_all(folder: Path) -> None:
    """Give a folder made by ``mkdtemp`` (owner-only, 0700) the permissions a plain ``mkdir`` gives under the umask:
    a cache shared by a team's accounts (``--gradeff-cache`` on a shared disk) must be readable by them."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
