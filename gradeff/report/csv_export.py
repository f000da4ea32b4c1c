"""Records as a flat CSV table: one row per cell, summary and meters flattened into columns.

Numbers stay in raw units (bytes, seconds, joules) at full precision, for spreadsheets and
pandas; missing values are ``n/a`` (pandas reads it as NaN by default); accuracies are fractions. A text value
that begins like a spreadsheet formula (``= + - @``, tab, carriage return) gets a leading ``'``.
Column names are dotted paths (``summary.final_loss``, ``meters.gpu.util_mean_percent``) so newer
meters add columns instead of breaking older readers.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import TextIO

from gradeff import analysis
from gradeff.analysis import METRICS
from gradeff.analysis.memory import sort_memory, split_studies
from gradeff.analysis.peft import sort_peft
from gradeff.analysis.trivial import strongest_baseline
from gradeff.records.formatting import NA
from gradeff.records.results import CellRecord, Summary
from gradeff.records.safe_text import csv_safe

__all__ = ["csv_table", "flatten", "write_csv"]

_RECORD_COLUMNS = ("cell", "model", "optimizer", "strategy", "status", "failed_step", "detail", "profile", "seed",
                   "device", "session", "started_at", "finished_at", "loss_floor", "epochs")
# The two studies' columns, after every earlier column so that readers indexing those still work:
# which grid, method and dataset; held-out results against the Bayes accuracy; what was trained, from where.
_STUDY_COLUMNS = ("grid", "method", "dataset", "summary.final_heldout_accuracy", "summary.final_heldout_loss",
                  "summary.best_heldout_accuracy", "task.bayes_accuracy", "parameters.trainable", "parameters.total",
                  "weights.source")
# The strongest of the task's trivial baselines on the same test split (gradeff.axes.data.trivial): its name, its metric
# (accuracy, a fraction as summary.final_heldout_accuracy is; or loss, as summary.final_heldout_loss) and its value,
# so a table read elsewhere sets each cell beside what no learning gives. After the study columns, for the same reason.
_TRIVIAL_COLUMNS = ("task.trivial_best", "task.trivial_best_metric", "task.trivial_best_value")
# Where the numbers came from: the rate a cell trained at, its source and protocol, gradeff's code and the commit of
# the project the session ran in (environment.project_commit). After the trivial columns, for the same reason.
_PROVENANCE_COLUMNS = ("hparams.lr", "hparams.lr_source", "hparams.protocol", "code_version",
                       "environment.project_commit")
_SUMMARY_FIELDS = tuple(f.name for f in fields(Summary))
_SUMMARY_COLUMNS = tuple(column for column in (f"summary.{name}" for name in _SUMMARY_FIELDS)
                         if column not in _STUDY_COLUMNS)
# The meters' documented fields, in a stable order; fields a record has beyond these follow, sorted.
_METER_COLUMNS = tuple(f"meters.{meter}.{name}" for meter, names in (
    ("ram", ("peak_rss_bytes", "peak_source", "mean_rss_bytes", "peak_system_percent", "samples", "duration_s")),
    ("gpu", ("available", "device_name", "util_mean_percent", "util_max_percent", "mem_used_peak_bytes",
             "power_mean_w", "alloc_peak_bytes", "reserved_peak_bytes", "samples", "short_window", "duration_s")),
    ("energy", ("joules", "source", "co2_grams", "duration_s")),
    ("cost", ("reads_s", "sampler_cpu_s", "epoch_s", "fraction")),
    # peak_by_device is a mapping: it flattens into one column per device, after these.
    ("memory", ("parameter_bytes", "trainable_parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
                "activation_bytes", "peak_bytes")),
) for name in names)


def flatten(prefix: str, value: object, out: dict[str, object]) -> None:
    """``value`` into ``out``: a mapping as one column per leaf (``meters.ram.peak_rss_bytes``), else one column."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            flatten(f"{prefix}.{key}", item, out)
    else:
        out[prefix] = value


def _row(record: CellRecord) -> dict[str, object]:
    row: dict[str, object] = {name: getattr(record, name) for name in _RECORD_COLUMNS if name != "epochs"}
    row["epochs"] = len(record.epochs)
    for name in _SUMMARY_FIELDS:
        row[f"summary.{name}"] = getattr(record.summary, name, None)
    if isinstance(record.meters, Mapping):
        flatten("meters", record.meters, row)
    row |= {"grid": record.grid, "method": record.method, "dataset": record.dataset}
    for column in _STUDY_COLUMNS:
        name, _, key = column.partition(".")
        section = getattr(record, name, None)
        if name in ("task", "parameters", "weights"):
            # Only the named fields: the rest of these mappings (task info, pretraining) is not tabular.
            row[column] = section.get(key) if isinstance(section, Mapping) else None
    if isinstance(record.inference, Mapping):
        # What the trained classifier costs to use and its NetScore family: the page's per-cell inference tables
        # live here (its appendix links to this table), one column per field.
        flatten("inference", record.inference, row)
    row |= dict(zip(_TRIVIAL_COLUMNS, _strongest_trivial(record), strict=True))
    for column in _PROVENANCE_COLUMNS:
        name, _, key = column.partition(".")
        section = getattr(record, name, None)
        row[column] = (section.get(key) if isinstance(section, Mapping) else None) if key else section
    return row


def _strongest_trivial(record: CellRecord) -> tuple[str | None, str | None, float | None]:
    """The strongest trivial baseline a record's task carries (:func:`gradeff.analysis.trivial.strongest_baseline`):
    on test accuracy where it has accuracies (a classifier's), else on test loss; its value as the record keeps it
    (an accuracy a fraction); ``(None, None, None)`` where it carries none."""
    for metric in ("heldout_accuracy", "test_loss"):
        baseline = strongest_baseline([record], METRICS[metric])
        if baseline is not None:
            entry = record.task["trivial_baselines"][baseline.name]
            return baseline.name, entry["metric"], entry["value"]
    return None, None, None


def _cell_text(value: object) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NA
    if isinstance(value, (list, tuple)):
        return csv_safe(json.dumps(value))
    if isinstance(value, (bool, int, float)):
        return repr(value) if isinstance(value, float) else str(value)  # repr: every digit survives
    # Text from a record (a cell id, a failure's message): a spreadsheet must not run "=..." as a formula.
    # Numbers stay numbers (a negative one keeps its sign), so only text is guarded.
    return csv_safe(str(value))


def csv_table(records: Iterable[CellRecord]) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the CSV: one row per cell and seed (a rerun's newest record wins), main study, PEFT
    study, memory study, real data, each in its grid order, then any other study's records in theirs.

    Args:
        records: records in reading order.

    Returns:
        ``(header, rows)``, every value already text.
    """
    kept, _ = analysis.latest_records(records)
    main, peft, memory, real = split_studies(kept)
    # A study with no ordering of its own here (one registered later) still has every row.
    placed = {id(record) for record in (*main, *peft, *memory, *real)}
    rest = [record for record in kept if id(record) not in placed]
    rows = [_row(r) for r in (*analysis.sort_records(main), *sort_peft(peft), *sort_memory(memory),
                              *analysis.sort_records(real), *analysis.sort_records(rest))]
    known = (*_RECORD_COLUMNS, *_SUMMARY_COLUMNS, *_METER_COLUMNS, *_STUDY_COLUMNS, *_TRIVIAL_COLUMNS,
             *_PROVENANCE_COLUMNS)
    extra = sorted({key for row in rows for key in row} - set(known))
    header = [*known, *extra]
    return header, [[_cell_text(row.get(column)) for column in header] for row in rows]


def write_csv(records: Iterable[CellRecord], stream: TextIO) -> int:
    """Write the CSV table of ``records`` to an open text stream (opened with ``newline=""``).

    Args:
        records: records in reading order.
        stream: where to write.

    Returns:
        The number of data rows written.
    """
    header, rows = csv_table(records)
    writer = csv.writer(stream)
    writer.writerow(header)
    writer.writerows(rows)
    return len(rows)
