"""Every file the suite writes (report, CSV, gate output, last-session files, merged results): written whole or
not at all, a failure said in one line, and no two outputs on one path.

A file is written to a temporary file beside it, flushed to disk, then renamed over the target and the folder's
entry flushed too, so a reader (a browser, a CI upload, the next session) sees the old file or the new one, never
half of one, and after a crash the name holds the new file. When the disk is
full or failing (``ENOSPC``, ``EIO``, ``EDQUOT``, ...) the temporary file is removed, the target keeps what it
held, and :class:`OutputError` carries one line naming the file and the reason; the caller prints it, goes on
printing its summary and verdict, and exits :data:`EXIT_INCOMPLETE_OUTPUT`.

The append-only results store is not written here: it appends one ``fsync``-ed line per cell
(:func:`gradeff.records.store.append_record`).
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

__all__ = ["EXIT_INCOMPLETE_OUTPUT", "OutputError", "colliding_outputs", "write_text", "write_with"]

# sysexits.h's EX_IOERR: "an error occurred while doing I/O on some file". Distinct from every pytest exit code
# (0-5) and from the gate's (0 no regression, 1 regression, 2 unusable input): the run's verdict stands, one of
# its files is missing.
EXIT_INCOMPLETE_OUTPUT = 74


class OutputError(OSError):
    """A file could not be written; ``str()`` is one line naming it and why (the target was left as it was)."""

    def __init__(self, path: str | os.PathLike[str], cause: OSError):
        self.path, self.cause = Path(path), cause
        code = errno.errorcode.get(cause.errno, "") if cause.errno is not None else ""
        reason = cause.strerror or str(cause) or type(cause).__name__
        super().__init__(cause.errno, f"cannot write {self.path}: {reason}" + (f" ({code})" if code else ""))

    def __str__(self) -> str:
        return self.strerror


def _open_temporary(path: Path) -> tuple[TextIO, Path]:
    """A new text file beside ``path`` (same folder, hence the same file system: the rename is atomic), created
    with the permissions a plain ``open`` would give (mkstemp's are owner-only, which a report must not get)."""
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            return os.fdopen(fd, "w", encoding="utf-8", newline=""), temporary
        except FileExistsError:  # another writer's temporary file: draw another name
            continue


def write_with(path: str | os.PathLike[str], write: Callable[[TextIO], object]) -> Path:
    """Write ``path`` atomically: ``write(handle)`` fills a temporary text file, which then replaces ``path``.

    Args:
        path: the target; its folder is created.
        write: called once with the open handle (opened with ``newline=""``, as the csv module wants).

    Returns:
        ``path``.

    Raises:
        OutputError: the folder, the temporary file, a write, the flush or the rename failed; ``path`` is unchanged.
    """
    path = Path(path)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = _open_temporary(path)
        with handle:
            write(handle)
            handle.flush()
            # On disk before the rename: after a crash the name points at the whole new file or the old one.
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        temporary = None
        # The folder's entry too: after a crash the name holds the new file, not the old one or nothing.
        _fsync_folder(path.parent)
    except OSError as exc:
        raise OutputError(path, exc) from exc
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
    return path


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a folder that cannot be opened for reading (no read permission): the rename stands
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):  # file systems that cannot sync a folder
            raise
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`write_with`)."""
    return write_with(path, lambda handle: handle.write(text))


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    # Not there yet: the same absolute path after resolving links of the folders that do exist.
    return a.resolve() == b.resolve()


def colliding_outputs(paths: Mapping[str, str | os.PathLike[str] | None]) -> list[str]:
    """Which named paths are one file: ``["--gradeff-report and --gradeff-results are both r.jsonl", ...]``.

    Args:
        paths: a name (an option, "last-session records") → its path; ``None`` entries are left out.

    Returns:
        One sentence per colliding pair, in the order given; empty when every path is its own file.
    """
    named = [(name, Path(path)) for name, path in paths.items() if path is not None]
    return [f"{first} and {second} are both {path}"
            for i, (first, path) in enumerate(named) for second, other in named[i + 1:] if _same_file(path, other)]
