"""Cell records, and a section's or a meter's field read from one by name.

A record is the complete result of one cell: what ran, how it ended, the per-epoch series and
their summary, in raw units (seconds, bytes, joules). Records are frozen values that round-trip
through JSON (:mod:`gradeff.records.strict_json`); each carries the schema version so old results files stay readable
or fail loudly. The append-only results store that keeps them is :mod:`gradeff.records.store`; the names of their
sections' and meters' fields, :mod:`gradeff.records.fields`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

from gradeff.records.curve import first_at_target, target_loss, time_to_target
from gradeff.records.fields import METER_FIELDS, SECTION_FIELDS, UnknownRecordField
from gradeff.records.strict_json import (
    NONFINITE,
    NONFINITE_KEY,
    SURROGATE_ESCAPE,
    check_kinds,
    replace_nonfinite,
    restore_nonfinite,
    version_at_least,
    whole_characters,
)
from gradeff.studies.grid import cell_id

__all__ = [
    "FAILED_STATUSES", "FINAL_STATUSES", "SCHEMA_VERSION", "STATUSES", "CellRecord", "EpochRecord", "Summary",
    "meter_field", "meter_section", "record_field", "record_section",
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
# ok: trained all epochs · diverged: NaN/Inf loss · oom: out of memory (or over the memory budget) ·
# error: any other failure · skipped: the cell is incompatible (the reason is in ``detail``) ·
# interrupted: stopped by Ctrl-C.
STATUSES = ("ok", "diverged", "oom", "error", "skipped", "interrupted")
# Statuses that settle a cell: ``--gradeff-resume`` keeps them and re-runs the others.
FINAL_STATUSES = ("ok", "diverged", "oom", "skipped")
# The cell ran and failed: what a regression gate flags and a loss curve marks with a cross.
FAILED_STATUSES = ("diverged", "oom", "error")


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
        data = replace_nonfinite(asdict(self), "", nonfinite)
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
            return NONFINITE[name]

        data = json.loads(text, parse_constant=constant)
        if SURROGATE_ESCAPE.search(text):
            data = whole_characters(data)
        if tokens and isinstance(data, dict) and version_at_least(data.get("schema_version"), 3):
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
        if NONFINITE_KEY in data and version_at_least(version, 3):
            data = restore_nonfinite({k: v for k, v in data.items() if k != NONFINITE_KEY}, data[NONFINITE_KEY])
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown record fields: {sorted(unknown)}")
        # Every value of the kind its field holds, said by name: a reader (summary, report, gate) computes with them.
        check_kinds(cls, data, "", skip=("schema_version",))
        epochs = data.get("epochs", ())
        for index, epoch in enumerate(epochs):
            check_kinds(EpochRecord, epoch, f"epochs[{index}].")
        check_kinds(Summary, data["summary"], "summary.")
        # Version 1 had no grid, method or dataset fields: their defaults are what it meant.
        values = dict(data) | {"schema_version": SCHEMA_VERSION}
        values["epochs"] = tuple(EpochRecord(**e) for e in epochs)
        values["curve"] = tuple(data.get("curve", ()))
        values["summary"] = Summary(**data["summary"])
        return cls(**values)
