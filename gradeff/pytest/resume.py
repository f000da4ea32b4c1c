"""``--gradeff-resume``: keep a cell's earlier record only where it is this very experiment, and say why a cell is
re-run where it is not.

When the session starts, the results file's final records (ok, diverged, oom, skipped) of the session's profile and
seeds are the candidates (:func:`candidates`). Each cell, before anything of it is built, computes the experiment
fingerprint it would record now (:func:`gradeff.cell.experiment.experiment_inputs`: settings, the data's and the
weights' checksums, threads, kernels, compile, fused, tuning, budget, protocol and rate, code version) and compares it
with its candidate's (:func:`judge`): equal, the cell is skipped as already recorded; different, it runs, and the
inputs that differ are noted. The notes ride on the test's report (under pytest-xdist too), and the terminal
summary prints one line per re-run cell; the gate counts only the earlier records actually kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gradeff.axes.models import MODELS
from gradeff.pytest.options import SETTINGS, run_config
from gradeff.records.fingerprint import differences
from gradeff.records.results import FINAL_STATUSES, record_section
from gradeff.records.safe_text import one_line
from gradeff.records.store import read_records

# The modules that build, train and meter a cell (gradeff.cell, .data.dataset, .meters, .strategies) import torch
# (2.3 s); the plugin loads this module in every pytest session, so the functions that need them import them
# (noqa: PLC0415 - torch).

__all__ = ["RERUN", "REUSED", "Earlier", "Judgement", "candidates", "judge", "kept_runs", "note"]

# The keys a cell's judgement leaves in its test's user_properties (they travel in pytest-xdist's reports).
REUSED = "gradeff_resume_reused"
RERUN = "gradeff_resume_rerun"


@dataclass(frozen=True, slots=True)
class Earlier:
    """A cell's final record in the results file: its status and experiment section (fingerprint and inputs)."""

    status: str
    experiment: Mapping = field(default_factory=dict)


def candidates(path: Path, *, profile: str, seeds: tuple[int, ...]) -> dict[tuple[str, int], Earlier]:
    """The results file's last final record of each ``(cell id, seed)`` of this profile and these seeds: what a cell
    of this session may keep if its experiment is the same (an unreadable line is left out, as is any record of a
    model this session does not know)."""
    if not path.exists():
        return {}
    found = {}
    for record in read_records(path, errors=[]):
        if record.model in MODELS and record.profile == profile and record.seed in seeds:
            key = (record.cell, record.seed)
            if record.status in FINAL_STATUSES:
                found[key] = Earlier(record.status, dict(record_section(record, "experiment")))
            else:
                found.pop(key, None)  # a later error or interruption: the cell has no final record to keep
    return found


@dataclass(frozen=True, slots=True)
class Judgement:
    """Whether a cell keeps its earlier record, and what differs where it does not (``[]`` when it does)."""

    reuse: bool
    status: str = ""
    differs: tuple[str, ...] = ()
    fingerprint: str | None = None


_JUDGED = pytest.StashKey[dict[tuple[str, int], Judgement]]()


def judge(config: pytest.Config, cell, seed: int) -> Judgement | None:
    """Whether ``cell`` with ``seed`` keeps its earlier record in this session (``None``: no candidate, or not
    resuming), judged once per process: the fixtures ask before they build the cell, the cell's run again.

    Args:
        config: the session's configuration (its settings and options).
        cell: the :class:`~gradeff.studies.grid.Cell`.
        seed: the seed it runs with.
    """
    settings = config.stash[SETTINGS]
    earlier = settings.settled.get((cell.id, seed))
    if earlier is None:
        return None
    judged = config.stash.setdefault(_JUDGED, {})
    if (cell.id, seed) not in judged:
        from gradeff.cell.experiment import experiment  # noqa: PLC0415 - torch, see the imports

        now = experiment(cell, run_config(config, seed))
        differs = tuple(differences(earlier.experiment, now)) if now.get("fingerprint") else (
            f"this session cannot say which experiment it would run ({now.get('error')})",)
        judged[(cell.id, seed)] = Judgement(reuse=not differs, status=earlier.status, differs=differs,
                                            fingerprint=now.get("fingerprint"))
    return judged[(cell.id, seed)]


def note(item: pytest.Item, cell_id: str, seed: int, judgement: Judgement) -> None:
    """Leave the judgement on the test's report: the cell and seed kept, or why it is re-run."""
    if judgement.reuse:
        item.user_properties.append((REUSED, [cell_id, seed]))
    else:
        item.user_properties.append((RERUN, f"{cell_id} (seed {seed}): {'; '.join(judgement.differs)}"))


_KEPT = pytest.StashKey[set[tuple[str, int]]]()


def kept_runs(config: pytest.Config) -> set[tuple[str, int]]:
    """The ``(cell id, seed)`` pairs whose earlier record this session kept (read from the tests' reports)."""
    return config.stash.get(_KEPT, set())


class _Notes:
    """Gathers the judgements from every test's report (on pytest-xdist's controller, the workers') and prints the
    re-run cells at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.reruns: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in getattr(report, "user_properties", ()):
            if key == REUSED:
                self.config.stash.setdefault(_KEPT, set()).add((value[0], int(value[1])))
            elif key == RERUN and value not in self.reruns:
                self.reruns.append(value)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        """One line per cell --gradeff-resume re-ran instead of keeping its earlier record, naming what differs."""
        if not self.reruns:
            return
        terminalreporter.section(f"gradeff --gradeff-resume: {len(self.reruns)} cell(s) re-run, their records not "
                                 "kept")
        for line in self.reruns:
            terminalreporter.write_line(one_line(f"re-run {line}"))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Notes(config), "gradeff-resume-notes")
