"""The inputs of a cell's experiment fingerprint (:mod:`gradeff.records.fingerprint`), gathered one way for the record
a cell leaves and for the record ``--gradeff-resume`` would keep instead of running it.

A record names each input by what it is, never by where it is: real data by its content checksum, given weights by
theirs, the suite's pretrained backbone by the checksum of its manifest, the numerics by the thread count and the
kernels' probe (:mod:`gradeff.cell.probe`). So ``-n 2`` workers, reruns and a cache folder somewhere else agree on
one experiment, and a changed byte of the data or the weights makes another.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

import torch

from gradeff.axes.data.checksums import content_sha256
from gradeff.axes.data.real import source_checksum
from gradeff.axes.data.real_sources import source_for
from gradeff.axes.models import MODELS
from gradeff.axes.strategies import STRATEGIES
from gradeff.cell.devices import resolve_device
from gradeff.cell.environment import KERNEL_VARIABLES, code_version
from gradeff.cell.plan import plan_cell
from gradeff.cell.pretrain import cache_root, pretrained_folder, weights_checksum
from gradeff.cell.probe import numerics_probe
from gradeff.records.fingerprint import experiment_section

if TYPE_CHECKING:
    from gradeff.axes.models.weights import StartingWeights
    from gradeff.cell.config import RunConfig
    from gradeff.studies.grid import Cell

__all__ = ["data_identity", "experiment", "experiment_inputs", "weights_identity"]


@contextmanager
def _threads(threads: int | None):
    """torch's intra-op threads set to the cell's while its inputs are read (a pretraining's recipe, hence its
    folder, names the thread count)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def data_identity(cell: Cell, config: RunConfig, info: Mapping | None = None) -> dict:
    """What the cell trains on: its task, and for real data the source's content checksum (``info``'s, where the
    cell's data already carries it, else computed from the source), its columns and its tokenizer's checksum.

    Raises:
        ValueError, OSError: a real-data task without a readable source (the caller records that it could not say).
    """
    source = source_for(cell.dataset, config.data) if cell.dataset else None
    if source is None:
        return {"task": cell.dataset, "source": "synthetic"}
    info = info or {}
    identity = {"task": cell.dataset, "source": source.key, "columns": [list(pair) for pair in source.columns],
                "sha256": info.get("source_sha256") or source_checksum(source, cache_root(config.cache_dir))}
    if source.tokenizer:
        identity["tokenizer_sha256"] = info.get("tokenizer_sha256") or content_sha256(source.tokenizer)
    return identity


def weights_identity(cell: Cell, config: RunConfig, weights: StartingWeights | None = None) -> dict:
    """Where the cell's weights start: given (their content checksum), the suite's pretraining (its manifest's
    checksum: ``None`` while the backbone is not cached) or a seeded initialisation."""
    given = dict(config.weights)
    if cell.model in given:
        return {"source": "given", "sha256": content_sha256(given[cell.model])}
    spec = MODELS.get(cell.model)
    if spec is None or not spec.fine_tunes:
        return {"source": "random"}
    if weights is not None and weights.source == "pretrained" and weights.path:
        folder = weights.path
    else:
        with _threads(config.threads):
            folder = pretrained_folder(cell.model, config.profile, config.seed, config.cache_dir)
    return {"source": "pretrained", "sha256": weights_checksum(folder)}


def experiment_inputs(cell: Cell, config: RunConfig, *, data_info: Mapping | None = None,
                      weights: StartingWeights | None = None) -> dict:
    """Every input that can change the numbers of ``cell``'s record under ``config``, as plain JSON values.

    Args:
        data_info: the info of the data the cell trained on, where it has it (a real source's checksum).
        weights: the weights the cell started from, where they were resolved.

    Returns:
        The inputs :func:`gradeff.records.fingerprint.fingerprint` hashes.
    """
    # The cell planned here as a resumed session plans it before it runs anything: before its data sizes the plan
    # (the data's checksum is an input below), and without a search's rate. A rate search (asked for, or the
    # self-tuning protocol's) chooses the rate: its record and a resumed session's agree on the protocol's rate it
    # started from; the search's inputs are the experiment's own.
    searched = config.tune or config.self_tuned
    planned = plan_cell(cell, replace(config, lr=None, lr_source="", self_tuned=False) if searched else config)
    hp, method_hp, rate = planned.settings
    with _threads(config.threads) as threads:
        probe = numerics_probe(threads)
    return {
        "profile": config.profile, "seed": config.seed, "precision": config.precision, "protocol": config.protocol,
        "rate": {"lr": rate.lr, "source": rate.source},
        "hparams": asdict(hp) | {"method": asdict(method_hp)},
        "threads": threads, "numerics_probe": probe,
        "kernel_env": {name: os.environ[name] for name in KERNEL_VARIABLES if os.environ.get(name)},
        "device": resolve_device(config.device).type,
        "compile": config.compile, "fused": config.fused, "workers": config.workers, "isolate": config.isolate,
        "tune": {"param": config.tune, "points": config.tune_points} if config.tune else None,
        "memory_budget": config.memory_budget, "memory_margin": config.memory_margin,
        "world_size": config.world_size if STRATEGIES[cell.strategy].shards else None,
        "train_samples": config.train_samples, "trial": config.trial,
        "meters": {"sample_hz": config.meters.hz, "grid_gco2_per_kwh": config.meters.grid_gco2_per_kwh,
                   "peak_tflops": config.meters.peak_tflops},
        "skip": planned.skip,
        "data": data_identity(cell, config, data_info),
        "weights": weights_identity(cell, config, weights),
        "code_version": code_version(),
    }


def experiment(cell: Cell, config: RunConfig, *, data_info: Mapping | None = None,
               weights: StartingWeights | None = None) -> dict:
    """A record's ``experiment`` section (fingerprint and inputs); never raises: where an input cannot be read (a
    source gone, a cell of a registry this process lacks), the section says why and no fingerprint will match it."""
    try:
        return experiment_section(experiment_inputs(cell, config, data_info=data_info, weights=weights))
    except Exception as exc:  # noqa: BLE001 - a record is written whatever happened; resume then re-runs the cell
        return {"fingerprint": None, "error": f"{type(exc).__name__}: {exc}"}
