"""Cell records and the append-only JSON-lines store.

A record is the complete result of one cell: what ran, how it ended, the per-epoch series and
their summary, in raw units (seconds, bytes, joules). Records are frozen values that round-trip
through JSON; each carries the schema version so old results files stay readable or fail loudly.

The store is strict JSON, one object per line: any JSON reader (``jq``, a browser, another language)
reads every line. JSON has no NaN or infinity, so a non-finite number (a diverged cell's loss, a
meter's failed reading) is written as ``null`` and named in the record's ``nonfinite`` object, a
JSON Pointer (RFC 6901) per value with ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``::

    {"schema_version": 3, ..., "epochs": [{"loss": null, ...}], "nonfinite": {"/epochs/0/loss": "NaN"}}

Reading puts the value back, so a NaN survives the round trip as a NaN, never as ``None``.

Appends are crash-safe: a line is written with one ``write`` and ``fsync``; a file whose last line
was torn (a writer killed mid-line, a copy cut short) first gets its missing newline, so the torn line
costs only itself and the next record starts a line of its own. An append the disk refuses (full, failing) is
truncated back, leaving no partial line, and raises one line naming the file and why. Reading skips an unreadable line —
bad JSON, a bad record, bytes that are not UTF-8 — and reports it with its line number.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from gradeff.records.curve import first_at_target, target_loss, time_to_target
from gradeff.records.outputs import OutputError
from gradeff.studies.grid import cell_id

__all__ = [
    "FAILED_STATUSES", "FINAL_STATUSES", "METER_FIELDS", "NONFINITE_KEY", "SCHEMA_VERSION", "SECTION_FIELDS",
    "SELF_TUNED", "STATUSES", "CellRecord", "EpochRecord", "Summary", "UnknownRecordField", "append_record",
    "latest_by_cell", "latest_by_run", "meter_field", "meter_section", "read_records", "record_field", "record_section",
]

# 5: ``seeding``: the seed plan (fixed or adaptive) and why a seed past the first ones ran; older records read
#    as fixed plans of the seeds they hold. ``experiment``: the experiment's fingerprint (a digest of every input
#    that can change the numbers, and the inputs; gradeff.records.fingerprint), what --gradeff-resume compares;
#    versions 1–4 are read with an empty one (never resumed: nothing says which experiment they were).
# 4: three splits — ``heldout_*`` figures are the test split's, ``validation_*`` the validation split's —, the
#    test curve at optimizer-step resolution (``curve``, ``evaluation``) and whether the target was reached
#    (``summary.target_reached``); versions 1–3 are read as they were (their held-out split was the only one).
# 3: strict JSON; non-finite numbers are null and listed under ``nonfinite`` (versions 1 and 2 wrote
#    NaN/Infinity tokens, which are still read).
# 2: grid, method, dataset, parameters, weights and held-out evaluation; version 1 records are read
#    as main-study cells (full training on the model's own task, no held-out split).
SCHEMA_VERSION = 5
_READABLE_VERSIONS = (1, 2, 3, 4, 5)
# The record-level object naming the values stored as null because they were NaN or infinite.
NONFINITE_KEY = "nonfinite"
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# ok: trained all epochs · diverged: NaN/Inf loss · oom: out of memory (or over the memory budget) ·
# error: any other failure · skipped: the cell is incompatible (the reason is in ``detail``) ·
# interrupted: stopped by Ctrl-C.
STATUSES = ("ok", "diverged", "oom", "error", "skipped", "interrupted")
# Statuses that settle a cell: ``--gradeff-resume`` keeps them and re-runs the others.
FINAL_STATUSES = ("ok", "diverged", "oom", "skipped")
# The cell ran and failed: what a regression gate flags and a loss curve marks with a cross.
FAILED_STATUSES = ("diverged", "oom", "error")


# What a record's ``meters`` holds, meter by meter (a cell's, and each epoch's ram, gpu, energy and cost): the fields
# of the records the meters yield (gradeff/meters/: RamRecord, GpuRecord, EnergyRecord, MemoryBreakdown,
# ComputeRecord; conjugate gradient's counters, gradeff.optim.cg.cg_stats), what gradeff.cell.metering.aggregate adds
# for a cell (energy's grams of CO2, the metering cost's share of the epochs' time), why the FLOPs were not counted,
# and a sharded cell's per-rank breakdowns. Named here, not read off those classes, because reading records never
# imports torch; tests/records/test_record_fields.py holds the two to each other. A reader naming a field outside this
# table fails at once (UnknownRecordField) rather than reading "not measured" in every table.
METER_FIELDS: dict[str, frozenset[str]] = {
    "ram": frozenset({"peak_rss_bytes", "peak_source", "mean_rss_bytes", "peak_system_percent", "samples",
                      "duration_s"}),
    "gpu": frozenset({"available", "device_name", "util_mean_percent", "util_max_percent", "mem_used_peak_bytes",
                      "power_mean_w", "alloc_peak_bytes", "reserved_peak_bytes", "samples", "short_window",
                      "duration_s"}),
    "energy": frozenset({"joules", "source", "duration_s", "co2_grams"}),
    "cost": frozenset({"reads_s", "sampler_cpu_s", "epoch_s", "fraction"}),
    "memory": frozenset({"parameter_bytes", "trainable_parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
                         "activation_bytes", "peak_bytes", "peak_by_device", "ranks"}),
    "compute": frozenset({"flops_per_sample", "model_flops", "seconds", "achieved_flops_per_s", "peak_flops_per_s",
                          "peak_source", "mfu", "not_measured"}),
    "cg": frozenset({"steps", "iterations", "restarts", "restart_rate", "restart_reasons", "func_evals",
                     "line_search_evals"}),
}


# What a record's other sections hold, section by section. Writers: gradeff/cell/record.py (task, parameters,
# weights: StartingWeights.to_record, environment: gradeff.cell.environment.environment and the process, hparams:
# HParams's fields, the method's settings and how the rate was chosen), the runner (plan: what a strategy did,
# inference: InferenceCost and the NetScore family, tuning: the rate search, evaluation: the held-out passes' cost)
# and a sharded cell's coordinator (plan and hparams: its world). A strategy registered by a project may write plan
# fields of its own; the readers here ask only for these. tests/records/test_record_fields.py holds the table to the
# writers.
# What ``hparams.protocol`` says for a cell of the tuned protocol that had no row of the table and searched its own
# rate (gradeff.cell.self_tune): never ``tuned``, which names the committed table's rates.
SELF_TUNED = "self-tuned"

SECTION_FIELDS: dict[str, frozenset[str]] = {
    # trivial_baselines: name → {"metric": "accuracy" | "loss", "value", "what", ...} on the test split
    # (gradeff.data.trivial); absent from records written before it (read as None, never as a 0).
    "task": frozenset({"key", "name", "train_samples", "loss_floor", "heldout_samples", "heldout_loss_floor",
                       "bayes_accuracy", "sanity_accuracy", "trivial_baselines", "info"}),
    "parameters": frozenset({"total", "trainable"}),
    "weights": frozenset({"source", "path", "pretraining", "format", "checkpoint", "stand_in", "real"}),
    "plan": frozenset({
        # checkpointing and offload
        "checkpointed_layers", "layers", "offload", "offloaded_bytes_per_step",
        # a budget: its kind, the step's profile, the plan chosen (BudgetPlan.to_record) or the compiler's fraction
        "kind", "budget_fraction", "profile", "budget_bytes", "margin", "target_bytes", "checkpointed",
        "predicted_peak_bytes", "unconstrained_peak_bytes", "fits", "prefix_peak_bytes", "measured_frugal_peak_bytes",
        "activation_memory_budget", "compile_backend", "compile_seconds",
        # a sharded cell
        "sharded_blocks", "row_bytes", "world_size", "backend", "devices"}),
    "inference": frozenset({"parameters", "macs_per_image", "macs_by_op", "grad_mode", "latency_s", "latency_p90_s",
                            "latency_samples", "batch_size", "throughput_images", "throughput_seconds",
                            "images_per_s", "peak_bytes", "peak_by_device", "allocator_peak_bytes", "energy_source",
                            "energy_joules", "energy_per_image_j", "mean_power_w", "energy_estimated", "scores"}),
    "tuning": frozenset({"param", "tuning_free", "trials", "seconds", "joules", "chosen", "reference",
                         "reference_source", "at_edge", "picked_on", "budget",
                         # a self-tuned cell's (gradeff.cell.self_tune.SelfTuned.tuning)
                         "protocol", "fingerprint", "cached", "searched_at", "seed", "search_seconds",
                         "search_joules"}),
    "evaluation": frozenset({"every_steps", "points", "test_seconds", "validation_seconds", "fraction"}),
    "hparams": frozenset({"lr", "batch_size", "accum_steps", "epochs", "train_samples", "heldout_samples",
                          "validation_samples", "eval_every", "warmup_ratio", "seq_len", "num_states", "num_classes",
                          "image_size", "caption_len", "method", "precision", "protocol", "lr_source",
                          "optimizer_kernel", "world_size"}),
    # how many seeds the run spent and why this one ran (gradeff.analysis.sequential.SeedPlan.to_record)
    "seeding": frozenset({"plan", "first", "most", "level", "why"}),
    "experiment": frozenset({"fingerprint", "inputs", "error"}),
    "environment": frozenset({"python", "torch", "transformers", "cuda", "platform", "cpu", "cpu_id", "cpu_count",
                              "cpu_capability", "kernel_env", "device", "device_name", "gpu_driver", "gpu_index",
                              "gpu_uuid", "torch_threads", "numerics_probe", "process", "project_commit"}),
}


class UnknownRecordField(LookupError):
    """A reader asked for a section, meter or field no writer fills (a typo, a renamed field)."""


def record_section(record: CellRecord, section: str) -> Mapping:
    """``record.<section>`` (``hparams``, ``plan``, ...), or an empty mapping where it is absent or malformed
    (older and hand-edited records); a section outside :data:`SECTION_FIELDS` is an error naming the sections."""
    if section not in SECTION_FIELDS:
        raise UnknownRecordField(f"a record has no section {section!r}; its sections: {', '.join(SECTION_FIELDS)}")
    value = getattr(record, section, None)
    return value if isinstance(value, Mapping) else {}


def record_field(record: CellRecord, section: str, name: str, default: object = None) -> object:
    """``record.<section>[name]`` as stored, or ``default`` where the record lacks it.

    Raises:
        UnknownRecordField: ``section`` or ``name`` is not in :data:`SECTION_FIELDS` (the message names the valid
            ones), so a typo fails where it is read instead of reading "not measured".
    """
    values = record_section(record, section)
    if name not in SECTION_FIELDS[section]:
        raise UnknownRecordField(f"a record's {section} has no field {name!r}; its fields: "
                                 f"{', '.join(sorted(SECTION_FIELDS[section]))}")
    return values.get(name, default)


def meter_section(holder: CellRecord | EpochRecord, meter: str) -> Mapping:
    """``holder.meters[meter]`` (a cell's or an epoch's), or an empty mapping where it is absent or malformed.

    Older and hand-edited records have empty, partial or malformed ``meters``, so nothing that reads them may
    assume a key exists; a meter outside :data:`METER_FIELDS` is an error naming the meters.
    """
    if meter not in METER_FIELDS:
        raise UnknownRecordField(f"no meter is named {meter!r}; the meters: {', '.join(METER_FIELDS)}")
    meters = holder.meters if isinstance(holder.meters, Mapping) else {}
    section = meters.get(meter)
    return section if isinstance(section, Mapping) else {}


def meter_field(holder: CellRecord | EpochRecord, meter: str, name: str, default: object = None) -> object:
    """``holder.meters[meter][name]`` as stored, or ``default`` where the record lacks it.

    Raises:
        UnknownRecordField: ``meter`` or ``name`` is not in :data:`METER_FIELDS` (the message names the valid ones).
    """
    section = meter_section(holder, meter)
    if name not in METER_FIELDS[meter]:
        raise UnknownRecordField(f"the {meter} meter writes no field {name!r}; its fields: "
                                f"{', '.join(sorted(METER_FIELDS[meter]))}")
    return section.get(name, default)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochRecord:
    """One epoch: mean loss per target, wall seconds, the work done, and the meters' figures.

    ``heldout_loss`` / ``heldout_accuracy`` are measured on the task's test split after the epoch, outside
    its timing (``None`` without a test split; accuracy only for classification); ``validation_loss`` /
    ``validation_accuracy`` on its validation split, the one tuning reads, after the last epoch only (``None``
    for the other epochs and without a validation split).
    ``data_seconds`` is the part of ``seconds`` spent waiting for data, the rest being compute (``None`` in
    records written before it was measured). ``heldout_f1_micro`` / ``heldout_f1_macro`` score multi-label
    classification (MM-IMDb's genres), where top-1 accuracy means nothing.
    """

    epoch: int
    loss: float
    seconds: float
    optimizer_steps: int
    closure_calls: int
    samples: int
    targets: int
    meters: dict = field(default_factory=dict)
    heldout_loss: float | None = None
    heldout_accuracy: float | None = None
    eval_seconds: float | None = None
    data_seconds: float | None = None
    heldout_f1_micro: float | None = None
    heldout_f1_macro: float | None = None
    validation_loss: float | None = None
    validation_accuracy: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """Summary of the epochs that ran (``None`` where no epoch completed).

    ``data_fraction`` is the share of the epochs' seconds spent waiting for data (``None`` for records that did
    not measure it). Every ``*heldout*`` figure is the test split's; ``final_validation_*`` the validation
    split's. Time to target: ``target_reached`` is ``True`` (``*_to_target`` say what it cost), ``False`` (the
    test split was evaluated and never reached it: *not reached*) or ``None`` (no test split or no untrained
    evaluation: *n/a*).
    """

    first_loss: float | None
    final_loss: float | None
    mean_loss: float | None
    best_loss: float | None
    mean_epoch_seconds: float | None
    total_seconds: float
    optimizer_steps: int
    closure_calls: int
    samples_per_second: float | None
    targets_per_second: float | None
    final_heldout_loss: float | None = None
    final_heldout_accuracy: float | None = None
    best_heldout_accuracy: float | None = None
    initial_heldout_loss: float | None = None
    target_loss: float | None = None
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    joules_to_target: float | None = None
    data_fraction: float | None = None
    final_validation_loss: float | None = None
    final_validation_accuracy: float | None = None
    target_reached: bool | None = None

    @classmethod
    def of(cls, epochs: list[EpochRecord], total_seconds: float, *, untrained=None, floor: float | None = None,
           curve: list | None = None) -> Summary:
        """Summarise ``epochs``; ``total_seconds`` includes building and warm-up.

        Args:
            untrained: the test evaluation (``.loss``, ``.accuracy``) of the model before training: the
                start of time to target, and the only result of a cell that trains nothing (a zero-shot baseline).
            floor: the test split's loss floor, where the target lies halfway to (see
                :func:`gradeff.records.curve.target_loss`).
            curve: the test evaluations during training (:class:`gradeff.records.curve.CurvePoint`): time to target at
                their resolution; ``None``: at the epochs' ends.
        """
        if not epochs:
            return cls(first_loss=None, final_loss=None, mean_loss=None, best_loss=None, mean_epoch_seconds=None,
                       total_seconds=total_seconds, optimizer_steps=0, closure_calls=0, samples_per_second=None,
                       targets_per_second=None,
                       final_heldout_loss=untrained.loss if untrained is not None else None,
                       final_heldout_accuracy=untrained.accuracy if untrained is not None else None,
                       best_heldout_accuracy=untrained.accuracy if untrained is not None else None,
                       initial_heldout_loss=untrained.loss if untrained is not None else None)
        losses = [e.loss for e in epochs]
        seconds = sum(e.seconds for e in epochs)
        accuracies = [e.heldout_accuracy for e in epochs if e.heldout_accuracy is not None]
        reached = target = None
        if untrained is not None and untrained.loss is not None:
            target = target_loss(untrained.loss, floor)
            if curve is not None:
                point = first_at_target(curve, target)
                reached = point and _Reached(point.step, point.seconds, point.joules)
            else:
                found = time_to_target(epochs, target, joules=_epoch_joules)
                reached = found and _Reached(found.optimizer_steps, found.seconds, found.joules)
        evaluated = target is not None and (curve is not None or any(e.heldout_loss is not None for e in epochs))
        return cls(
            first_loss=losses[0], final_loss=losses[-1], mean_loss=sum(losses) / len(losses), best_loss=min(losses),
            mean_epoch_seconds=seconds / len(epochs), total_seconds=total_seconds,
            optimizer_steps=sum(e.optimizer_steps for e in epochs),
            closure_calls=sum(e.closure_calls for e in epochs),
            samples_per_second=sum(e.samples for e in epochs) / seconds if seconds > 0 else None,
            # Targets are tokens for the language tasks and images for classification.
            targets_per_second=sum(e.targets for e in epochs) / seconds if seconds > 0 else None,
            final_heldout_loss=epochs[-1].heldout_loss, final_heldout_accuracy=epochs[-1].heldout_accuracy,
            best_heldout_accuracy=max(accuracies) if accuracies else None,
            initial_heldout_loss=untrained.loss if untrained is not None else None, target_loss=target,
            steps_to_target=reached.optimizer_steps if reached else None,
            seconds_to_target=reached.seconds if reached else None,
            joules_to_target=reached.joules if reached else None,
            data_fraction=(sum(e.data_seconds for e in epochs) / seconds
                           if seconds > 0 and all(e.data_seconds is not None for e in epochs) else None),
            final_validation_loss=epochs[-1].validation_loss, final_validation_accuracy=epochs[-1].validation_accuracy,
            target_reached=bool(reached) if evaluated else None,
        )


@dataclass(frozen=True, slots=True)
class _Reached:
    optimizer_steps: int
    seconds: float
    joules: float | None


def _epoch_joules(epoch: EpochRecord) -> float | None:
    return meter_field(epoch, "energy", "joules")


@dataclass(frozen=True, slots=True, kw_only=True)
class CellRecord:
    """The result of one cell of the grid.

    Attributes:
        cell: the cell's id in its grid (``llm-adam-accum``, ``vit_s-lora-checkpoint-cifar100``).
        grid: the grid (study) the cell belongs to.
        model / optimizer / strategy / method / dataset: the cell's axis keys.
        status: one of ``STATUSES``.
        detail: why a cell did not end ``ok`` (exception message, skip reason), else ``""``.
        failed_step: optimizer step at which a ``diverged``/``oom`` cell stopped.
        epochs: the epochs that completed.
        loss_floor: best achievable mean loss on the task's data (``None`` if unknown).
        task: the data trained on: sizes, the held-out split's floor and Bayes accuracy.
        parameters: ``total`` and ``trainable`` parameter counts (4-bit weights counted as the
            values they hold, not their packed bytes).
        weights: where the starting weights came from (``random``, ``pretrained``: the suite's
            cached pretraining, with its one-off cost; ``local``: a folder given by the user).
        inference: what the trained classifier costs to use, on the held-out split: latency at batch 1,
            throughput, peak memory, energy per image, MACs, and the NetScore family at the final
            held-out accuracy (see :mod:`gradeff.cell.inference`, :mod:`gradeff.analysis.netscore`).
        tuning: with ``--gradeff-tune lr``: the rates tried, each trial's final validation loss, the rate
            chosen, whether it sits at the edge of the rates tried, the protocol's own rate, and what the search
            cost (trials, epochs, seconds, joules); an optimizer that has nothing to tune says why.
        curve: the test evaluations during training, as :class:`gradeff.records.curve.CurvePoint` dicts (step, epoch,
            seconds, joules, loss, accuracy, eval_seconds): time to target at their resolution.
        evaluation: how the test split was evaluated: ``every_steps`` (optimizer steps between evaluations inside
            an epoch; 0: epoch ends only), ``points``, ``seconds`` (all evaluations, outside every clock) and
            ``fraction`` (those seconds over the cell's wall time).
        plan: what the strategy decided: a budget strategy's budget, margin, checkpointed blocks and
            predicted peak (the measured one is ``meters.memory.peak_bytes``), a compiled model's
            activation budget and compile time, static checkpointing's block count.
        hparams: the hyper-parameters used (the method's under ``method``).
        seeding: the seed plan the run followed (fixed, or adaptive with its first and most seeds and the level
            each look tests at) and, for a seed past the first ones, why it ran (what was still open).
        environment: versions, device and CPU of the machine, and the numerics probe of its kernels.
        experiment: the experiment's fingerprint and the inputs it hashes (settings, data and weights checksums,
            threads, kernels, compile, tuning, budget, protocol and rate, code version; see
            :mod:`gradeff.records.fingerprint`): ``--gradeff-resume`` keeps a record only for an equal one.
        meters: measurements of the meters (RAM, GPU, energy, memory breakdown), by meter.
        session: id of the pytest session (or run) that produced the record.
        code_version: gradeff's version and a hash of its source, so a resumed run never mixes
            results of different code.
    """

    schema_version: int = SCHEMA_VERSION
    cell: str
    grid: str = "main"
    model: str
    optimizer: str
    strategy: str
    method: str = "full"
    dataset: str = ""
    profile: str
    seed: int
    device: str
    status: str
    detail: str = ""
    failed_step: int | None = None
    epochs: tuple[EpochRecord, ...] = ()
    summary: Summary
    loss_floor: float | None = None
    task: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    plan: dict = field(default_factory=dict)
    inference: dict = field(default_factory=dict)
    tuning: dict = field(default_factory=dict)
    curve: tuple[dict, ...] = ()
    evaluation: dict = field(default_factory=dict)
    hparams: dict = field(default_factory=dict)
    seeding: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    experiment: dict = field(default_factory=dict)
    meters: dict = field(default_factory=dict)
    session: str = ""
    code_version: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; valid statuses: {', '.join(STATUSES)}")
        try:
            expected = cell_id(self.grid, model=self.model, optimizer=self.optimizer, strategy=self.strategy,
                               method=self.method, dataset=self.dataset or None)
        except KeyError:
            expected = None  # a grid, model or dataset this gradeff does not know: kept as it is
        if expected is not None and self.cell != expected:
            raise ValueError(f"cell {self.cell!r} does not match its axes (expected {expected!r})")

    def to_json(self) -> str:
        """One line of strict JSON (no newline); non-finite numbers as ``null``, named under ``nonfinite``."""
        nonfinite: dict[str, str] = {}
        data = _finite(asdict(self), "", nonfinite)
        if nonfinite:
            data[NONFINITE_KEY] = nonfinite
        return json.dumps(data, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> CellRecord:
        """Rebuild a record from one line of a results file.

        Raises:
            ValueError: not JSON, a NaN/Infinity token in a version-3 line (strict JSON), or any
                reason of :meth:`from_dict`.
        """
        tokens: list[str] = []

        def constant(name: str) -> float:
            tokens.append(name)
            return _NONFINITE[name]

        data = json.loads(text, parse_constant=constant)
        if _SURROGATE_ESCAPE.search(text):
            data = _whole_characters(data)
        if tokens and isinstance(data, dict) and _version_at_least(data.get("schema_version"), 3):
            raise ValueError(f"{tokens[0]} is not JSON: a version-3 record stores a non-finite number as null "
                             f"and names it under {NONFINITE_KEY!r}")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> CellRecord:
        """Rebuild a record from ``json.loads(record.to_json())``.

        Raises:
            ValueError: the schema version is not this code's, a field is missing or unknown, or
                ``nonfinite`` names a value that is not there.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a record is a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version not in _READABLE_VERSIONS:
            raise ValueError(f"record schema version {version!r}; this gradeff reads versions "
                             f"{', '.join(map(str, _READABLE_VERSIONS))}")
        if NONFINITE_KEY in data and _version_at_least(version, 3):
            data = _restore_nonfinite({k: v for k, v in data.items() if k != NONFINITE_KEY}, data[NONFINITE_KEY])
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown record fields: {sorted(unknown)}")
        # Every value of the kind its field holds, said by name: a reader (summary, report, gate) computes with them.
        _check_kinds(cls, data, "", skip=("schema_version",))
        epochs = data.get("epochs", ())
        for index, epoch in enumerate(epochs):
            _check_kinds(EpochRecord, epoch, f"epochs[{index}].")
        _check_kinds(Summary, data["summary"], "summary.")
        # Version 1 had no grid, method or dataset fields: their defaults are what it meant.
        values = dict(data) | {"schema_version": SCHEMA_VERSION}
        values["epochs"] = tuple(EpochRecord(**e) for e in epochs)
        values["curve"] = tuple(data.get("curve", ()))
        values["summary"] = Summary(**data["summary"])
        return cls(**values)


# A JSON escape of a UTF-16 surrogate: a string may then hold a lone one, which is no character at all.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _whole_characters(value: object) -> object:
    """``value`` with every lone surrogate in its strings (``"\\ud800"`` in JSON, from a writer that cut a character
    in half) replaced by U+FFFD, and escaped pairs joined into their character: a lone surrogate is no text any
    encoder writes, so a terminal, a CSV or a parquet file would fail on it instead of showing the record."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_whole_characters(key): _whole_characters(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_characters(item) for item in value]
    return value


# What each annotation of the record's dataclasses admits from JSON (``float`` takes an integer too; neither number
# takes a boolean).
_KINDS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "dict": (dict,), "None": (type(None),),
          "tuple": (list, tuple), "Summary": (dict,), "EpochRecord": (dict,)}


def _admits(annotation: str, value: object) -> bool:
    for part in annotation.split("|"):
        kind = part.strip().split("[")[0]
        if kind in ("int", "float") and isinstance(value, bool):
            continue
        if isinstance(value, _KINDS.get(kind, (object,))):
            return True
    return False


def _check_kinds(cls: type, data: object, where: str, skip: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming the first field of ``data`` (a record's, an epoch's or its summary's) that is
    missing, unknown or of another kind than ``cls`` declares (``epochs[0].seconds is null, expected float``)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where.rstrip('.') or 'a record'} is {_kind(data)}, expected an object")
    declared = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(declared))
    if unknown:
        raise ValueError(f"unknown {where.rstrip('.') or 'record'} fields: {unknown}")
    for name, spec in declared.items():
        if name in skip:
            continue
        if name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise ValueError(f"{where}{name} is missing")
            continue
        if not _admits(spec.type, data[name]):
            raise ValueError(f"{where}{name} is {_kind(data[name])}, expected {spec.type}")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    text = json.dumps(value, default=repr)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:39] + '…'}"


def _version_at_least(version: object, least: int) -> bool:
    return isinstance(version, int) and not isinstance(version, bool) and version >= least


def _pointer_token(key: object) -> str:
    # RFC 6901: "~" and "/" inside a key are escaped, so any key (a module path, a ratio "1/2") is safe.
    return str(key).replace("~", "~0").replace("/", "~1")


def _finite(value: object, pointer: str, found: dict[str, str]) -> object:
    """``value`` with every non-finite float replaced by ``None``, its pointer and kind added to ``found``."""
    if isinstance(value, float) and not math.isfinite(value):
        found[pointer] = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
        return None
    if isinstance(value, dict):
        return {key: _finite(item, f"{pointer}/{_pointer_token(key)}", found) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item, f"{pointer}/{index}", found) for index, item in enumerate(value)]
    return value


def _restore_nonfinite(data: dict, flags: object) -> dict:
    """A copy of ``data`` with the values ``flags`` names (pointer → kind) put back where they are ``null``."""
    if not isinstance(flags, dict):
        raise ValueError(f"{NONFINITE_KEY} must be an object of JSON Pointers, got {type(flags).__name__}")
    data = copy.deepcopy(data)
    for pointer, kind in flags.items():
        if kind not in _NONFINITE:
            raise ValueError(f"{NONFINITE_KEY}: {pointer!r} is {kind!r}; expected one of {', '.join(_NONFINITE)}")
        if not pointer.startswith("/"):
            raise ValueError(f"{NONFINITE_KEY}: {pointer!r} is not a JSON Pointer")
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
        parent: object = data
        try:
            for token in tokens[:-1]:
                parent = parent[int(token)] if isinstance(parent, list) else parent[token]
            last = int(tokens[-1]) if isinstance(parent, list) else tokens[-1]
            if parent[last] is not None:
                raise ValueError(f"{NONFINITE_KEY}: {pointer!r} holds {parent[last]!r}, not null")
            parent[last] = _NONFINITE[kind]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"{NONFINITE_KEY}: {pointer!r} names no value ({type(exc).__name__}: {exc})") from None
    return data


def append_record(path: str | Path, record: CellRecord) -> None:
    """Append ``record`` as one line to ``path``, durably, as soon as a cell ends.

    One ``write`` on an ``O_APPEND`` descriptor puts the whole line at the end of the file even
    when several pytest-xdist workers append at once (an exclusive ``flock`` keeps a failed append's undoing
    from touching another writer's line); ``fsync`` keeps it through a crash. A file that does not end with a
    newline (its last line was torn) gets one in the same write, so the torn line stays a bad line of its own
    instead of swallowing this record.

    Raises:
        OutputError: the disk refused the line (full, failing): whatever part of it was written is truncated
            back, so the file holds exactly what it held before, and the message names the file and the reason.
    """
    import fcntl  # noqa: PLC0415 - POSIX only; the records import everywhere

    path = Path(path)
    line = (record.to_json() + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputError(path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        try:
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            view = memoryview(line)
            while view:  # a regular file takes the whole line at once; the loop only guards a short write
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            # No partial line left behind: the next append (or the next session) starts on a clean line.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise OutputError(path, exc) from exc
    finally:
        os.close(fd)  # closing releases the lock


def latest_by_cell(records: Iterable[CellRecord]) -> dict[str, CellRecord]:
    """The last record of each cell, keyed by cell id in order of first appearance.

    Results files are append-only: a rerun of a cell supersedes its earlier records.
    """
    latest: dict[str, CellRecord] = {}
    for record in records:
        latest[record.cell] = record  # a dict keeps the first insertion's position
    return latest


def latest_by_run(records: Iterable[CellRecord]) -> dict[tuple[str, int], CellRecord]:
    """The last record of each cell and seed, keyed by ``(cell id, seed)`` in order of first appearance.

    A cell repeated over seeds (``--gradeff-seeds``) has one record per seed; each is a draw of its own,
    and only a rerun with the same seed supersedes an earlier record.
    """
    latest: dict[tuple[str, int], CellRecord] = {}
    for record in records:
        latest[(record.cell, record.seed)] = record
    return latest


def read_records(path: str | Path, *, errors: list[str] | None = None) -> Iterator[CellRecord]:
    """Yield the records of a results file in order.

    Args:
        path: a JSON-lines results file.
        errors: if given, unreadable lines are described here (``path:line: reason``) and
            skipped; if ``None`` the first unreadable line raises ``ValueError``. Bytes that are
            not UTF-8 make only their own line unreadable.
    """
    # Bytes, decoded line by line: one corrupt byte must not cost the rest of the file.
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
                record = CellRecord.from_json(line) if line.strip() else None
            # RecursionError: absurdly nested JSON is a bad line, not a reason to stop reading.
            except (ValueError, TypeError, KeyError, RecursionError) as exc:
                reason = (f"not UTF-8 text ({exc.reason} at byte {exc.start})" if isinstance(exc, UnicodeDecodeError)
                          else str(exc))
                message = f"{path}:{number}: {reason}"
                if errors is None:
                    raise ValueError(message) from exc
                errors.append(message)
                continue
            if record is not None:
                yield record
