"""The append-only JSON-lines results store: a record appended as one line the moment its cell ends, a results file
read back line by line, and the latest record of each cell or run.

Appends are crash-safe: a line is written with one ``write`` and ``fsync``; a file whose last line
was torn (a writer killed mid-line, a copy cut short) first gets its missing newline, so the torn line
costs only itself and the next record starts a line of its own. An append the disk refuses (full, failing) is
truncated back, leaving no partial line, and raises one line naming the file and why. Reading skips an unreadable line —
bad JSON, a bad record, bytes that are not UTF-8 — and reports it with its line number.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from gradeff.records.outputs import OutputError
from gradeff.records.results import CellRecord

__all__ = ["append_record", "latest_by_cell", "latest_by_run", "read_records"]


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
