"""Hostile inputs and a hostile disk: what a results file, a baseline or a full disk may throw at the readers, the
writers, ``gradeff report`` and ``gradeff compare``. Every case once lost data or ended in a traceback; each must end
in the documented refusal (exit 2 or 4, one line) or the record a user expects. Run the whole suite with
``-k hostile``."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradeff.records import outputs
from gradeff.records.outputs import OutputError, write_text
from gradeff.records.results import CellRecord
from gradeff.records.safe_text import csv_safe, one_line
from gradeff.records.store import append_record, read_records
from tests.conftest import build_record

# --- a full disk -----------------------------------------------------------------------------------------------

@contextlib.contextmanager
def small_disk(folder: Path, size: str = "64k"):
    """A real tmpfs of ``size`` at ``folder`` (root can mount one), or ``None`` where it cannot be mounted."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True).returncode == 0
    try:
        yield folder if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the file system of ``folder`` until at most ``leave`` bytes are free."""
    with open(folder / "filler", "wb") as handle:
        chunk = b"\0" * 4096
        try:
            while os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize > leave:
                handle.write(chunk)
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


class _FailingWrites:
    """``os`` as the results store sees it, whose ``write`` takes half a line and then reports a full disk."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        self.calls += 1
        if self.calls == 1:
            return os.write(fd, bytes(data[:len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("disk", ["tmpfs", "patched"])
def test_hostile_an_append_the_disk_refuses_leaves_no_partial_line(tmp_path, monkeypatch, disk):
    """Disk full while appending: the part of the line that was written is truncated back, the file holds exactly
    what it held, the error names the file, and the next append (room again) starts a line of its own."""
    with small_disk(tmp_path / "disk") as mounted:
        if disk == "tmpfs" and mounted is None:
            pytest.skip("no tmpfs can be mounted here (not root): the patched writer covers this case")
        folder = mounted if disk == "tmpfs" else tmp_path
        results = folder / "r.jsonl"
        append_record(results, build_record("llm-adam-standard"))
        before = results.read_bytes()
        if disk == "tmpfs":
            fill(folder, leave=2048)  # less than a record
        else:
            monkeypatch.setattr("gradeff.records.store.os", _FailingWrites())
        with pytest.raises(OutputError) as refused:
            append_record(results, build_record("llm-adam-accum", detail="x" * 8192))
        assert str(refused.value).startswith(f"cannot write {results}: No space left on device (ENOSPC)")
        assert results.read_bytes() == before
        monkeypatch.undo()
        (folder / "filler").unlink(missing_ok=True)
        append_record(results, build_record("llm-adam-checkpoint"))
        assert [r.cell for r in read_records(results)] == ["llm-adam-standard", "llm-adam-checkpoint"]


def test_hostile_an_atomic_write_syncs_the_folder_after_its_rename(tmp_path, monkeypatch):
    """After the rename the folder's entry is flushed too: a crash then leaves the new file under its name."""
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(outputs.os, "fsync", fsync)
    target = tmp_path / "sub" / "report.csv"
    write_text(target, "a,b\n")
    assert target.read_text() == "a,b\n"
    assert synced[-1] == tmp_path / "sub" and synced[0].parent == tmp_path / "sub" and synced[0] != target


def test_hostile_a_full_disk_during_an_atomic_write_keeps_the_old_file(tmp_path):
    with small_disk(tmp_path / "disk") as mounted:
        if mounted is None:
            pytest.skip("no tmpfs can be mounted here (not root)")
        target = mounted / "report.html"
        write_text(target, "old")
        fill(mounted)
        with pytest.raises(OutputError, match=f"^cannot write {target}: No space left on device"):
            write_text(target, "new" * 100_000)
        assert target.read_text() == "old" and sorted(p.name for p in mounted.iterdir()) == ["filler", "report.html"]


# --- text a record should not hold ---------------------------------------------------------------------------------

def _with_detail(detail_json: str) -> str:
    return build_record("llm-adam-standard", status="error", detail="PLACEHOLDER").to_json().replace(
        '"detail":"PLACEHOLDER"', f'"detail":{detail_json}')


def test_hostile_a_lone_surrogate_is_read_as_a_replacement_character(tmp_path):
    """A writer that cut a character in half left "\\ud800" in a record: JSON reads it as a lone surrogate, which no
    encoder writes, so the CSV and parquet export and the terminal once failed with a traceback. It is read as U+FFFD;
    an escaped pair stays its character."""
    line = _with_detail('"bad \\ud800 half, good \\ud83d\\ude00"')
    record = CellRecord.from_json(line)
    assert record.detail == "bad \ufffd half, good \U0001f600"
    results = tmp_path / "r.jsonl"
    results.write_text(line + "\n")
    from gradeff.cli import main

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        for output in ("t.csv", "t.parquet", "r.html"):
            assert main(["report", str(results), "-o", str(tmp_path / output)]) == 0, stderr.getvalue()
    assert "\ufffd" in (tmp_path / "t.csv").read_text(encoding="utf-8")
    assert one_line(record.detail) == record.detail


@pytest.mark.parametrize(("text", "guarded"), [
    ("=HYPERLINK(1)", True), ("\n=1+1", True), ("\uff1d1+1", True), ("\ufe662", True), ("\uff0b1", True),
    ("\uff201", True), ("\t=1", True), ("-1", True), ("plain", False), ("a=1", False), ("", False),
])
def test_hostile_csv_guards_every_form_a_spreadsheet_reads_as_a_formula(text, guarded):
    """A leading line feed and fullwidth or small forms of = + - @ once passed unguarded."""
    assert csv_safe(text) == (f"'{text}" if guarded else text)


# --- the gate's inputs ---------------------------------------------------------------------------------------------

def test_hostile_a_baseline_line_that_is_json_but_not_a_record_is_named(tmp_path):
    from gradeff.gate.compare import main

    base, current = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    base.write_text(json.dumps({"schema_version": 5, "cell": 1}) + "\n")
    append_record(current, build_record())
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        assert main([str(base), str(current)]) == 2
    (line,) = stderr.getvalue().splitlines()
    assert line.startswith(f"gradeff compare: error: {base}: no readable record: {base}:1: ")


def test_hostile_a_garbage_baseline_stops_pytest_before_any_cell_in_one_line(tmp_path):
    """pytest --gradeff-baseline GARBAGE: a usage error (exit 4) of one line, no traceback, no cell run."""
    baseline = tmp_path / "b.jsonl"
    baseline.write_bytes(b"\x00\xff{not json\n\x89PNG\r\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "benchmarks/test_grid.py", "-k",
                           "llm-adam-standard", f"--gradeff-baseline={baseline}",
                           f"--gradeff-results={tmp_path / 'r.jsonl'}"],
                          cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=600)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith(f"ERROR: --gradeff-baseline: no readable record in {baseline}; first bad line: ")
    assert "Traceback" not in done.stdout + done.stderr and not (tmp_path / "r.jsonl").exists()


# --- arbitrary bytes and JSON into every reader ---------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402 - the property tests' own imports, kept with them
from hypothesis import strategies as st  # noqa: E402

# One real record of the committed baseline (every section filled by a real cell) and a hand-made one: what a
# mutated record starts from.
REAL_LINE = (Path(__file__).parents[2] / "baselines" / "tiny-cpu.jsonl").read_text(encoding="utf-8").splitlines()[0]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=6)
# Derandomized (the same examples in every run, so CI never fails on a draw of its own); the counts keep the whole
# suite near two minutes on a loaded 2-core machine.
HOSTILE = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                   derandomize=True, max_examples=300)


def _cli(argv: list[str]) -> tuple[int, list[str]]:
    """Run the gradeff command in this process: its exit code and its non-empty stderr lines (an exception that
    escapes it fails the test: that is a traceback)."""
    from gradeff.cli import main

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, [line for line in stderr.getvalue().splitlines() if line.strip()]


def _not_blank(line: bytes) -> bool:
    try:
        return bool(line.decode("utf-8").strip())
    except UnicodeDecodeError:
        return True  # not text: an unreadable line, not a blank one


def _paths(value, prefix=()):
    """Every path into a JSON value (a key or an index at each step)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


BASE = json.loads(REAL_LINE)
PATHS = [path for path in _paths(BASE) if path]


@st.composite
def mutated_records(draw):
    """A real record with one value anywhere in it replaced by arbitrary JSON, or removed."""
    data = json.loads(REAL_LINE)
    path = draw(st.sampled_from(PATHS))
    parent = data
    for step in path[:-1]:
        parent = parent[step]
    if draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(JSON)
    return json.dumps(data)


@settings(HOSTILE, max_examples=1000)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_hostile_arbitrary_bytes_make_only_their_own_lines_unreadable(tmp_path_factory, chunks):
    """The results reader never raises on bytes: every line is a record or one reason naming its line."""
    path = tmp_path_factory.mktemp("bytes") / "r.jsonl"
    path.write_bytes(b"\n".join(chunks) + b"\n" + REAL_LINE.encode() + b"\n")
    errors: list[str] = []
    records = list(read_records(path, errors=errors))
    assert records and records[-1].cell == BASE["cell"]
    # (Lines end at a line feed only: a carriage return inside one is that line's; a line of white space is blank.)
    assert len(records) + len(errors) == sum(1 for line in path.read_bytes().split(b"\n") if _not_blank(line))
    assert all("\n" not in error for error in errors)


@HOSTILE
@given(st.one_of(st.binary(max_size=300), JSON.map(lambda value: json.dumps(value).encode())))
def test_hostile_arbitrary_bytes_or_json_are_refused_by_report_and_compare_in_one_line(tmp_path_factory, content):
    """`gradeff report` and `gradeff compare` (on either side) refuse a file of no record: exit 2, one line."""
    folder = tmp_path_factory.mktemp("cli")
    bad, good = folder / "bad.jsonl", folder / "good.jsonl"
    bad.write_bytes(content)
    good.write_text(REAL_LINE + "\n")
    for argv in (["report", str(bad), "-o", str(folder / "t.csv")], ["compare", str(bad), str(good)],
                 ["compare", str(good), str(bad)]):
        code, lines = _cli(argv)
        assert code == 2 and len(lines) == 1, (argv, code, lines)
        assert "Traceback" not in lines[0]


@settings(HOSTILE, max_examples=1000)
@given(st.one_of(st.binary(max_size=300), JSON.map(lambda value: json.dumps(value).encode())))
def test_hostile_arbitrary_bytes_or_json_as_a_baseline_are_a_one_line_usage_error(tmp_path_factory, content):
    """pytest's --gradeff-baseline reader: a usage error (pytest's exit 4) of one line, before any cell."""
    from gradeff.pytest.option_checks import baseline_results

    path = tmp_path_factory.mktemp("baseline") / "b.jsonl"
    path.write_bytes(content)
    with pytest.raises(pytest.UsageError) as refused:
        baseline_results(str(path))
    assert "\n" not in str(refused.value) and str(refused.value).startswith("--gradeff-baseline")


@HOSTILE
@given(mutated_records())
def test_hostile_a_record_mutated_anywhere_is_read_or_refused_never_a_traceback(tmp_path_factory, line):
    """One value of a real record replaced by arbitrary JSON (or removed): the readers keep it or name the line; a
    kept one is reported (CSV and parquet) and judged by the gate against the original: exit 0 or 1, or 2 with one
    line, never a traceback."""
    folder = tmp_path_factory.mktemp("mutated")
    current, baseline = folder / "c.jsonl", folder / "b.jsonl"
    current.write_text(line + "\n")
    baseline.write_text(REAL_LINE + "\n")
    for argv, allowed in ((["report", str(current), "-o", str(folder / "t.csv")], (0, 2)),
                          (["report", str(current), "-o", str(folder / "t.parquet")], (0, 2)),
                          (["compare", str(baseline), str(current)], (0, 1, 2)),
                          (["compare", str(current), str(baseline)], (0, 1, 2))):
        code, lines = _cli(argv)
        assert code in allowed, (argv, code, lines)
        if code == 2:
            assert len(lines) == 1, (argv, lines)


@settings(HOSTILE, max_examples=40)
@given(mutated_records())
def test_hostile_a_record_mutated_anywhere_still_renders_the_html_report_or_is_refused(tmp_path_factory, line):
    """The HTML report reads every section (its analysis, tables and figures): a mutated record renders or is refused
    in one line. (A slower property: few examples each run; a 1,305-record sweep of every value replaced by a list, an
    object, text, null, a negative number and true found the two below.)"""
    folder = tmp_path_factory.mktemp("html")
    current = folder / "c.jsonl"
    current.write_text(line + "\n")
    code, lines = _cli(["report", str(current), "-o", str(folder / "r.html")])
    assert code == 0 or (code == 2 and len(lines) == 1), (code, lines)


@pytest.mark.parametrize(("section", "key", "value"), [("evaluation", "every_steps", [1]),
                                                       ("hparams", "protocol", {"a": 1})])
def test_hostile_values_of_another_kind_where_the_report_counted_on_text_or_numbers(tmp_path, section, key, value):
    """Once a TypeError (unhashable type) in the report's tables: now the report renders."""
    data = json.loads(REAL_LINE)
    data[section][key] = value
    current = tmp_path / "c.jsonl"
    current.write_text(json.dumps(data) + "\n")
    code, lines = _cli(["report", str(current), "-o", str(tmp_path / "r.html")])
    assert code == 0 and (tmp_path / "r.html").stat().st_size > 0, lines
