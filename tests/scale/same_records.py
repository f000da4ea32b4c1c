"""What must repeat bit for bit when the same cells run elsewhere (another process, another shard, another node of the
same kind): every deterministic field of a record, and the Answer's deterministic verdicts.

A seeded CPU cell with the same code, versions and torch threads repeats its losses, held-out figures and the memory
counted from tensors exactly (docs/gate.md); wall times, energy, RSS and the session's identity do not. Compared
here: the status and its detail; every epoch's and the curve's losses, accuracies and counts; the summary's losses,
held-out and validation figures and time-to-target step; the memory breakdown; the counted FLOPs and MACs; the task,
parameters, weights, hyper-parameters and the strategy's plan.
"""

from __future__ import annotations

from collections.abc import Iterable

from gradeff.analysis.answer import answer, verdict_text
from gradeff.records.results import CellRecord
from gradeff.records.store import latest_by_run

RECORD_FIELDS = ("cell", "grid", "model", "optimizer", "strategy", "method", "dataset", "profile", "seed", "device",
                 "status", "detail", "failed_step", "loss_floor", "task", "parameters", "weights", "plan", "hparams",
                 "code_version")
SUMMARY_FIELDS = ("first_loss", "final_loss", "mean_loss", "best_loss", "optimizer_steps", "closure_calls",
                  "final_heldout_loss", "final_heldout_accuracy", "best_heldout_accuracy", "initial_heldout_loss",
                  "target_loss", "steps_to_target", "final_validation_loss", "final_validation_accuracy",
                  "target_reached")
EPOCH_FIELDS = ("epoch", "loss", "optimizer_steps", "closure_calls", "samples", "targets", "heldout_loss",
                "heldout_accuracy", "heldout_f1_micro", "heldout_f1_macro", "validation_loss", "validation_accuracy")
CURVE_FIELDS = ("step", "epoch", "loss", "accuracy")
COMPUTE_FIELDS = ("flops_per_sample", "model_flops")
INFERENCE_FIELDS = ("parameters", "macs_per_image", "macs_by_op")
# The Answer's verdicts on figures that repeat: quality and the live-tensor peak. Speed and energy to target are
# measured times; their verdicts may differ between two runs of the same code.
DETERMINISTIC_VERDICTS = ("quality", "memory")


def deterministic_view(record: CellRecord) -> dict:
    """The record's deterministic fields (see the module docstring) as plain data, for an exact comparison."""
    meters = record.meters or {}
    return {
        **{name: getattr(record, name) for name in RECORD_FIELDS},
        "summary": {name: getattr(record.summary, name) for name in SUMMARY_FIELDS},
        "epochs": [{name: getattr(epoch, name) for name in EPOCH_FIELDS} for epoch in record.epochs],
        "curve": [{name: point.get(name) for name in CURVE_FIELDS} for point in record.curve],
        "memory": meters.get("memory"),
        "compute": {name: (meters.get("compute") or {}).get(name) for name in COMPUTE_FIELDS},
        "inference": {name: (record.inference or {}).get(name) for name in INFERENCE_FIELDS},
    }


def differences(expected: Iterable[CellRecord], actual: Iterable[CellRecord]) -> list[str]:
    """Every (cell, seed) whose deterministic fields differ, or that one side lacks; empty when they agree."""
    left, right = latest_by_run(expected), latest_by_run(actual)
    found = [f"{key}: only in the first" for key in left.keys() - right.keys()]
    found += [f"{key}: only in the second" for key in right.keys() - left.keys()]
    for key in sorted(left.keys() & right.keys()):
        a, b = deterministic_view(left[key]), deterministic_view(right[key])
        found += [f"{key} {name}: {a[name]!r} != {b[name]!r}" for name in a if a[name] != b[name]]
    return found


def answer_verdicts(records: Iterable[CellRecord]) -> list[tuple[str, str, str]]:
    """(subject, objective, verdict in words) of every deterministic verdict of the Answer."""
    return [(line.subject, objective, verdict_text(line.verdicts[objective], line.labels))
            for line in answer(records) for objective in DETERMINISTIC_VERDICTS]
