"""Every written file: whole or not at all, a failure in one line, no two outputs on one path."""

import errno
import os
from pathlib import Path

import pytest

from gradeff.records import outputs
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError, colliding_outputs, write_text, write_with


class FailingFile:
    """A text file whose writes fail as a full (ENOSPC) or failing (EIO) disk makes them fail, after ``ok`` bytes."""

    def __init__(self, path: Path, code: int = errno.ENOSPC, ok: int = 0):
        self.path, self.code, self.ok, self.written = path, code, ok, 0
        path.write_text("")  # the temporary file exists, as mkstemp's would

    def write(self, text: str) -> int:
        if self.written + len(text) > self.ok:
            raise OSError(self.code, os.strerror(self.code))
        self.written += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        raise OSError(self.code, os.strerror(self.code))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def failing_disk(monkeypatch, code: int = errno.ENOSPC, ok: int = 0) -> list[Path]:
    """Make every atomic write fail with ``code``; returns the temporary files it handed out."""
    made = []

    def open_temporary(path: Path):
        temporary = path.parent / f".{path.name}.failing.tmp"
        made.append(temporary)
        return FailingFile(temporary, code, ok), temporary

    monkeypatch.setattr(outputs, "_open_temporary", open_temporary)
    return made


def test_a_file_is_replaced_whole(tmp_path):
    """The new text replaces the old at once; no temporary file is left beside it; folders are created."""
    target = tmp_path / "deep" / "report.html"
    assert write_text(target, "first") == target
    write_text(target, "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html"]


def test_a_written_file_has_the_permissions_of_a_plain_open(tmp_path):
    """The umask decides, as for open(): not the owner-only mode of a temporary file."""
    umask = os.umask(0o022)
    try:
        write_text(tmp_path / "report.html", "x")
        (tmp_path / "plain.html").write_text("x")
    finally:
        os.umask(umask)
    assert (tmp_path / "report.html").stat().st_mode == (tmp_path / "plain.html").stat().st_mode
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o644


def test_a_writer_callback_gets_a_text_handle(tmp_path):
    """write_with hands the callback a handle opened without newline translation (what csv wants)."""
    target = tmp_path / "t.csv"
    write_with(target, lambda handle: handle.write("a,b\r\n1,2\r\n"))
    assert target.read_bytes() == b"a,b\r\n1,2\r\n"


@pytest.mark.parametrize(("code", "name"), [(errno.ENOSPC, "ENOSPC"), (errno.EIO, "EIO"), (errno.EDQUOT, "EDQUOT")])
def test_a_failing_disk_leaves_the_old_file_and_says_so_in_one_line(tmp_path, monkeypatch, code, name):
    """Half a file never replaces a whole one: the target keeps its text, the temporary file is removed, and the
    error is one line naming the file, the reason and the errno's name."""
    target = tmp_path / "report.html"
    target.write_text("the old report")
    made = failing_disk(monkeypatch, code, ok=5)
    with pytest.raises(OutputError) as caught:
        write_text(target, "a much longer new report")
    message = str(caught.value)
    assert message == f"cannot write {target}: {os.strerror(code)} ({name})" and "\n" not in message
    assert caught.value.path == target and caught.value.errno == code
    assert target.read_text() == "the old report"
    assert made and not any(p.exists() for p in made)


def test_a_failing_callback_is_reported_the_same_way(tmp_path):
    """An OSError inside the callback (a stream to a full disk) is an OutputError too; the target never appears."""
    def write(handle):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputError, match=r"No space left on device \(ENOSPC\)"):
        write_with(tmp_path / "t.csv", write)
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_folder_is_an_output_error(tmp_path):
    """A target under a regular file: its folder cannot be made; one line, no traceback of mkdir's."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match=rf"^cannot write {blocker}/x.md: .*\((EEXIST|ENOTDIR)\)$"):
        write_text(blocker / "x.md", "text")


def test_the_incomplete_output_code_is_distinct():
    """74 (sysexits' EX_IOERR): none of pytest's codes (0-5) nor the gate's (0, 1, 2)."""
    assert EXIT_INCOMPLETE_OUTPUT == 74


def test_colliding_outputs_names_each_pair(tmp_path):
    """Two names for one file (also through a symlink, also before it exists) are named; distinct paths are not."""
    results = tmp_path / "r.jsonl"
    results.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(results)
    assert colliding_outputs({"--results": results, "--report": tmp_path / "x" / ".." / "r.jsonl",
                              "--baseline": link, "--other": tmp_path / "o.jsonl", "--none": None}) == [
        f"--results and --report are both {results}", f"--results and --baseline are both {results}",
        f"--report and --baseline are both {tmp_path / 'x' / '..' / 'r.jsonl'}"]
    assert colliding_outputs({"a": tmp_path / "new1", "b": tmp_path / "new2"}) == []
    assert colliding_outputs({"a": tmp_path / "new", "b": tmp_path / "." / "new"}) == [
        f"a and b are both {tmp_path / 'new'}"]
