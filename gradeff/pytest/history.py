"""``--gradeff-history PATH``: the session's figures added to a history store under the commit checked out.

At the session's end its records (the results file's lines of this session) become rows of the store
(:func:`gradeff.gate.history.measurements_of_record`: time per step with its interval over the epochs, the final
losses, test accuracy and peak memory counted from tensors), filed under ``git rev-parse HEAD`` of the repository
holding the session's root folder, and the machine of each record (:func:`gradeff.gate.history.machine_of`). A tree
with uncommitted changes is filed under its commit too, said so in the rows' source and on the terminal; outside a
git repository nothing is written, said once.
"""

from __future__ import annotations

import subprocess

import pytest

from gradeff.gate.history import Commit, HistoryStore, machine_of, measurements_of_record
from gradeff.pytest.options import SETTINGS
from gradeff.records.store import read_records

__all__ = []

_LINES = pytest.StashKey[list[str]]()


def _git(root, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    settings = config.stash.get(SETTINGS, None)
    if (settings is None or settings.history is None or getattr(config, "workerinput", None) is not None
            or config.option.collectonly or not settings.results.exists()):
        return
    records = [r for r in read_records(settings.results, errors=[]) if r.session == settings.session]
    if not records:
        return
    lines = config.stash[_LINES] = []
    info = _git(config.rootpath, "show", "-s", "--format=%H%x00%cI%x00%s", "HEAD")
    if info is None:
        lines.append(f"gradeff history: {config.rootpath} is not in a git repository: nothing added to "
                     f"{settings.history}")
        return
    commit = Commit(*info.split("\x00", 2))
    dirty = bool(_git(config.rootpath, "status", "--porcelain", "--untracked-files=no"))
    source = "pytest session" + (" (uncommitted changes)" if dirty else "")
    written = 0
    with HistoryStore(settings.history) as store:
        store.add_commit(commit)
        for record in records:
            machine, description = machine_of(record)
            store.add_machine(machine, description)
            written += store.add(measurements_of_record(record, commit=commit.commit, machine=machine,
                                                        run=settings.session, source=source))
    lines.append(f"gradeff history: {written} figures of {len(records)} cells added to {settings.history} under "
                 f"{commit.commit[:10]}" + (" (the tree has uncommitted changes)" if dirty else ""))


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    for line in config.stash.get(_LINES, []):
        terminalreporter.write_line(line)
