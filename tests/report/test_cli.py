"""The ``gradeff`` command line: report and list, exit codes, messages, CSV."""

import csv
import io
import subprocess
import sys

import pytest

from gradeff.cli import main
from gradeff.records.exits import EXIT_BAD_INPUT, EXIT_OK
from gradeff.records.store import append_record


@pytest.fixture
def results(tmp_path, make_record):
    """A results file with three cells of one model, one of them diverged."""
    path = tmp_path / "results.jsonl"
    for cell, status in (("llm-sgd-standard", "ok"), ("llm-adam-standard", "ok"), ("llm-adam-accum", "diverged")):
        append_record(path, make_record(cell, status, failed_step=5 if status == "diverged" else None))
    return path


def test_report_ok_writes_the_file(results, tmp_path, capsys):
    """A good results file: exit 0, the HTML file exists and names the cells."""
    out = tmp_path / "site" / "report.html"
    assert main(["report", str(results), "-o", str(out)]) == EXIT_OK
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "diverged at step 5" in html
    assert f"wrote {out}" in capsys.readouterr().err


def test_missing_file_exits_2_naming_it(tmp_path, capsys):
    """A missing results file: exit 2, stderr names the file, no report written."""
    missing = tmp_path / "nope.jsonl"
    assert main(["report", str(missing), "-o", str(tmp_path / "r.html")]) == EXIT_BAD_INPUT
    assert f"{missing}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_malformed_file_exits_2_naming_file_and_line(tmp_path, capsys):
    """Every line unreadable: exit 2, stderr names the file and the first bad line."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"truncated": \n[1, 2]\n', encoding="utf-8")
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"no readable record in {bad}" in err and f"{bad}:1:" in err and "1 more bad lines" in err


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", None], ids=["binary", "directory"])
def test_unreadable_input_exits_2(tmp_path, capsys, content):
    """A binary file or a directory instead of a results file: exit 2 with the path in the message."""
    path = tmp_path / "input"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == EXIT_BAD_INPUT
    assert str(path) in capsys.readouterr().err


def test_a_record_of_a_grid_no_study_reads_is_refused_before_any_output(results, tmp_path, make_record, capsys):
    """A record whose grid no registered study reads: exit 2 naming the grid and the grids that are read, and no
    report, rather than its cells read as the main study's."""
    append_record(results, make_record("llm-adagrad-standard", grid="elsewhere"))
    out = tmp_path / "r.html"
    assert main(["report", str(results), "-o", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "grid 'elsewhere', which no study" in err and "the grids read: main, custom, peft" in err
    assert not out.exists()


def test_some_corrupt_lines_render_the_rest_and_list_them(results, tmp_path, capsys):
    """A file with a corrupt line: exit 0, the other records render, the skipped line is listed."""
    with open(results, "a", encoding="utf-8") as handle:
        handle.write('{"cell": "half a rec\n')
    out = tmp_path / "r.html"
    assert main(["report", str(results), "-o", str(out)]) == EXIT_OK
    html = out.read_text(encoding="utf-8")
    skipped_section = html.split('id="skipped-lines"', 1)[1].split("</section>", 1)[0]
    assert f"{results}:4:" in skipped_section
    assert '<th scope="row">cells</th><td>3</td>' in html and "diverged at step 5" in html
    assert f"skipped unreadable line {results}:4:" in capsys.readouterr().err


def test_several_files_merge_and_later_records_win(results, tmp_path, make_record):
    """Two files: cells of both appear; a cell in both shows the second file's record."""
    second = tmp_path / "second.jsonl"
    append_record(second, make_record("vit-sgd-standard"))
    append_record(second, make_record("llm-sgd-standard", losses=(3.0, 0.123456)))
    out = tmp_path / "merged.csv"
    assert main(["report", str(results), str(second), "--format", "csv", "-o", str(out)]) == EXIT_OK
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert [r["cell"] for r in rows] == ["vit-sgd-standard", "llm-sgd-standard", "llm-adam-standard",
                                         "llm-adam-accum"]
    assert float(rows[1]["summary.final_loss"]) == 0.123456


def test_csv_has_a_header_and_one_row_per_cell(grid_records, tmp_path):
    """--format csv: one row per cell, flattened summary and meters, n/a for what was not measured."""
    path = tmp_path / "grid.jsonl"
    for record in grid_records + grid_records[:5]:  # re-runs of five cells: still one row each
        append_record(path, record)
    out = tmp_path / "grid.csv"
    assert main(["report", str(path), "--format", "csv", "-o", str(out)]) == EXIT_OK
    with out.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = list(reader)
    assert len(rows) == 72 and len({row[0] for row in rows}) == 72
    for column in ("summary.final_loss", "summary.mean_epoch_seconds", "meters.ram.peak_rss_bytes",
                   "meters.gpu.util_mean_percent", "meters.energy.joules", "meters.memory.activation_bytes"):
        assert column in header
    by_cell = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert by_cell["vit-adamw-accum"]["meters.energy.joules"] == "n/a"  # empty meters
    assert by_cell["vlm-adadelta-checkpoint"]["summary.final_loss"] == "n/a"  # oom before an epoch
    assert by_cell["llm-cgd-standard"]["failed_step"] == "37"


def test_csv_to_stdout_and_by_suffix(results, tmp_path, capsys):
    """-o - writes the CSV to stdout; an output named *.csv gets CSV without --format."""
    assert main(["report", str(results), "--format", "csv", "-o", "-"]) == EXIT_OK
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][0] == "cell" and len(rows) == 4
    assert main(["report", str(results), "-o", str(tmp_path / "cells.csv")]) == EXIT_OK
    assert (tmp_path / "cells.csv").read_text(encoding="utf-8").startswith("cell,model,")


def test_list_prints_registry_keys(capsys):
    """gradeff list: every axis with names; gradeff list optimizers: the keys, one per line."""
    assert main(["list"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "models:" in out and "  llm " in out and "strategies:" in out
    assert main(["list", "optimizers"]) == EXIT_OK
    assert capsys.readouterr().out.split() == ["sgd", "adam", "adamw", "adagrad", "adadelta", "cgd", "adafactor",
                                              "adamw8bit", "sgdm"]


def test_usage_errors_exit_2(results, capsys):
    """No subcommand, report without files, an unknown format, HTML into a .csv name: exit code 2."""
    for argv in ([], ["report"], ["report", "x.jsonl", "--format", "pdf"]):
        with pytest.raises(SystemExit) as excinfo:
            main(argv)
        assert excinfo.value.code == 2
    assert "usage: gradeff" in capsys.readouterr().err
    out = results.with_suffix(".csv")
    assert main(["report", str(results), "--format", "html", "-o", str(out)]) == 2
    assert "pass --format csv" in capsys.readouterr().err
    assert not out.exists()


def test_python_dash_m_gradeff_returns_the_exit_code(tmp_path):
    """python -m gradeff runs the same CLI and exits with its code (2 for a missing file)."""
    proc = subprocess.run([sys.executable, "-m", "gradeff", "report", str(tmp_path / "missing.jsonl")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "missing.jsonl: no such file" in proc.stderr
    listing = subprocess.run([sys.executable, "-m", "gradeff", "list", "strategies"], capture_output=True,
                             text=True, timeout=60)
    assert listing.returncode == 0 and listing.stdout.split()[:3] == ["standard", "checkpoint", "accum"]


def test_unwritable_output_exits_74(results, capsys):
    """An output path under a regular file cannot be written: exit 74 (incomplete output), the path in the message."""
    out = results / "report.html"  # results is a file, so this directory cannot exist
    assert main(["report", str(results), "-o", str(out)]) == 74
    assert f"cannot write {out}" in capsys.readouterr().err


def test_compare_subcommand_runs_the_gate(tmp_path, capsys):
    """`gradeff compare` hands its arguments, --help included, to the regression gate."""
    from gradeff.cli import main

    assert main(["compare", "--help"]) == 0
    assert "--allow-missing" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "absent.jsonl"), str(tmp_path / "b.jsonl")]) == 2
    assert "absent.jsonl" in capsys.readouterr().err
