"""The "use this" line: the one cell a practitioner would pick from a group, and why.

The choice is lexicographic, as a practitioner makes it: the best quality; among the cells equivalent on quality
(within its margin, :mod:`gradeff.analysis.margins`), the fastest to target; among those equivalent on time, the
least memory. Each question is asked again of the cells still in the running (a cell's speed only matters among
cells of equivalent quality). A question decided by a winner ends the choice; one whose leaders are equivalent
passes them on; one still open passes on only its leader and the cells identical or equivalent to it (the open
ones may yet prove worse, so a later question must not pick one of them over the leader: memory never outranks a
quality nobody has separated), and the line says that the choice rests on an open question and how many seeds
would decide it. ``--gradeff-prefer`` changes the order of the questions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gradeff.analysis.margins import Margin
from gradeff.analysis.pairing import EQUIVALENT, IDENTICAL, OPEN, WINNER, paired_ratio
from gradeff.analysis.runs import CellRuns
from gradeff.analysis.verdicts import Verdict, verdict

__all__ = ["CHOICE_QUESTIONS", "Choice", "Step", "choose", "parse_prefer"]

# The questions a choice weighs, in the default order.
CHOICE_QUESTIONS = ("quality", "speed", "memory")
_WORDS = {"quality": "quality", "speed": "time to target", "memory": "memory"}


@dataclass(frozen=True, slots=True)
class Step:
    """One question of a choice: the verdict among the cells still in the running, and what it left."""

    question: str
    verdict: Verdict
    remaining: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Choice:
    """The cell to use and why.

    Attributes:
        cell: the chosen cell's id (``None``: no cell ended ok).
        reason: why, in words (``quality equivalent to adam/standard (±1 %), 18 % faster to target ...``).
        decided: every question the choice rests on was decided (a winner, or shown equivalent); ``False``
            where an open question leaves the choice provisional.
        steps: the questions asked, in order.
        seeds_needed: for a provisional choice, the seeds the open question's spread says would decide it.
    """

    cell: str | None
    reason: str
    decided: bool
    steps: tuple[Step, ...] = ()
    seeds_needed: int | None = None


def parse_prefer(text: str) -> tuple[str, ...]:
    """``--gradeff-prefer`` (``time,quality``): the questions' order; unnamed ones follow in the default order.

    Raises:
        ValueError: an unknown or repeated question, naming the valid ones.
    """
    aliases = {"time": "speed", "speed": "speed", "quality": "quality", "memory": "memory"}
    named = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in named if part not in aliases]
    if unknown:
        raise ValueError(f"unknown question(s) {', '.join(unknown)}; valid: quality, time, memory")
    order = [aliases[part] for part in named]
    if len(set(order)) != len(order):
        raise ValueError(f"{text!r} names a question twice")
    return tuple(order) + tuple(q for q in CHOICE_QUESTIONS if q not in order)


def _speed_gain(chosen: CellRuns, other: CellRuns) -> str:
    """``18 % faster to target (95 % CI 9–27 %)`` of ``chosen`` against ``other``, paired by seed."""
    ratio = paired_ratio(chosen.values("seconds_to_target"), other.values("seconds_to_target"))
    if ratio is None:
        return ""
    spread = ratio.interval
    text = f"{100 * (1 - spread.mean):.0f} % faster to target"
    if spread.n > 1:
        text += f" (95 % CI {100 * (1 - spread.high):.0f}–{100 * (1 - spread.low):.0f} %)"
    return text


def _names(cells: Sequence[str], labels: Mapping[str, str]) -> str:
    return ", ".join(labels.get(cell, cell) for cell in cells)


def choose(runs: Mapping[str, CellRuns], labels: Mapping[str, str], *, level: float = 0.05,
           margins: Mapping[str, Margin] | None = None,
           prefer: Sequence[str] = CHOICE_QUESTIONS) -> Choice:
    """The cell of ``runs`` (one group over its seeds) a practitioner would use, with its reason.

    Args:
        runs: the group's cells over their seeds, in canonical order.
        labels: cell id → its label in the line (``adam/standard``).
        level: the tests' significance level (a sequential plan's per-look level).
        margins: question → margin, overriding the defaults.
        prefer: the questions in the order they are weighed.
    """
    remaining = tuple(cell for cell, cell_runs in runs.items() if cell_runs.ok)
    if not remaining:
        return Choice(cell=None, reason="no cell ended ok", decided=False)
    steps: list[Step] = []
    for question in prefer:
        found = verdict({cell: runs[cell] for cell in remaining}, question, level=level, margins=margins)
        ranking = found.ranking
        if ranking is None:
            continue  # not measured here (no target, no memory figure): it cannot weigh in the choice
        remaining = (ranking.best,) if ranking.outcome == WINNER else ranking.settled
        steps.append(Step(question, found, tuple(remaining)))
        if len(remaining) == 1:
            break  # a winner, or an open question's leader alone: no later question has a choice to make
    chosen = remaining[0]
    reasons, decided, needed = [], True, None
    for step in steps:
        ranking = step.verdict.ranking
        word = _WORDS[step.question]
        if ranking.outcome == WINNER:
            others = [c for group in ranking.worse for c in group]
            gain = _speed_gain(runs[chosen], runs[others[0]]) if step.question == "speed" and others else ""
            reasons.append(f"{gain} than {labels.get(others[0], others[0])}" if gain else
                           f"best {word}" + (f", ahead of {_names(others, labels)}" if others else ""))
        elif ranking.outcome == OPEN:
            decided, needed = False, ranking.seeds_needed
            against = [c for group in ranking.open for c in group]
            reasons.append(f"{word} open against {_names(against, labels)}"
                           + (f" (about {needed} seeds would decide it)" if needed else " (more seeds needed)"))
        else:
            others = [c for c in ranking.settled if c != chosen]
            relation = "identical to" if ranking.outcome == IDENTICAL else "equivalent to"
            margin = step.verdict.margin.text if step.verdict.margin is not None else ""
            reasons.append(f"{word} {relation} {_names(others, labels)}"
                           + (f" ({margin})" if ranking.outcome == EQUIVALENT and margin else ""))
    if len(remaining) > 1 and decided:
        reasons.append(f"any of {_names(remaining, labels)} will do")
    return Choice(cell=chosen, reason="; ".join(reasons) or "the only cell", decided=decided, steps=tuple(steps),
                  seeds_needed=needed)
