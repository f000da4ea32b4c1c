"""The Answer in brief: the cell to use and why, then which questions are decided and which are still open.

What a reader acts on, in the words the terminal prints and the report's Answer opens with: the choice, each
question's leader (and, for an open one, the seeds that would decide it), the lead over the trivial baseline and
the notes. Lists of cells longer than ``named`` names are counted instead. Every verdict in full (intervals, the
smallest detectable difference, every cell named) is :func:`gradeff.analysis.answer.verdict_text`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gradeff.analysis.answer import AnswerLine, trivial_text
from gradeff.analysis.choice import Choice
from gradeff.analysis.metrics import ANSWER_OBJECTIVES
from gradeff.analysis.pairing import EQUIVALENT, IDENTICAL, OPEN, WINNER
from gradeff.analysis.verdicts import ESTIMATE_FOLLOWS_TIME, Verdict
from gradeff.records.formatting import NA, format_value

__all__ = ["key_line", "names", "state_phrase", "use_phrase"]

_QUESTION = {"speed": "speed", "memory": "memory", "energy": "energy"}
_CHOICE_WORDS = {"quality": "quality", "speed": "time to target", "memory": "memory"}


def key_line(lines: Sequence[AnswerLine]) -> str:
    """How to read the models' lines, in one line: only the signs and words they use."""
    parts = ["use: best quality, then speed, then memory"]
    outcomes = {verdict.ranking.outcome for line in lines for verdict in line.verdicts.values()
                if verdict.ranking is not None}
    if WINNER in outcomes:
        parts.append("winner: ahead of all (paired, Holm)")
    if EQUIVALENT in outcomes:
        parts.append("≈: within margin")
    if OPEN in outcomes:
        parts.append("open: not yet separated")
    if any(len(verdict.ranking.identical) > 1 for line in lines for verdict in line.verdicts.values()
           if verdict.ranking is not None):
        parts.append("≡: same numbers on every seed")
    return "; ".join(parts)


def names(cells: Sequence[str], labels: Mapping[str, str], named: int | None) -> str:
    """The cells' labels, or the first ``named`` of them and how many more."""
    names = [labels.get(cell, cell) for cell in cells]
    if named is None or len(names) <= named:
        return ", ".join(names)
    if named <= 1:
        return f"{len(names)} cells"
    return f"{', '.join(names[:named - 1])} and {len(names) - named + 1} others"


def use_phrase(line: AnswerLine, named: int | None) -> str:
    """``use adamw for now: quality open against 5 cells``: the choice and why (the seeds that would decide an open
    question are in :func:`state_phrase`); ``named``: how many cells a list names before it counts the rest."""
    choice: Choice = line.choice
    if choice.cell is None:
        return f"{NA}: {choice.reason}"
    reasons = []
    for step in choice.steps:
        ranking, word = step.verdict.ranking, _CHOICE_WORDS.get(step.question, step.question)
        if ranking.outcome == WINNER:
            reasons.append(f"best {word}")
        elif ranking.outcome == OPEN:
            against = [cell for group in ranking.open for cell in group]
            reasons.append(f"{word} open against {names(against, line.labels, named)}")
        else:
            others = [cell for cell in ranking.settled if cell != choice.cell]
            sign = "≡" if ranking.outcome == IDENTICAL else "≈"
            reasons.append(f"{word} {sign} {names(others, line.labels, named)}" if others else f"{word} settled")
    if len(choice.steps) and choice.decided and len(choice.steps[-1].remaining) > 1:
        reasons.append("any of those will do")
    label = line.labels.get(choice.cell, choice.cell)
    # A best cell that learned less than its task's trivial baseline is said first of all (the report's words).
    flag = f" — its best cell {trivial_text(line)}" if line.flagged else ""
    return (f"use {label}{'' if choice.decided else ' for now'}: "
            + ("; ".join(reasons) or "the only cell") + flag)


def _leader(verdict: Verdict, labels: Mapping[str, str]) -> str:
    """``adam ≡ adamw 2.549``: the best cell (with those identical to it) and its mean."""
    ranking, metric = verdict.ranking, verdict.metric
    mean = verdict.runs[ranking.best].interval(metric)
    value = format_value(mean.mean, metric.unit) if mean is not None else NA
    names = [labels.get(cell, cell) for cell in ranking.identical]
    same = " ≡ ".join(names) if len(names) <= 2 else f"{names[0]} ≡ {len(names) - 1} others"
    return f"{same} {value}"


def _undecided(n: int, needed: int | None) -> str:
    if n < 2:
        return "n=1: one seed cannot be tested"
    if needed is not None and needed > n:
        return f"n={n}: about {needed} seeds would decide it"
    return f"n={n}: more seeds than the spread can tell"


def state_phrase(line: AnswerLine, named: int | None, *, notes: bool = True) -> str:
    """``decided: speed winner adagrad 702 ms · open (n=1: ...): test loss adamw 2.549, memory sgd 11.5 MiB``."""
    decided, open_by_why, other = [], {}, []
    for objective in ANSWER_OBJECTIVES:
        verdict = line.verdicts[objective]
        ranking, metric = verdict.ranking, verdict.metric
        question = metric.label.lower() if objective == "quality" and metric is not None else _QUESTION.get(
            objective, objective)
        if verdict.reason == ESTIMATE_FOLLOWS_TIME:
            other.append(f"{question} follows time")
        elif ranking is None or metric is None:
            other.append(f"{question} {NA}")
        elif ranking.outcome == OPEN:
            open_by_why.setdefault(_undecided(ranking.n, ranking.seeds_needed), []).append(
                f"{question} {_leader(verdict, line.labels)}")
        elif ranking.outcome == WINNER:
            decided.append(f"{question} winner {_leader(verdict, line.labels)}")
        elif ranking.outcome == IDENTICAL:
            decided.append(f"{question} all identical ({_leader(verdict, line.labels)})")
        else:
            same = [cell for group in ranking.equivalent for cell in group]
            decided.append(f"{question} {_leader(verdict, line.labels)} ≈ {names(same, line.labels, named)}")
    parts = [f"decided: {', '.join(decided)}"] if decided else []
    parts += [f"open ({why}): {', '.join(items)}" for why, items in open_by_why.items()]
    parts += other
    if line.trivial is not None and not line.flagged:
        parts.append(trivial_text(line))
    parts += list(line.notes) if notes else []
    return " · ".join(parts)
