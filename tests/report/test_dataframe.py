"""Records in pandas: gradeff.load and `gradeff report -o x.parquet` hold the CSV export's columns and values, typed."""

import csv
import io
import math
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradeff
from gradeff.cli import main
from gradeff.records.loading import ResultsFileError
from gradeff.records.store import append_record
from gradeff.report.csv_export import write_csv
from gradeff.report.dataframe import records_frame
from tests.conftest import build_peft_record, build_record


def _records():
    """Both studies, two seeds of a cell, a rerun that replaces a record, a failure whose text looks like a formula,
    and a record without meters (every meter column missing)."""
    return [
        build_record("llm-adam-standard", losses=(2.0, 1.25)),
        build_record("llm-adam-standard", losses=(2.0, 1.5), seed=1),
        build_record("vit-sgd-accum", status="error", detail="=HYPERLINK(x)", failed_step=3),
        build_record("vit-sgd-accum", losses=(2.0, 1.0 / 3.0)),  # the rerun: this one counts
        build_record("modernbert-cgd-checkpoint", status="diverged", losses=(2.0, math.inf), meters={}),
        build_peft_record("vit_s", "lora", accuracies=(0.25, 0.7)),
        build_peft_record("tinyvit", "bitfit", joules=None, bayes=None),
    ]


def _csv_rows(records) -> tuple[list[str], list[list[str]]]:
    text = io.StringIO()
    write_csv(records, text)
    header, *rows = list(csv.reader(io.StringIO(text.getvalue())))
    return header, rows


def _same(text: str, value) -> bool:
    """A CSV cell and the DataFrame's value say the same: n/a is missing, numbers equal to the last bit."""
    if text == "n/a":
        return value is None or pd.isna(value)
    if isinstance(value, bool) or text in ("True", "False"):
        return str(value) == text
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(text) == value
    return str(value) == text


def _assert_frame_is_the_csv(frame: pd.DataFrame, records) -> None:
    header, rows = _csv_rows(records)
    assert list(frame.columns) == header
    assert len(frame) == len(rows)
    for row, (_, values) in zip(rows, frame.iterrows(), strict=True):
        differing = [(column, text, values[column]) for column, text in zip(header, row, strict=True)
                     if not _same(text, values[column])]
        assert not differing, differing


def test_the_frame_has_the_csvs_columns_and_values():
    """One row per cell and seed (the rerun replaces its cell), the CSV's columns in its order, every value equal."""
    records = _records()
    frame = records_frame(records)
    _assert_frame_is_the_csv(frame, records)
    assert sorted(zip(frame["cell"], frame["seed"])) == [
        ("llm-adam-standard", 0), ("llm-adam-standard", 1), ("modernbert-cgd-checkpoint", 0),
        ("tinyvit-bitfit-standard-cifar100", 0), ("vit-sgd-accum", 0), ("vit_s-lora-standard-cifar100", 0)]
    # Typed, missing values included: a count with a missing value stays an integer, a flag a boolean.
    assert (frame["summary.final_loss"].dtype, frame["seed"].dtype) == ("Float64", "Int64")
    assert (frame["failed_step"].dtype, frame["meters.gpu.available"].dtype) == ("Int64", "boolean")
    rerun = frame.set_index(["cell", "seed"]).loc[("vit-sgd-accum", 0)]
    assert rerun["status"] == "ok" and rerun["summary.final_loss"] == 1.0 / 3.0
    assert pd.isna(frame.set_index("cell").loc["modernbert-cgd-checkpoint", "meters.ram.peak_rss_bytes"])


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=1e-12, max_value=1e6, allow_nan=False), st.integers(0, 2**32 - 1))
def test_numbers_survive_to_the_last_bit(loss, seed):
    """Whatever float a record holds, the frame holds the same double (the CSV writes its repr)."""
    frame = records_frame([build_record(losses=(2.0, loss), seed=seed)])
    assert frame.loc[0, "summary.final_loss"] == loss and frame.loc[0, "seed"] == seed


def test_load_reads_and_merges_files_like_the_report(tmp_path):
    """gradeff.load(paths): one file or several (later records replace earlier ones), as `gradeff report` merges."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    records = _records()
    for record in records[:3]:
        append_record(first, record)
    for record in records[3:]:
        append_record(second, record)
    _assert_frame_is_the_csv(gradeff.load([first, second]), records)
    _assert_frame_is_the_csv(gradeff.load(str(first)), records[:3])
    with pytest.raises(ResultsFileError, match="missing.jsonl"):
        gradeff.load([first, tmp_path / "missing.jsonl"])


def test_report_writes_parquet_that_reads_back_as_the_frame(tmp_path, capsys):
    """`gradeff report -o x.parquet` (or --format parquet): the same DataFrame gradeff.load gives."""
    results = tmp_path / "results.jsonl"
    for record in _records():
        append_record(results, record)
    assert main(["report", str(results), "-o", str(tmp_path / "cells.parquet")]) == 0
    assert main(["report", str(results), "--format", "parquet", "-o", str(tmp_path / "cells.bin")]) == 0
    loaded = gradeff.load(results)
    for name in ("cells.parquet", "cells.bin"):
        table = pd.read_parquet(tmp_path / name)
        pd.testing.assert_frame_equal(table, loaded)
        _assert_frame_is_the_csv(table, _records())
    assert main(["report", str(results), "--format", "html", "-o", str(tmp_path / "x.parquet")]) == 2
    assert main(["report", str(results), "--format", "parquet", "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "ends in .parquet but --format is html" in err and "parquet is a binary file" in err
    assert not (tmp_path / "x.parquet").exists()


def test_importing_gradeff_does_not_import_pandas():
    """The plugin loads in every pytest session: `import gradeff` stays light until gradeff.load is used."""
    probe = ("import sys, gradeff; assert 'pandas' not in sys.modules; gradeff.load; "
             "assert 'pandas' not in sys.modules; print('light')")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip() == "light"


def test_each_row_carries_its_tasks_strongest_trivial_baseline():
    """The highest accuracy for a classifier's task, the lowest loss for a text task, nothing where none is known."""
    image = {"trivial_baselines": {"pixel_1nn": {"metric": "accuracy", "value": 0.39},
                                   "logistic_regression": {"metric": "accuracy", "value": 0.64, "loss": 1.2}}}
    text = {"trivial_baselines": {"unigram": {"metric": "loss", "value": 4.4}, "bigram": {"metric": "loss",
                                                                                          "value": 3.2}}}
    frame = records_frame([build_record("vit-adam-standard", task=image), build_record("llm-adam-standard", task=text),
                           build_record("llm-sgd-standard")]).set_index("cell")
    columns = ["task.trivial_best", "task.trivial_best_metric", "task.trivial_best_value"]
    assert frame.loc["vit-adam-standard", columns].tolist() == ["logistic_regression", "accuracy", 0.64]
    assert frame.loc["llm-adam-standard", columns].tolist() == ["bigram", "loss", 3.2]
    assert frame.loc["llm-sgd-standard", columns].isna().all()


def test_the_rows_say_where_their_numbers_came_from():
    """The rate a cell trained at, its source and protocol, gradeff's code and the project's commit."""
    record = build_record("llm-adam-standard", code_version="0.1.0+abc",
                          hparams={"lr": 2e-3, "lr_source": "self-tuned: ...", "protocol": "self-tuned"},
                          environment={"python": "3.11", "project_commit": "f" * 40 + "+dirty"})
    row = records_frame([record]).iloc[0]
    assert (row["hparams.lr"], row["hparams.protocol"], row["code_version"]) == (2e-3, "self-tuned", "0.1.0+abc")
    assert row["hparams.lr_source"] == "self-tuned: ..." and row["environment.project_commit"] == "f" * 40 + "+dirty"


def test_load_with_epochs_gives_one_row_per_epoch(tmp_path):
    """gradeff.load(paths, epochs=True): each run's axes, then each epoch's own fields, meters flattened."""
    results = tmp_path / "r.jsonl"
    append_record(results, build_record("llm-adam-standard", losses=(2.0, 1.5), seconds=(1.0, 0.5)))
    append_record(results, build_record("llm-sgd-standard", losses=(3.0, 2.5, 2.25), seconds=(1.0, 1.0, 1.0)))
    frame = gradeff.load(results, epochs=True)
    assert list(frame.columns[:9]) == ["cell", "grid", "model", "optimizer", "strategy", "method", "dataset",
                                       "profile", "seed"]
    # In the registries' order (SGD before Adam), as every table of the report.
    assert list(zip(frame["cell"], frame["epoch"], frame["loss"], strict=True)) == [
        ("llm-sgd-standard", 0, 3.0), ("llm-sgd-standard", 1, 2.5), ("llm-sgd-standard", 2, 2.25),
        ("llm-adam-standard", 0, 2.0), ("llm-adam-standard", 1, 1.5)]
    assert frame["seconds"].tolist() == [1.0, 1.0, 1.0, 1.0, 0.5] and frame["loss"].dtype == "Float64"
    assert gradeff.load(results, epochs=False).shape[0] == 2


def test_the_project_commit_is_the_sessions_checkout(tmp_path):
    from gradeff.cell.environment import project_commit

    assert project_commit(str(tmp_path)) is None  # not a git repository
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("a")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    project_commit.cache_clear()
    assert project_commit(str(tmp_path)) == head
    (tmp_path / "f").write_text("b")
    project_commit.cache_clear()
    assert project_commit(str(tmp_path)) == head + "+dirty"
