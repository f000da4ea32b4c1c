"""Seeds spent where the answer is still open: a sequential plan that keeps its error rate.

``--gradeff-seeds auto`` runs every cell with the plan's ``first`` seeds, then looks at each group: a cell still in
contention for a question gets one more seed, look after look, until every question is decided (a winner, or the
contenders shown equivalent), the plan's ``most`` seeds, or the wall-clock budget. Cells out of contention are never
run again.

Looking at the data after every seed and stopping when a test rejects would inflate the error rate if every look
tested at 5 %. The plan fixes its looks up front — ``first``, ``first + 1``, …, ``most`` seeds: ``K`` of them — and
spends the level evenly over them: every test at every look is made at ``level / K`` (Bonferroni's alpha spending).
The chance that any look names a wrong winner, or a wrong equivalence, is then at most the sum over the looks, the
level itself (``tests/analysis/test_sequential.py`` measures the false-winner rate on simulated equal cells). The
final Answer reads the plan from the records and tests at the same per-look level, so it says what the looks said.

Contention follows the choice a practitioner makes (:mod:`gradeff.analysis.choice`): on quality, the best and the
cells still open against it; on time to target and then memory, the same among the cells not worse on the questions
before. A seed that cannot change the "use this" line is not spent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gradeff.analysis.choice import CHOICE_QUESTIONS
from gradeff.analysis.margins import Margin
from gradeff.analysis.pairing import OPEN
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.analysis.verdicts import verdict
from gradeff.records.results import CellRecord, record_field

__all__ = ["DEFAULT_FIRST", "DEFAULT_MOST", "SeedPlan", "contention", "plan_of"]

DEFAULT_FIRST, DEFAULT_MOST = 2, 5


@dataclass(frozen=True, slots=True)
class SeedPlan:
    """How many seeds a run spends, and at which level each look tests.

    Attributes:
        first: the seeds every cell runs with.
        most: the most seeds any cell runs with (``first`` for a fixed plan: one look).
        level: the family-wise significance level over all looks.
        adaptive: whether seeds past ``first`` go only to cells in contention.
    """

    first: int = DEFAULT_FIRST
    most: int = DEFAULT_MOST
    level: float = 0.05
    adaptive: bool = True

    def __post_init__(self):
        if not 1 <= self.first <= self.most:
            raise ValueError(f"a seed plan needs 1 <= first <= most, got first={self.first}, most={self.most}")

    @property
    def looks(self) -> int:
        """How many times the data are looked at: after ``first`` seeds and after each extra one."""
        return self.most - self.first + 1 if self.adaptive else 1

    @property
    def look_level(self) -> float:
        """The level every test is made at, so that all looks together keep :attr:`level`."""
        return self.level / self.looks

    def to_record(self, why: str = "") -> dict:
        """The record's ``seeding`` section: the plan and why this seed ran."""
        return {"plan": "auto" if self.adaptive else "fixed", "first": self.first, "most": self.most,
                "level": self.level, "why": why}


def plan_of(records: Iterable[CellRecord]) -> SeedPlan:
    """The plan a group of records was run under: the widest adaptive plan any of them names, else a fixed one
    of as many seeds as they hold (records written before plans were recorded read as fixed)."""
    records = list(records)
    adaptive = [(int(first), int(most)) for r in records
                if record_field(r, "seeding", "plan") == "auto"
                and isinstance(first := record_field(r, "seeding", "first"), int)
                and isinstance(most := record_field(r, "seeding", "most"), int)]
    if adaptive:
        return SeedPlan(first=min(f for f, _ in adaptive), most=max(m for _, m in adaptive))
    seeds = max((len({r.seed for r in records if r.cell == cell}) for cell in {r.cell for r in records}), default=1)
    return SeedPlan(first=max(seeds, 1), most=max(seeds, 1), adaptive=False)


def contention(records: Iterable[CellRecord], plan: SeedPlan, *, margins: Mapping[str, Margin] | None = None,
               questions: Sequence[str] = CHOICE_QUESTIONS) -> dict[str, str]:
    """The cells of one group that another seed could still move, each with why (``quality open against ...``).

    Args:
        records: the group's records so far (every seed run).
        plan: the run's plan (its per-look level is the level of every test).
        margins: question → margin, overriding the defaults.
        questions: the questions in the order the choice weighs them.

    Returns:
        cell id → the first question it is in contention for, in words; empty when the group is decided.
    """
    runs = by_cell(records)
    running: Mapping[str, CellRuns] = {cell: r for cell, r in runs.items() if r.ok}
    reasons: dict[str, str] = {}
    for question in questions:
        if len(running) < 2:
            break
        found = verdict(running, question, level=plan.look_level, margins=margins)
        ranking = found.ranking
        if ranking is None:
            continue
        if ranking.outcome == OPEN:
            contenders = ranking.members
            against = ", ".join(c for group in ranking.open for c in group)
            for cell in contenders:
                reasons.setdefault(cell, f"{question} open ({ranking.best} against {against})")
        # The next question is asked among the cells not worse on this one.
        keep = set(ranking.members)
        running = {cell: r for cell, r in running.items() if cell in keep}
    return reasons
