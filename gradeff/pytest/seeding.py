"""``--gradeff-seeds auto`` in a pytest session: which further seed of a cell runs, and why.

The grid is parametrized over every seed the plan may use (``first`` to ``most``), ordered round by round
(:func:`by_round`): every cell's first seeds, then every cell's next seed, and so on. A cell's seed past the first
ones is decided when its test starts (:meth:`Seeding.decide`, from ``pytest_runtest_setup``, before any of its
fixtures is built): it runs only if the cell is still in contention for its group's Answer
(:func:`gradeff.analysis.sequential.contention`) on the records of the earlier seeds, and the record it leaves says
why it ran; otherwise it is skipped with the reason. Cells out of contention are never run again.

Under pytest-xdist the workers share what the decision needs through files beside the results file: the records
themselves, and a ledger of the seeds skipped. A decision waits until every earlier seed of its group has either
left a record or been skipped (the items run round by round, and xdist hands them out in that order, so what a
decision waits for is always already running or done).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gradeff.analysis.answer import AnswerOptions
from gradeff.analysis.scope import STUDIES, study_of_grid
from gradeff.analysis.sequential import SeedPlan, contention
from gradeff.records.results import CellRecord
from gradeff.records.store import read_records

__all__ = ["SEED_WHY", "WAIT_SECONDS", "Seeding", "by_round", "group_key"]

# Why an item's further seed runs: decided when its test starts (pytest_runtest_setup), recorded with its cell.
SEED_WHY = pytest.StashKey[str]()

# How long a decision waits for the earlier seeds of its group before deciding on what is there (a worker that died
# mid-cell leaves neither a record nor a skip behind).
WAIT_SECONDS = 3600.0
_POLL_SECONDS = 0.2


def _cell_and_seed(item: pytest.Item, default_seed: int):
    callspec = getattr(item, "callspec", None)
    if callspec is None or "cell" not in callspec.params:
        return None, None
    return callspec.params["cell"], callspec.params.get("gradeff_seed", default_seed)


def group_key(grid: str, model: str, dataset: str | None) -> tuple[str, str, str]:
    """The Answer's group of a cell: its study, its model and its dataset (``""``: the model's own task)."""
    return study_of_grid(grid), model, dataset or ""


def by_round(items: Sequence[pytest.Item], seeds: Sequence[int]) -> list[pytest.Item]:
    """The items ordered by their seed's place in ``seeds`` (stable: the order within a round is kept)."""
    place = {seed: index for index, seed in enumerate(seeds)}

    def round_of(item):
        _, seed = _cell_and_seed(item, seeds[0])
        return place.get(seed, 0)

    return sorted(items, key=round_of)


@dataclass
class Seeding:
    """The adaptive plan of one session, in one process (the controller's or a worker's).

    Attributes:
        plan: the plan.
        seeds: the session's seeds, first to most.
        results: the results file the session's records go to.
        session: the session's id (records of other sessions in the file are not this run's).
        options: the Answer's margins and order (the same the final Answer uses).
        budget: seconds after the session's start past which no further seed starts (``None``: no budget).
        started: the session's start (``time.time()``).
        settled: records an earlier session left for ``--gradeff-resume`` to skip: they count as this run's.
    """

    plan: SeedPlan
    seeds: tuple[int, ...]
    results: Path
    session: str
    options: AnswerOptions = AnswerOptions()
    budget: float | None = None
    started: float = field(default_factory=time.time)
    settled: frozenset[tuple[str, int]] = frozenset()
    _expected: dict[tuple, list[tuple[str, int]]] = field(default_factory=dict)
    _records: dict[tuple[str, int], CellRecord] = field(default_factory=dict)

    @property
    def ledger(self) -> Path:
        """The file the session's skipped seeds are listed in, beside the results file."""
        return self.results.with_name(f".{self.results.name}.seeding-{self.session}.jsonl")

    def collected(self, items: Iterable[pytest.Item]) -> None:
        """Learn the session's cells and seeds (every process collects the same items)."""
        self._expected.clear()
        for item in items:
            cell, seed = _cell_and_seed(item, self.seeds[0])
            if cell is not None:
                self._expected.setdefault(group_key(cell.grid, cell.model, cell.dataset), []).append((cell.id, seed))

    def round_of(self, seed: int) -> int:
        return self.seeds.index(seed) if seed in self.seeds else 0

    def decide(self, item: pytest.Item) -> str:
        """Whether ``item`` runs: ``""`` for a first seed, the reason for a further seed in contention; a further
        seed out of contention (or past the budget) is skipped (``pytest.skip``) with its reason."""
        cell, seed = _cell_and_seed(item, self.seeds[0])
        if cell is None:
            return ""
        rank = self.round_of(seed)
        if rank < self.plan.first:
            return ""
        key = group_key(cell.grid, cell.model, cell.dataset)
        if not STUDIES[key[0]].answers:  # other studies' grids run their first seeds only
            self._skip(cell.id, seed, f"the {cell.grid} grid answers no question a further seed could decide")
        if self.budget is not None and time.time() - self.started > self.budget:
            self._skip(cell.id, seed, f"the seed budget of {self.budget:g} s is spent: what is still open stays open")
        earlier = [(c, s) for c, s in self._expected.get(key, []) if self.round_of(s) < rank]
        records = self._wait_for(earlier)
        dropped = {c for c, s in self._skipped() if self.plan.first <= self.round_of(s) < rank}
        if cell.id in dropped:
            self._skip(cell.id, seed, "out of contention at an earlier look: a cell left behind is not run again")
        why = contention(records, self.plan, margins=self.options.margins, questions=self.options.prefer)
        if cell.id not in why:
            decided = "every question decided" if not why else "out of contention"
            self._skip(cell.id, seed, f"{decided} after {rank} seeds of {cell.model}: another seed would not change "
                                      "the Answer")
        return f"seed {rank + 1}: {why[cell.id]}"

    def _skip(self, cell: str, seed: int, reason: str) -> None:
        with open(self.ledger, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"cell": cell, "seed": seed, "reason": reason}) + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        pytest.skip(f"--gradeff-seeds auto: {reason}")

    def _skipped(self) -> set[tuple[str, int]]:
        try:
            lines = self.ledger.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return set()
        found = set()
        for line in lines:
            try:
                entry = json.loads(line)
                found.add((entry["cell"], entry["seed"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line being written by another worker: read again on the next poll
        return found

    def _read(self) -> None:
        if not self.results.exists():
            return
        # Unreadable lines (one another worker is appending right now) are passed over and read on the next poll.
        for record in read_records(self.results, errors=[]):
            if record.session == self.session or (record.cell, record.seed) in self.settled:
                self._records[(record.cell, record.seed)] = record

    def _wait_for(self, earlier: list[tuple[str, int]]) -> list[CellRecord]:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            self._read()
            missing = [pair for pair in earlier if pair not in self._records and pair not in self._skipped()]
            if not missing or time.monotonic() > deadline:
                return [self._records[pair] for pair in earlier if pair in self._records]
            time.sleep(_POLL_SECONDS)
