"""Read one or several results files for a report, keeping what is readable.

A file that cannot be opened or has no readable line at all is an error the user must fix
(:class:`ResultsFileError`, naming every bad line); a file with some corrupt lines (a run killed
mid-write, a few bytes that are not UTF-8) still gives its other records, and every skipped line is
returned, with its number, so the report can list them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gradeff.records.results import CellRecord
from gradeff.records.store import read_records

__all__ = ["LoadedResults", "ResultsFileError", "bad_lines", "load_results"]


class ResultsFileError(Exception):
    """A results file that cannot be used; the message names the file (and line where there is one)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedResults:
    """Records of several files, in reading order.

    Attributes:
        records: every readable record (duplicates of a cell included; see ``analysis.latest_records``).
        skipped_lines: ``path:line: reason`` for every unreadable line.
        sources: the files read, as given.
    """

    records: tuple[CellRecord, ...]
    skipped_lines: tuple[str, ...]
    sources: tuple[str, ...]


def bad_lines(errors: list[str]) -> str:
    """Every unreadable line in one message: ``first bad line: A (and 2 more bad lines: B; C)``."""
    more = f" (and {len(errors) - 1} more bad lines: {'; '.join(errors[1:])})" if len(errors) > 1 else ""
    return f"first bad line: {errors[0]}{more}"


def load_results(paths: Iterable[str | Path]) -> LoadedResults:
    """Read and merge results files.

    Args:
        paths: JSON-lines results files, in the order their records should be read (later records
            of a cell replace earlier ones in a report).

    Returns:
        The records and skipped lines.

    Raises:
        ResultsFileError: a file is missing or unreadable, has no record at all (empty), or has lines but none of
            them is a readable record (binary data, another kind of file).
    """
    records: list[CellRecord] = []
    skipped: list[str] = []
    sources: list[str] = []
    for path in paths:
        path = str(path)
        errors: list[str] = []
        try:
            found = list(read_records(path, errors=errors))
        except FileNotFoundError:
            raise ResultsFileError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise ResultsFileError(f"{path}: is a directory, not a results file") from None
        except OSError as exc:
            raise ResultsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if errors and not found:
            # Not one good line: this is not a results file (or the wrong file), not a damaged one.
            raise ResultsFileError(f"no readable record in {path}; " + bad_lines(errors))
        if not found:
            raise ResultsFileError(f"{path}: no records (an empty file)")
        records.extend(found)
        skipped.extend(errors)
        sources.append(path)
    return LoadedResults(records=tuple(records), skipped_lines=tuple(skipped), sources=tuple(sources))
