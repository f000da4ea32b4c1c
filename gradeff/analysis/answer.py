"""The Answer: which configuration to use, per model (main study) or backbone × dataset (PEFT study), and how sure.

:func:`answer` is the one function that turns records into verdict lines; the terminal summary prints
:func:`line_text` of each, and the report's first section shows the same lines. A line opens with the cell to
use and why (:mod:`gradeff.analysis.choice`), then holds one :class:`~gradeff.analysis.verdicts.Verdict` per
question (quality, speed, memory, energy), each in one of three words: the **winner** with its mean, 95 % interval
and number of seeds; the cells shown **equivalent** to the best within the question's margin; or **open**, with
the seeds the observed spread says would decide it. Cells with the same numbers on every seed are merged as
identical. Every verdict states its seeds and the smallest difference they could have detected.

The tests' level comes from the records' seed plan (:func:`gradeff.analysis.sequential.plan_of`): a run that spent
its seeds adaptively is judged at the per-look level its looks were made at.

Each study's lines read its own records only (:mod:`gradeff.analysis.scope`): the main study, the
PEFT study's fine-tuning cells, and the real-data grid each get their own. A name says what ran
(:mod:`gradeff.analysis.naming`). A PEFT line also says whether its winner beats the dataset's raw-pixel
nearest-neighbour sanity baseline, where the records carry one (:func:`sanity_accuracy`).

Every line also sets its best cell beside its task's strongest trivial baseline on the same test split and metric
(:mod:`gradeff.analysis.trivial`: count models for text, pixel 1-NN and a logistic regression on pixels for images):
a line whose best cell does not beat it says so in its "use this" text (``learned less than the bigram count
model``); one that beats it says by how much after its quality verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gradeff.analysis import naming, scope
from gradeff.analysis.choice import CHOICE_QUESTIONS, Choice, choose
from gradeff.analysis.margins import Margin
from gradeff.analysis.metrics import ANSWER_OBJECTIVES, Metric, metric_value
from gradeff.analysis.pairing import EQUIVALENT, IDENTICAL, OPEN, WINNER
from gradeff.analysis.runs import CellRuns, by_cell, canonical
from gradeff.analysis.sequential import SeedPlan, plan_of
from gradeff.analysis.trivial import TrivialCheck, check_text, trivial_check
from gradeff.analysis.verdicts import ESTIMATE_FOLLOWS_TIME, Verdict, verdicts
from gradeff.records.formatting import NA, as_number, format_value
from gradeff.records.results import CellRecord, record_field

__all__ = ["SANITY_METHOD", "AnswerLine", "AnswerOptions", "answer", "cell_label", "line_text",
           "sanity_accuracy", "trivial_text", "use_text", "verdict_text"]

# A record of this method is the raw-pixel 1-nearest-neighbour classifier of its dataset: what a
# fine-tuned model must beat to have learned anything from the backbone.
SANITY_METHOD = "pixel_1nn"
# Within a line, the axes that name a cell, in order (only those that vary within the line are printed).
_LABEL_AXES = ("optimizer", "method", "strategy", "dataset")
_OBJECTIVE_WORDS = {"speed": "fastest to target", "memory": "least memory", "energy": "least energy to target"}


@dataclass(frozen=True, slots=True)
class AnswerOptions:
    """How the Answer decides: the questions' practical-equivalence margins (``--gradeff-margin``) and the order the
    "use this" choice weighs them in (``--gradeff-prefer``)."""

    margins: Mapping[str, Margin] = field(default_factory=dict)
    prefer: tuple[str, ...] = CHOICE_QUESTIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerLine:
    """One group of cells a user chooses between, and the verdicts on it.

    Attributes:
        study: the study's key (:data:`gradeff.analysis.scope.STUDIES`).
        subject: the group's key (``llm``, ``vit_s · cifar100``).
        title: what ran, in words (``ViT-S/16-shaped, pretrained here ... · CIFAR-100-like (synthetic), 100 classes,
            32 px``).
        verdicts: objective → :class:`~gradeff.analysis.verdicts.Verdict`.
        labels: cell id → the cell's label within the line (``adam/standard``).
        choice: the cell to use and why.
        plan: the seed plan the group's records were run under (its per-look level is every test's).
        notes: what else the line must say (a winner that does not beat the sanity baseline).
        trivial: the quality question's best cell against the strongest trivial baseline of its task (``None``:
            the records carry none, or no cell was ranked).
    """

    study: str
    subject: str
    title: str
    verdicts: Mapping[str, Verdict]
    labels: Mapping[str, str]
    choice: Choice
    plan: SeedPlan = SeedPlan(first=1, most=1, adaptive=False)
    notes: tuple[str, ...] = ()
    trivial: TrivialCheck | None = None

    @property
    def quality(self) -> Verdict:
        return self.verdicts["quality"]

    @property
    def flagged(self) -> bool:
        """The best cell does not beat its task's strongest trivial baseline: nothing here learned the task."""
        return self.trivial is not None and not self.trivial.beaten


def cell_label(record: CellRecord, axes: Sequence[str]) -> str:
    """``adam/standard``: the record's values of ``axes``, joined by ``/`` (its cell id without any)."""
    return "/".join(str(getattr(record, axis)) for axis in axes) or record.cell


def _varying(records: Sequence[CellRecord]) -> tuple[str, ...]:
    axes = tuple(axis for axis in _LABEL_AXES if len({getattr(r, axis) for r in records}) > 1)
    return axes or ("strategy",)


def sanity_accuracy(records: Iterable[CellRecord], dataset: str) -> float | None:
    """The raw-pixel nearest-neighbour baseline's test accuracy on ``dataset``, in percent, or ``None``.

    Read from a record of method :data:`SANITY_METHOD` on the dataset (its mean over ok seeds), else from
    a record's ``task["sanity_accuracy"]`` (a fraction) on it.
    """
    records = [r for r in records if r.dataset == dataset]
    values = [v for r in records if r.method == SANITY_METHOD and r.status == "ok"
              if (v := metric_value(r, "heldout_accuracy")) is not None]
    if values:
        return sum(values) / len(values)
    for record in records:
        value = as_number(record_field(record, "task", "sanity_accuracy"))
        if value is not None:
            return 100 * value
    return None


def _groups(records: Sequence[CellRecord]) -> dict[tuple[str, str], list[CellRecord]]:
    groups: dict[tuple[str, str], list[CellRecord]] = {}
    for record in records:
        if record.method != SANITY_METHOD:
            groups.setdefault((record.model, record.dataset), []).append(record)
    return groups


def _sanity_note(line_verdicts: Mapping[str, Verdict], labels: Mapping[str, str], baseline: float | None) -> str:
    quality = line_verdicts["quality"]
    if baseline is None or quality.ranking is None or quality.metric is None or quality.metric.goal != "max":
        return ""
    behind = [labels[cell] for cell in quality.ranking.members
              if (mean := quality.runs[cell].mean(quality.metric)) is not None and mean <= baseline]
    if not behind:
        return ""
    return (f"{', '.join(behind)} do{'es' if len(behind) == 1 else ''} not beat the raw-pixel nearest-neighbour "
            f"baseline ({baseline:.1f} %): fine-tuning learned nothing the pixels did not already hold")


def _elsewhere_note(group: Sequence[CellRecord], same_model: Sequence[CellRecord]) -> str:
    """Which strategies the model ran on another dataset only (a grid runs the strategies that train the standard
    model on its first dataset: :attr:`gradeff.studies.grid.GridSpec.standard_twins_once`), so that the line's
    memory and speed verdicts are read as what they are: a choice among the strategies measured on this dataset."""
    here = {r.strategy for r in group}
    missing = {r.strategy: r.dataset for r in same_model if r.strategy not in here and r.method != SANITY_METHOD}
    if not missing:
        return ""
    where = ", ".join(sorted(set(missing.values())))
    return (f"{', '.join(missing)} ran on {where} only: they change nothing but the time and memory of a step, "
            f"which the {where} line measures")


def answer(records: Iterable[CellRecord], options: AnswerOptions | None = None) -> tuple[AnswerLine, ...]:
    """The verdict lines of every study that answers "what should I use", over every seed.

    Args:
        records: records in any order, any number of seeds (the same set gives the same lines).
        options: the margins and the choice's order (default: :class:`AnswerOptions`'s).

    Returns:
        One line per model and dataset (main study, real data) or backbone and dataset (PEFT study), in
        canonical order.
    """
    options = options or AnswerOptions()
    margins, prefer = options.margins, options.prefer
    kept, _ = canonical(records)
    studies = scope.split(kept)
    lines = []
    for study, study_records in studies.items():
        if not scope.STUDIES[study].answers:
            continue
        groups = _groups(study_records)
        datasets_of: dict[str, set[str]] = {}
        for model, dataset in groups:
            datasets_of.setdefault(model, set()).add(dataset)
        for (model, dataset), group in groups.items():
            axes = _varying(group)
            labels = {r.cell: cell_label(r, axes) for r in group}
            plan = plan_of(group)
            found = verdicts(group, level=plan.look_level, margins=margins)
            chosen = choose(by_cell(group), labels, level=plan.look_level, margins=margins, prefer=prefer)
            subject = model if study == "main" and len(datasets_of[model]) == 1 else f"{model} · {dataset}"
            trivial = trivial_check(found["quality"].best, found["quality"].metric)
            # A flagged line already says that no cell beat the strongest baseline (the pixel 1-NN at best).
            sanity = study == "peft" and not (trivial is not None and not trivial.beaten)
            notes = (_sanity_note(found, labels, sanity_accuracy(study_records, dataset)) if sanity else "",
                     _elsewhere_note(group, [r for r in study_records if r.model == model]))
            lines.append(AnswerLine(study=study, subject=subject, title=naming.group_title(group), verdicts=found,
                                    labels=labels, choice=chosen, plan=plan,
                                    notes=tuple(note for note in notes if note), trivial=trivial))
    return tuple(lines)


def _value_text(metric: Metric, cell_runs: CellRuns) -> str:
    spread = cell_runs.interval(metric)
    if spread is None:
        return NA
    text = format_value(spread.mean, metric.unit)
    if spread.n > 1:
        text += f" ± {format_value(spread.half_width, metric.unit)} (n={spread.n})"
    return text


def _group_text(group: Sequence[str], labels: Mapping[str, str]) -> str:
    names = [labels.get(cell, cell) for cell in group]
    return " ≡ ".join(names) + (" (identical)" if len(names) > 1 else "")


def _power_text(verdict: Verdict) -> str:
    """``n=3, detects ±0.021`` — the seeds a verdict rests on and the smallest difference they could detect."""
    ranking, metric = verdict.ranking, verdict.metric
    nearest = ranking.nearest
    text = f"n={ranking.n}"
    if nearest is not None and nearest.detectable is not None:
        text += f", detects ±{format_value(nearest.detectable, metric.unit)}"
    return text


def verdict_text(verdict: Verdict, labels: Mapping[str, str]) -> str:
    """One verdict in words: the winner, the equivalent set, or open with the seeds that would decide it; or
    ``n/a: why``."""
    ranking, metric = verdict.ranking, verdict.metric
    if verdict.reason == ESTIMATE_FOLLOWS_TIME:
        return ESTIMATE_FOLLOWS_TIME  # measured, in a sense: by the clock; it says nothing the time does not
    if ranking is None or metric is None:
        return f"{NA}: {verdict.reason}"
    best = f"{_group_text(ranking.identical, labels)} {_value_text(metric, verdict.runs[ranking.best])}"
    if ranking.outcome == IDENTICAL:
        return f"{best}: every cell gave the same numbers"
    if ranking.outcome == WINNER:
        return (f"winner {best}, ahead of every other cell ({_power_text(verdict)})" if ranking.worse
                else f"winner {best} (the only cell)")
    if ranking.outcome == EQUIVALENT:
        same = "; ".join(_group_text(group, labels) for group in ranking.equivalent)
        margin = verdict.margin.text if verdict.margin is not None else ""
        return f"equivalent {best}; {same} (within {margin}, {_power_text(verdict)})"
    assert ranking.outcome == OPEN
    against = "; ".join(_group_text(group, labels) for group in ranking.open)
    needed = ranking.seeds_needed
    decide = (f"about {needed} seeds would decide it" if needed is not None and needed > ranking.n
              else "one seed cannot be tested" if ranking.n < 2 else "more seeds than the spread can tell")
    return f"open: {best} against {against} ({_power_text(verdict)}; {decide})"


def use_text(line: AnswerLine) -> str:
    """``use adamw/standard: quality equivalent to adam/standard (±1 %); 18 % faster to target ...``; a line whose
    best cell does not beat its task's strongest trivial baseline ends with that (``— its best cell learned less
    than the bigram count model (4.424 against 4.29)``)."""
    choice = line.choice
    if choice.cell is None:
        return f"{NA}: {choice.reason}"
    label = line.labels.get(choice.cell, choice.cell)
    flag = f" — its best cell {check_text(line.trivial)}" if line.flagged else ""
    return f"use {label}{'' if choice.decided else ' for now'}: {choice.reason}{flag}"


def trivial_text(line: AnswerLine) -> str:
    """The line's best cell against its task's strongest trivial baseline, or ``""`` where none is known."""
    return check_text(line.trivial) if line.trivial is not None else ""


def line_text(line: AnswerLine) -> str:
    """The line as the terminal prints it: the subject, the cell to use, then each question's verdict."""
    quality = line.quality
    label = quality.metric.label.lower() if quality.metric is not None else "quality"
    beaten = f" · {trivial_text(line)}" if line.trivial is not None and not line.flagged else ""
    parts = [f"{line.subject}: {use_text(line)}", f"{label}: {verdict_text(quality, line.labels)}{beaten}"]
    for objective in ANSWER_OBJECTIVES[1:]:
        parts.append(f"{_OBJECTIVE_WORDS[objective]}: {verdict_text(line.verdicts[objective], line.labels)}")
    return " | ".join(parts) + "".join(f" [{note}]" for note in line.notes)
