"""This session's records, kept in memory as they are made: a disk too full to keep them still gets the summary and
the gate's verdict.

Each record goes to the results file the moment its cell ends (:func:`gradeff.records.store.append_record`, one
``fsync``-ed line; a refused append is truncated back, leaving no partial line). It is also kept here, in the process
that made it; a pytest-xdist worker hands its records, and its lost writes, to the controller when it finishes. The
session's summary and gate read the file's records of the session merged with these (:func:`merged`), so a record
the disk refused is still summarised and judged, and each lost write is said in one line; the session then exits 74.
"""

from __future__ import annotations

import pytest

from gradeff.pytest.options import SETTINGS
from gradeff.records.outputs import OutputError
from gradeff.records.results import CellRecord
from gradeff.records.store import append_record, read_records

__all__ = ["keep", "lost_writes", "merged", "of_session"]

_KEPT = pytest.StashKey[list[CellRecord]]()
_LOST = pytest.StashKey[list[str]]()
# Where a pytest-xdist worker hands them to the controller (config.workeroutput).
_RECORDS_OUTPUT, _LOST_OUTPUT = "gradeff_records", "gradeff_lost_writes"


def keep(config: pytest.Config, results, record: CellRecord) -> None:
    """Append ``record`` to the results file and keep it in memory; a write the disk refuses is noted, not raised.

    Args:
        config: the session's configuration (where the records are kept).
        results: the results file.
        record: the cell's record.
    """
    config.stash.setdefault(_KEPT, []).append(record)
    try:
        append_record(results, record)
    except OutputError as exc:
        config.stash.setdefault(_LOST, []).append(
            f"{exc}: the record of {record.cell} (seed {record.seed}, {record.status}) is not on disk; it is kept in "
            "memory for this session's summary and gate only")


def lost_writes(config: pytest.Config) -> list[str]:
    """One line per record the disk refused, in this process and (on pytest-xdist's controller) its workers."""
    return list(config.stash.get(_LOST, []))


def merged(config: pytest.Config, from_file: list[CellRecord]) -> list[CellRecord]:
    """The session's records: those read back from the results file, in file order, then those only in memory (the
    disk refused them, or the file could not be read back)."""
    seen = {_identity(record) for record in from_file}
    return [*from_file, *(r for r in config.stash.get(_KEPT, []) if _identity(r) not in seen)]


def _identity(record: CellRecord) -> tuple:
    return record.session, record.cell, record.seed, record.started_at, record.finished_at


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker: its records and lost writes go to the controller with its output."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[_RECORDS_OUTPUT] = [record.to_json() for record in session.config.stash.get(_KEPT, [])]
        output[_LOST_OUTPUT] = lost_writes(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controller: a finished worker's records and lost writes join its own (a crashed worker hands
    nothing back; its records are in the results file, where the disk took them)."""
    output = getattr(node, "workeroutput", None) or {}
    config = node.config
    kept = config.stash.setdefault(_KEPT, [])
    known = {_identity(record) for record in kept}
    for line in output.get(_RECORDS_OUTPUT, ()):
        record = CellRecord.from_json(line)
        if _identity(record) not in known:
            kept.append(record)
    config.stash.setdefault(_LOST, []).extend(output.get(_LOST_OUTPUT, ()))


_OF_SESSION = pytest.StashKey[tuple[list, list[str]]]()


def of_session(config: pytest.Config) -> tuple[list, list[str]]:
    """This session's records and the results file's unreadable lines, read once at session end: the file's records
    of the session, and those the disk refused, kept in memory (:mod:`gradeff.pytest.session_records`)."""
    if _OF_SESSION not in config.stash:
        settings = config.stash[SETTINGS]
        records: list = []
        errors: list[str] = []
        try:
            if settings.results.exists():
                records = [r for r in read_records(settings.results, errors=errors) if r.session == settings.session]
        except OSError as exc:  # gone or unreadable now: the records kept in memory are the session's
            errors.append(f"{settings.results}: cannot be read back ({exc.strerror or exc})")
        config.stash[_OF_SESSION] = (merged(config, records), errors)
    return config.stash[_OF_SESSION]
