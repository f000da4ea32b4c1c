"""Each file the suite writes, on a full disk (a failing file object): one line, the old file kept, exit 74; and
text that cannot take a spreadsheet, a terminal or a markdown table over. (The session's own files at its end:
tests/gate/test_gate_session.py.)"""

import csv
import errno
import io
import re

import pytest

from gradeff.cli import main as cli_main
from gradeff.gate.compare import main as compare_main
from gradeff.records.outputs import OutputError
from gradeff.records.store import append_record
from gradeff.report import write_report
from gradeff.report.csv_export import write_csv
from gradeff.scale.collect import collect
from gradeff.scale.manifest import LaunchManifest
from gradeff.scale.status import ShardStatus
from tests.conftest import build_record
from tests.records.test_outputs import failing_disk

ENOSPC = "No space left on device (ENOSPC)"


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "results.jsonl"
    for cell in ("llm-adam-standard", "llm-sgd-standard"):
        append_record(path, build_record(cell))
    return path


@pytest.mark.parametrize("name", ["report.html", "table.csv"])
def test_the_report_keeps_the_old_file_on_a_full_disk(tmp_path, monkeypatch, results, name):
    target = tmp_path / name
    target.write_text("old")
    failing_disk(monkeypatch)
    with pytest.raises(OutputError, match=f"^cannot write {re.escape(str(target))}: {re.escape(ENOSPC)}$"):
        write_report([build_record()], target)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == sorted([name,
                                                                                                 "results.jsonl"])


@pytest.mark.parametrize("args", [["-o", "{tmp}/report.html"], ["-o", "{tmp}/table.csv"],
                                  ["-o", "{tmp}/table.txt", "--format", "csv"]])
def test_gradeff_report_on_a_full_disk_exits_74_in_one_line(tmp_path, monkeypatch, capsys, results, args):
    """`gradeff report -o x.csv` used to leave a 0-byte file: now the old one stays, one line says why, exit 74."""
    failing_disk(monkeypatch, errno.EIO)
    args = [arg.format(tmp=tmp_path) for arg in args]
    assert cli_main(["report", str(results), *args]) == 74
    err = capsys.readouterr().err.strip()
    assert err == f"gradeff: error: cannot write {args[1]}: Input/output error (EIO)"
    assert not (tmp_path / args[1].rsplit("/", 1)[-1]).exists()


def test_gradeff_report_refuses_to_write_over_its_input(tmp_path, capsys, results):
    before = results.read_text()
    assert cli_main(["report", str(results), "-o", str(results)]) == 2
    err = capsys.readouterr().err
    assert f"-o and results file 1 are both {results}: the report would overwrite the records" in err
    assert results.read_text() == before


def test_the_gate_output_on_a_full_disk_still_prints_the_verdict(tmp_path, monkeypatch, capsys, results):
    """compare --output: one line on stderr, the total line on stdout, exit 74 (1 when there is a regression: the
    verdict stands)."""
    other = tmp_path / "current.jsonl"
    append_record(other, build_record("llm-adam-standard"))
    append_record(other, build_record("llm-sgd-standard"))
    failing_disk(monkeypatch)
    table = tmp_path / "gate.md"
    assert compare_main([str(results), str(other), "--markdown", "--output", str(table)]) == 74
    out, err = capsys.readouterr()
    assert out == "0 regressions in 0 cells, 0 improvements, 2 cells compared\n"
    assert err == f"gradeff compare: error: cannot write {table}: {ENOSPC}\n"
    append_record(other, build_record("llm-sgd-standard", status="diverged"))
    assert compare_main([str(results), str(other), "--output", str(table)]) == 1
    assert not table.exists()


def test_the_gate_refuses_one_file_on_both_sides_and_an_output_over_an_input(tmp_path, capsys, results):
    """A file compared with itself always passes; --output over an input would destroy it: exit 2 up front."""
    assert compare_main([str(results), str(results)]) == 2
    assert (f"the baseline and the current file are both {results}: a run compared with itself always passes"
            in capsys.readouterr().err)
    other = tmp_path / "current.jsonl"
    other.write_text(results.read_text())
    before = results.read_text()
    assert compare_main([str(results), str(other), "--output", str(results)]) == 2
    assert "--output and the baseline are both" in capsys.readouterr().err and results.read_text() == before


def test_launch_merge_on_a_full_disk_keeps_the_shards(tmp_path, monkeypatch, results):
    merged = tmp_path / "merged.jsonl"
    shard = tmp_path / "shard-1.jsonl"
    results.rename(shard)
    manifest = LaunchManifest(engine="local", shards=1, pytest_args=("benchmarks",), folder=str(tmp_path),
                              cwd=str(tmp_path), output=str(merged), profile="tiny", code_version="0.1.0+abc",
                              tests=(), created_at=0.0)
    failing_disk(monkeypatch)
    with pytest.raises(OutputError, match=re.escape(ENOSPC)):
        collect(manifest, [ShardStatus(index=1, job="1", state="COMPLETED", recorded=2, assigned=2, exit_code=0)])
    assert not merged.exists() and shard.stat().st_size > 0


def test_csv_text_never_starts_a_formula():
    """A cell id or failure message beginning with = + - @ tab or CR gets a leading quote; numbers keep their sign."""
    rows = [build_record("llm-adam-standard", status="error", detail=detail, losses=(2.0, -1.5))
            for detail in ("=HYPERLINK(\"http://x\")", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "plain")]
    stream = io.StringIO()
    write_csv(rows[:1], stream)
    header, row = list(csv.reader(io.StringIO(stream.getvalue())))
    assert row[header.index("detail")] == "'=HYPERLINK(\"http://x\")"
    assert row[header.index("summary.final_loss")] == "-1.5"
    for record in rows[1:]:
        stream = io.StringIO()
        write_csv([record], stream)
        header, row = list(csv.reader(io.StringIO(stream.getvalue())))
        detail = row[header.index("detail")]
        assert detail == (record.detail if record.detail == "plain" else f"'{record.detail}")


def test_markdown_and_terminal_gate_output_neutralise_bidi_and_newlines(tmp_path, capsys):
    """A failure message with a right-to-left override, a line break and an ANSI escape: one visible line in the
    markdown table and in the terminal table, as the HTML report shows it."""
    base, cur = tmp_path / "base.jsonl", tmp_path / "cur.jsonl"
    append_record(base, build_record("llm-adam-standard"))
    append_record(cur, build_record("llm-adam-standard", status="error",
                                    detail="boom\u202eevil\x1b[2J| fake | row"))
    for markdown in ([], ["--markdown"]):
        assert compare_main([str(base), str(cur), *markdown]) == 1
        out = capsys.readouterr().out
        assert "\u202e" not in out and "\x1b" not in out
        (line,) = [line for line in out.splitlines() if "status" in line and "boom" in line]
        assert "boom[U+202E]evil[U+001B][2J" in line
