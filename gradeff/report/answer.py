"""The report's first section, the Answer, and the real-data grid's own section.

The Answer is :func:`gradeff.analysis.answer.answer`, the function whose lines end the terminal summary:
per study that answers (the main study, the PEFT study, the real-data grid), a table with a row per model
(or backbone and dataset) and a column per question, each cell the verdict's words
(:func:`gradeff.analysis.answer.verdict_text`), and the same lines as the terminal prints them. A column beside
the quality verdict sets the best cell against its task's strongest trivial baseline (:mod:`gradeff.analysis.trivial`),
marked where the best cell does not beat it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gradeff.analysis import scope
from gradeff.analysis.answer import AnswerLine, AnswerOptions, answer, line_text, trivial_text, use_text, verdict_text
from gradeff.analysis.answer_brief import key_line, state_phrase, use_phrase
from gradeff.analysis.metrics import ANSWER_OBJECTIVES, METRICS, OBJECTIVE_TITLES
from gradeff.analysis.pairing import EQUIVALENT, OPEN
from gradeff.analysis.runs import by_cell
from gradeff.records.results import CellRecord
from gradeff.report.table_cells import places, resolve, runs_cell
from gradeff.report.view import AnswerGroupView, AnswerView, Cell, RealView, Row, Table, html_id

__all__ = ["ANSWER_MISSING_NOTE", "ANSWER_RULES", "REAL_MISSING_NOTE", "build_answer_view", "build_real_view"]

ANSWER_MISSING_NOTE = "No records of a study that answers 'what should I use' (main, PEFT or real data)."
REAL_MISSING_NOTE = "No records of the real-data grid (-m real) in these results."
ANSWER_RULES = (
    "Per model (main study, real data) or backbone and dataset (PEFT study), the cell to use for each question: "
    "quality is the test split's loss (top-1 accuracy for a classifier, micro-F1 for multi-label); speed and "
    "energy are the seconds and joules until the test loss first reached the target, halfway from the untrained "
    "model's to the task's floor (a cell that missed it on a seed does not compete); memory is the live-tensor "
    "peak of a training step. Only seeds that ended ok count. Each cell is compared with the best seed by seed: "
    "a winner is separated from every other cell (paired t-test, Holm-adjusted); equivalent cells lie within "
    "the question's practical margin of the best with 95 % confidence (two one-sided tests); anything else is "
    "open, with the seeds the observed spread says would decide it (one seed is always open). Identical cells "
    "(the same numbers on every seed, e.g. checkpointing against standard) are one entry. An energy estimate "
    "(CPU time × a fixed power) follows time and names no winner of its own. 'Use this' picks the best "
    "quality, then among equivalent cells the fastest to target, then the least memory. Each study reads its "
    "own cells only. 'Best trivial' sets the best-quality cell against the strongest baseline that learns nothing "
    "on the same test split and metric (count models for text, pixel 1-NN and a logistic regression on pixels for "
    "images); a best cell that does not beat it is flagged, in its 'use this' text too.")
_REAL_METRICS = ("quality", "final_loss", "seconds_to_target", "epoch_seconds", "peak", "energy")


# "against a; b; c; ..." (or "a, b, c"): the cells a verdict was held against. On a grid of 18 cells that list made
# the Answer's table four screens tall; the page names how many, and the cell's tooltip keeps every name.
_AGAINST = re.compile(r"against ((?:[^;,()]+?(?: \(identical\))?[;,] ){3,}[^;,()]+?(?: \(identical\))?)(?= \(|;|$)")
_ITEM = re.compile(r"[;,] ")


def _brief(text: str, css: str, sub: str = "") -> Cell:
    """A verdict's cell: a list of more than three cells held against is counted, the full text in the tooltip."""
    short = _AGAINST.sub(lambda m: f"against {len(_ITEM.split(m.group(1)))} other cells", text)
    return Cell(text=short, sub=sub, css=css, title=text if short != text else "")


def _row(line: AnswerLine) -> Row:
    cells = []
    for objective in ANSWER_OBJECTIVES:
        found = line.verdicts[objective]
        if found.ranking is None:
            cells.append(Cell(text=verdict_text(found, line.labels), css="na text"))
            continue
        outcome = found.ranking.outcome
        css = "text" + (" open" if outcome == OPEN else " equivalent" if outcome == EQUIVALENT else " best")
        cells.append(_brief(verdict_text(found, line.labels), css, sub=found.metric.label))
    use = _brief(use_text(line), "text " + ("flag" if line.flagged else "best" if line.choice.decided else "open"))
    return Row(label=f"{line.subject}", cells=(Cell(text=line.title, css="text"), use, cells[0], _trivial_cell(line),
                                               *cells[1:], Cell(text="; ".join(line.notes) or "", css="text")))


def _trivial_cell(line: AnswerLine) -> Cell:
    """The best cell against the strongest trivial baseline: flagged where it does not beat it; n/a where the records
    carry none."""
    if line.trivial is None:
        return Cell(text="n/a: no trivial baseline in these records", css="na text")
    return Cell(text=trivial_text(line), css="text flag" if line.flagged else "text")


# Cells a brief list names before it counts the rest: the brief is what a reader acts on; the full table names all.
_BRIEF_NAMED = 1


def _brief_table(study: str, index: int, lines: Sequence[AnswerLine]) -> Table:
    """The study's Answer in brief, as the terminal words it: a row per model with the cell to use and why, then
    what is decided and what is still open (the seeds that would decide it). The notes are the full table's."""
    rows = tuple(Row(label=line.subject, cells=(
        # What ran is the tooltip here, and a column of the full table and the figures' headings.
        Cell(text=use_phrase(line, _BRIEF_NAMED), title=line.title,
             css="text " + ("flag" if line.flagged else "best" if line.choice.decided else "open")),
        Cell(text=state_phrase(line, _BRIEF_NAMED, notes=False), css="text"))) for line in lines)
    return Table(id=html_id(study, index, prefix="brief-"), caption=scope.STUDIES[study].title,
                 header=("subject", "use this", "decided and open"), rows=rows, note=key_line(lines))


def build_answer_view(records: Sequence[CellRecord], options: AnswerOptions | None = None) -> AnswerView:
    """The Answer section from every record of the report (each study's lines read its own records)."""
    lines = answer(records, options)
    groups = []
    for index, study in enumerate(dict.fromkeys(line.study for line in lines)):
        mine = [line for line in lines if line.study == study]
        table = Table(id=html_id(study, index, prefix="answer-"), caption=scope.STUDIES[study].title,
                      header=("subject", "what ran", "use this", OBJECTIVE_TITLES[ANSWER_OBJECTIVES[0]],
                              "best trivial", *(OBJECTIVE_TITLES[o] for o in ANSWER_OBJECTIVES[1:]), "note"),
                      rows=tuple(_row(line) for line in mine))
        groups.append(AnswerGroupView(id=f"answer-{study}", title=scope.STUDIES[study].title,
                                      brief=_brief_table(study, index, mine), table=table,
                                      lines=tuple(line_text(line) for line in mine)))
    return AnswerView(groups=tuple(groups), missing_note="" if groups else ANSWER_MISSING_NOTE, rules=ANSWER_RULES)


def build_real_view(records: Sequence[CellRecord]) -> RealView:
    """The real-data grid's section: per model and dataset, every cell over its seeds (its records only)."""
    if not records:
        return RealView(missing_note=REAL_MISSING_NOTE, tables=())
    groups: dict[tuple[str, str], list[CellRecord]] = {}
    for record in records:
        groups.setdefault((record.model, record.dataset), []).append(record)
    tables = []
    for index, ((model, dataset), group) in enumerate(groups.items()):
        runs = by_cell(group)
        metrics = [resolve(key, group) for key in _REAL_METRICS]
        ranked = {metric.key: places(runs, metric) for metric in metrics}
        rows = tuple(Row(label=cell, cells=tuple(runs_cell(cell_runs, metric, ranked[metric.key].get(cell, ""))
                                                 for metric in metrics))
                     for cell, cell_runs in runs.items())
        tables.append(Table(
            id=html_id(f"{model}-{dataset}", index, prefix="real-"), caption=f"{model} on {dataset}",
            header=("cell", *(m.label for m in metrics)), rows=rows,
            note="Real data has no known loss floor; quality is the dataset's own test split. Mean over the seeds "
                 "that ended ok; highlighted: the first place over seeds (paired, Holm, 5 %)."
                 + (f" {METRICS['seconds_to_target'].label}: n/a where the target is unknown (no floor)." if all(
                     r.summary.target_loss is None for r in group) else "")))
    return RealView(missing_note="", tables=tuple(tables))
