"""Records as a pandas DataFrame, and as a parquet file: the CSV export's table, typed.

One row per cell and seed (a rerun's newest record wins), the columns exactly those of ``gradeff report -o
table.csv`` in the same order (``cell``, ``summary.final_loss``, ``meters.gpu.util_mean_percent``, ...). The table
is the CSV export's own (:func:`gradeff.report.csv_export.csv_table`: one flattening of a record, not two), read
back by pandas' CSV reader with nullable dtypes: numbers become numbers at full precision (``Int64``, ``Float64``),
``n/a`` a missing value (``pd.NA``), ``True`` / ``False`` booleans, lists stay JSON text, and text keeps the CSV's
guard against spreadsheet formulas (a leading ``'``).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from gradeff import analysis
from gradeff.records.formatting import NA
from gradeff.records.loading import load_results
from gradeff.records.outputs import write_with
from gradeff.report.csv_export import flatten, write_csv

if TYPE_CHECKING:
    import pandas

    from gradeff.records.results import CellRecord

__all__ = ["epochs_frame", "load", "records_frame", "write_parquet"]

# What names a run in the per-epoch table, before each epoch's own fields.
_RUN_COLUMNS = ("cell", "grid", "model", "optimizer", "strategy", "method", "dataset", "profile", "seed")


def records_frame(records: Iterable[CellRecord]) -> pandas.DataFrame:
    """The CSV table of ``records`` as a DataFrame (see the module's docstring for the types).

    Args:
        records: records in reading order (a later record of a cell and seed replaces an earlier one).
    """
    import pandas

    text = io.StringIO()
    write_csv(records, text)
    text.seek(0)
    # Only the CSV's own missing-value mark is missing: a cell id such as "nan" or "null" stays text. pandas 3's
    # parser reads the float repr the CSV wrote back to the same double (tests/report/test_dataframe.py holds it to
    # that).
    # Nullable dtypes: an integer or boolean column with a missing value stays integer or boolean (Int64,
    # boolean), and the parquet file keeps exactly these types.
    return pandas.read_csv(text, na_values=[NA], keep_default_na=False, dtype_backend="numpy_nullable")


def epochs_frame(records: Iterable[CellRecord]) -> pandas.DataFrame:
    """One row per cell, seed and epoch (a rerun's newest record wins): the run's axes, then the epoch's fields
    (``epoch``, ``loss``, ``seconds``, ``heldout_loss``, ``heldout_accuracy``, ``validation_loss`` ...; its meters
    flattened as ``meters.ram.peak_rss_bytes`` ...), with the same nullable dtypes as :func:`records_frame`."""
    import pandas

    kept, _ = analysis.latest_records(records)
    rows = []
    for record in analysis.sort_records(kept):
        run = {column: getattr(record, column) for column in _RUN_COLUMNS}
        for epoch in record.epochs:
            row = dict(run)
            for field in fields(epoch):
                flatten(field.name, getattr(epoch, field.name), row)
            rows.append(row)
    frame = pandas.DataFrame(rows, columns=None if rows else list(_RUN_COLUMNS))
    return frame.convert_dtypes(dtype_backend="numpy_nullable")


def load(paths: str | Path | Iterable[str | Path], *, epochs: bool = False) -> pandas.DataFrame:
    """Read results files into a DataFrame: ``gradeff.load("results/results.jsonl")``.

    Args:
        paths: one JSON-lines results file or several, merged in the order given (as ``gradeff report`` merges
            shards and reruns).
        epochs: one row per cell, seed and epoch instead (:func:`epochs_frame`): the long table of the curves.

    Returns:
        One row per cell and seed, the CSV export's columns (:func:`records_frame`); with ``epochs``, one per epoch.

    Raises:
        gradeff.records.loading.ResultsFileError: a file is missing, unreadable or holds no readable record; the message
            names it. Unreadable lines of an otherwise readable file are skipped, with a warning naming each.
    """
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    loaded = load_results(paths)
    for line in loaded.skipped_lines:
        warnings.warn(f"gradeff.load: skipped unreadable line {line}", stacklevel=2)
    return epochs_frame(loaded.records) if epochs else records_frame(loaded.records)


def write_parquet(records: Iterable[CellRecord], path: str | Path) -> Path:
    """Write the DataFrame of ``records`` to ``path`` as parquet, atomically
    (:func:`gradeff.records.outputs.write_with`).

    Raises:
        gradeff.records.outputs.OutputError: the file could not be written; an earlier file at ``path`` is unchanged.
    """
    frame = records_frame(records)
    # write_with hands a text handle (the writers' common path); parquet is bytes, written to its buffer.
    return write_with(path, lambda handle: frame.to_parquet(handle.buffer, index=False, engine="pyarrow"))
