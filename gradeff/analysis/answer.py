"""The Answer: which configuration to use, per model (main study) or backbone × dataset (PEFT study), and how sure.

:func:`answer` is the one function that turns records into verdict lines; the terminal summary prints
:func:`line_text` of each, and the report's first section shows the same lines. A line holds one
:class:`~gradeff.analysis.verdicts.Verdict` per question (quality, speed, memory, energy): the winner
with its mean, 95 % interval and number of seeds, or the tie set (a tie is never a win), cells with the
same numbers on every seed merged as identical, and "single draw" where each cell ran one seed.

Each study's lines read its own records only (:mod:`gradeff.analysis.scope`): the main study, the
PEFT study's fine-tuning cells, and the real-data grid each get their own. A name says what ran
(:mod:`gradeff.analysis.naming`). A PEFT line also says whether its winner beats the dataset's raw-pixel
nearest-neighbour sanity baseline, where the records carry one (:func:`sanity_accuracy`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gradeff.analysis import naming, scope
from gradeff.analysis.metrics import ANSWER_OBJECTIVES, Metric, metric_value
from gradeff.analysis.pairing import IDENTICAL, SINGLE_DRAW, TIE, WINNER
from gradeff.analysis.runs import CellRuns, canonical
from gradeff.analysis.verdicts import Verdict, verdicts
from gradeff.records.formatting import NA, as_number, format_value
from gradeff.records.results import CellRecord, record_field

__all__ = ["ANSWER_STUDIES", "SANITY_METHOD", "AnswerLine", "answer", "cell_label", "line_text", "sanity_accuracy",
           "verdict_text"]

# The studies that answer "what should I use", in the order their lines are printed.
ANSWER_STUDIES = ("main", "peft", "real")
# A record of this method is the raw-pixel 1-nearest-neighbour classifier of its dataset: what a
# fine-tuned model must beat to have learned anything from the backbone.
SANITY_METHOD = "pixel_1nn"
# Within a line, the axes that name a cell, in order (only those that vary within the line are printed).
_LABEL_AXES = ("optimizer", "method", "strategy", "dataset")
_OBJECTIVE_WORDS = {"speed": "fastest to target", "memory": "least memory", "energy": "least energy to target"}


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerLine:
    """One group of cells a user chooses between, and the verdicts on it.

    Attributes:
        study: the study's key (:data:`gradeff.analysis.scope.STUDIES`).
        subject: the group's key (``llm``, ``vit_s · cifar100``).
        title: what ran, in words (``ViT-S/16 on CIFAR-100 (synthetic, 100 classes): pretrained here ...``).
        verdicts: objective → :class:`~gradeff.analysis.verdicts.Verdict`.
        labels: cell id → the cell's label within the line (``adam/standard``).
        notes: what else the line must say (a winner that does not beat the sanity baseline).
    """

    study: str
    subject: str
    title: str
    verdicts: Mapping[str, Verdict]
    labels: Mapping[str, str]
    notes: tuple[str, ...] = ()

    @property
    def quality(self) -> Verdict:
        return self.verdicts["quality"]


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


def answer(records: Iterable[CellRecord]) -> tuple[AnswerLine, ...]:
    """The verdict lines of every study that answers "what should I use", over every seed.

    Args:
        records: records in any order, any number of seeds (the same set gives the same lines).

    Returns:
        One line per model and dataset (main study, real data) or backbone and dataset (PEFT study), in
        canonical order.
    """
    kept, _ = canonical(records)
    studies = scope.split(kept)
    lines = []
    for study in ANSWER_STUDIES:
        study_records = studies[study]
        groups = _groups(study_records)
        datasets_of: dict[str, set[str]] = {}
        for model, dataset in groups:
            datasets_of.setdefault(model, set()).add(dataset)
        for (model, dataset), group in groups.items():
            axes = _varying(group)
            labels = {r.cell: cell_label(r, axes) for r in group}
            found = verdicts(group)
            subject = model if study == "main" and len(datasets_of[model]) == 1 else f"{model} · {dataset}"
            notes = (_sanity_note(found, labels, sanity_accuracy(study_records, dataset)) if study == "peft" else "",
                     _elsewhere_note(group, [r for r in study_records if r.model == model]))
            lines.append(AnswerLine(study=study, subject=subject, title=naming.group_title(group), verdicts=found,
                                    labels=labels, notes=tuple(note for note in notes if note)))
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


def verdict_text(verdict: Verdict, labels: Mapping[str, str]) -> str:
    """One verdict in words: ``adam/standard 2.31 ± 0.04 (n=3)``, ``tie between ...``, ``... (single draw)``, or
    ``n/a: why``."""
    ranking, metric = verdict.ranking, verdict.metric
    if ranking is None or metric is None:
        return f"{NA}: {verdict.reason}"
    best = f"{_group_text(ranking.identical, labels)} {_value_text(metric, verdict.runs[ranking.best])}"
    ties = "; ".join(_group_text(group, labels) for group in ranking.ties)
    if ranking.outcome == SINGLE_DRAW:
        best = f"tie between {best}; {ties}" if ties else best
        return f"{best} ({SINGLE_DRAW})"
    if ranking.outcome == TIE:
        return f"tie between {best}; {ties}"
    if ranking.outcome == IDENTICAL:
        return f"{best}: every cell gave the same numbers"
    assert ranking.outcome == WINNER
    return f"{best}, every other cell worse (paired t-test over seeds, Holm, 5 %)" if ranking.worse else best


def line_text(line: AnswerLine) -> str:
    """The line as the terminal prints it: the subject, its quality verdict, then speed, memory and energy."""
    quality = line.quality
    label = quality.metric.label.lower() if quality.metric is not None else "quality"
    parts = [f"{line.subject}: {label}: {verdict_text(quality, line.labels)}"]
    for objective in ANSWER_OBJECTIVES[1:]:
        parts.append(f"{_OBJECTIVE_WORDS[objective]}: {verdict_text(line.verdicts[objective], line.labels)}")
    return " | ".join(parts) + "".join(f" [{note}]" for note in line.notes)
