"""The report's view model: frozen values that the templates print, and the labels they use.

Templates only loop over these and print their fields; every decision (order, units, which cell
is best, what a gap means) is made before a value is built. With ``StrictUndefined``, a field
the template asks for and the view lacks is an error, not an empty string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from markupsafe import Markup

from gradeff.analysis import meter_value
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES
from gradeff.records.formatting import NA
from gradeff.records.results import CellRecord, meter_field
from gradeff.report.papers import PEFT, Paper, cite
from gradeff.specs.registry import Registry
from gradeff.studies.study import STUDIES

__all__ = [
    "SECTIONS", "SORTABLE_ROWS", "AnswerGroupView", "AnswerView", "BaselinesView", "Cell", "ClaimGroupView",
    "ClaimsView",
    "FigureView", "MemoryGroupView", "MemoryView",
    "ModelView", "PeftGroupView", "PeftView", "RealView", "ReportView", "Row", "Section",
    "Table", "config_label", "display_name", "distinct_text", "energy_sources", "first_word", "html_id",
    "short_label", "status_text", "text_or_na",
]


# Tables with more rows than this get a filter box and sortable headers (the page reads the same without them).
SORTABLE_ROWS = 12


@dataclass(frozen=True, slots=True)
class Section:
    """A top-level section of the page: its HTML id, heading, the paper item it reproduces, and the studies whose
    records it reads (:data:`gradeff.analysis.scope.STUDIES`; empty: every record, as the context sections do)."""

    id: str
    title: str
    paper: str
    studies: tuple[str, ...] = ()


_MAIN = ("main",)
# The studies that answer "what should I use" (StudySpec.answers): the Answer's lines are theirs.
_ANSWERING = tuple(key for key, study in STUDIES.items() if study.answers)
# Figure-first: the Answer, then the figures a reader of the papers looks at first, open; every other section is
# collapsed under its heading, and the full cell tables come last, in the appendix. The papers' Figure 1
# (recommendations) is the Answer itself, so it has no section of its own.
SECTIONS: tuple[Section, ...] = (
    Section("answer", "Answer", "", _ANSWERING),
    Section("curves", "Training loss per epoch", cite("Figure 2"), _MAIN),
    Section("pareto", "Test quality vs time: Pareto frontier", cite("Figure 4"), _MAIN),
    Section("memory-time", "Memory vs time per strategy", cite("adaptive checkpointing", PEFT), ("memory",)),
    Section("peft-figures", "Fine-tuning: accuracy vs cost", cite("PEFT methods", PEFT), ("peft",)),
    Section("overview", "Overview", ""),
    Section("best", "Best configuration per model", cite("Table 2"), _MAIN),
    Section("ratios", "Strategy ratios", cite("Table 3"), _MAIN),
    Section("heatmaps", "Utilization and memory heat maps", cite("Figure 3"), _MAIN),
    Section("memory", "Memory breakdown", "", _MAIN),
    Section("peft", "Fine-tuning methods (PEFT study)", "", ("peft", "baselines")),
    Section("memory-strategies", "Memory strategies (peak memory vs time)", "", ("memory", "peft")),
    Section("real", "Real data", "", ("real",)),
    Section("claims", "Claims", "", ("main", "peft", "baselines")),
    Section("failures", "Failed and skipped cells", ""),
    Section("skipped-lines", "Unreadable lines", ""),
    Section("environment", "Environment", ""),
    Section("methods", "How each number was measured", ""),
    Section("tables", "Appendix: every cell", cite("Tables 4–19"), ("main", "peft", "baselines")),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One table cell: its text, an optional second line, CSS classes and a tooltip."""

    text: str
    sub: str = ""
    css: str = ""
    title: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """A table row: a header cell and data cells."""

    label: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """A table, or just its note when it has no rows (nothing measured)."""

    id: str
    caption: str
    header: tuple[str, ...]
    rows: tuple[Row, ...]
    note: str = ""

    @property
    def sortable(self) -> bool:
        """Long enough that a reader looks for rows: the page's script makes it sortable and filterable."""
        return len(self.rows) > SORTABLE_ROWS


@dataclass(frozen=True, slots=True, kw_only=True)
class FigureView:
    """An inline SVG figure (``svg`` is ``None`` when there is nothing to draw; ``note`` says why)."""

    id: str
    caption: str
    svg: Markup | None
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelView:
    """Everything shown for one model."""

    key: str
    name: str
    slug: str
    summary: str
    tables: tuple[Table, ...]
    curves: FigureView
    pareto: FigureView
    pareto_cells: tuple[str, ...]
    memory: FigureView


@dataclass(frozen=True, slots=True, kw_only=True)
class PeftGroupView:
    """One backbone on one dataset of the PEFT study: its method × strategy tables."""

    slug: str
    title: str
    summary: str
    tables: tuple[Table, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselinesView:
    """One dataset's foundation-model baselines next to the best fine-tuned cell of each backbone.

    Attributes:
        slug: HTML id prefix.
        title: heading.
        table: one row per baseline, then one per backbone's best fine-tuned cell.
        weights: one line per baseline: how its weights were obtained, and what that makes of its accuracy.
    """

    slug: str
    title: str
    table: Table
    weights: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PeftView:
    """The PEFT study's section; ``missing_note`` alone is printed when there are no records of it.

    Attributes:
        missing_note: the one line shown instead of the section's content, ``""`` when there are records.
        tuned_note: why the fine-tuning parts are empty (only baselines ran), ``""`` otherwise.
        pick: winners per backbone × dataset for accuracy, memory, time and energy.
        versus_full: per backbone × dataset, each method against full fine-tuning.
        groups: the method × strategy tables per backbone × dataset (fine-tuning cells only).
        ratios: checkpoint / standard ratios per backbone × method.
        budget_ratios: budget / standard ratios the same way (empty when no cell used the ``budget`` strategy).
        curves: held-out accuracy per epoch.
        costs: accuracy against trainable parameters and against energy.
        pretraining: the one-off pretraining of each backbone.
        baselines: per dataset, the foundation-model baselines against the best fine-tuned cells.
        baselines_note: what the baselines are, or why there are none.
        inference: per backbone × dataset (baselines included), every cell's inference cost and NetScore family.
        ranking: per dataset, the cells ranked by each score of the NetScore family.
        ranking_note: what the scores' units are, which are estimated, and which cells are left out.
    """

    missing_note: str
    tuned_note: str
    versus_full: tuple[Table, ...]
    groups: tuple[PeftGroupView, ...]
    ratios: tuple[Table, ...]
    budget_ratios: tuple[Table, ...]
    curves: FigureView
    costs: FigureView
    pretraining: Table
    baselines: tuple[BaselinesView, ...]
    baselines_note: str
    inference: tuple[Table, ...]
    ranking: tuple[Table, ...]
    ranking_note: str
    # At which profile and device the study's cost figures were measured, and why the papers' scale can differ.
    scale_note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimGroupView:
    """One study's claims: a table of claim, measured figures, verdict, why and scale caveat."""

    id: str
    title: str
    table: Table
    scale_note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimsView:
    """The claims section: one group per study that has claims, in the order the claims are listed.

    Attributes:
        groups: per study, its claims table.
        summary: how many claims got each verdict, in words (``""`` without claims).
        rules: how a verdict is reached, in words.
        verdicts: ``(verdict, CSS class, meaning)`` for the legend.
    """

    groups: tuple[ClaimGroupView, ...]
    summary: str
    rules: str
    verdicts: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryGroupView:
    """One model (with its optimizer, method and dataset) of the memory study.

    Attributes:
        slug: HTML id prefix.
        title: heading.
        summary: cell count and statuses.
        figure: memory vs time per epoch, both over standard's.
        table: one row per strategy: plan, budget, prediction, measurements and ratios to standard.
        claims: the paper's claim per budget level, as measured.
        versus: the adaptive budget against the compiler's knapsack per level.
    """

    slug: str
    title: str
    summary: str
    figure: FigureView
    table: Table
    claims: tuple[str, ...]
    versus: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryView:
    """The memory strategies section.

    Attributes:
        missing_note: the one line shown instead of the memory study's part when it has no records (``""``
            otherwise).
        groups: per model, its figure, table and claim lines.
        claims: the claim per budget level over every model.
        peft_claims: the PEFT study's budget cells against standard, per backbone.
        peft_note: what the PEFT lines compare, or why there are none.
        methods: ``(quantity, explanation)``: how each number of the section was measured.
    """

    missing_note: str
    groups: tuple[MemoryGroupView, ...]
    claims: tuple[str, ...]
    peft_claims: tuple[str, ...]
    peft_note: str
    methods: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerGroupView:
    """One study's verdict lines: in brief (a row per model, or backbone and dataset: the cell to use and why, what
    is decided and what is open), then in full (a column per question).

    Attributes:
        id: HTML id.
        title: the study's name.
        brief: the terminal's words (:mod:`gradeff.analysis.answer_brief`), shown first.
        table: the verdicts, one cell per question.
        lines: :func:`gradeff.analysis.answer.line_text` of each row.
    """

    id: str
    title: str
    brief: Table
    table: Table
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerView:
    """The page's first section: what to use, and how sure that is.

    Attributes:
        groups: per study that answers (main, PEFT, real data), its verdicts.
        missing_note: the one line shown when no study has a verdict (``""`` otherwise).
        rules: how a verdict is reached, in words.
    """

    groups: tuple[AnswerGroupView, ...]
    missing_note: str
    rules: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RealView:
    """The real-data grid's section: its cells only (never in the main study's tables).

    Attributes:
        missing_note: the one line shown instead when there are no real-data records (``""`` otherwise).
        tables: per model and dataset, a table of every cell over its seeds.
    """

    missing_note: str
    tables: tuple[Table, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportView:
    """The whole page.

    ``main_note`` is the one line the main study's sections show instead of their content when
    no record belongs to it (``""`` otherwise); ``peft`` is the PEFT study's section and
    ``memory_strategies`` the memory study's; ``real`` the real-data grid's; ``claims`` the papers' claims as
    measured, per study; ``answer`` the first section; ``papers`` the two papers reproduced (``main``, ``peft``);
    ``export`` the name of the flat table of every cell written next to the page (``""``: none written).
    ``section_cells`` maps each section's id to the cells whose records it was built from (its studies' only: see
    :attr:`Section.studies`).
    """

    title: str
    generated_at: str
    papers: Mapping[str, Paper]
    export: str
    sections: tuple[Section, ...]
    section_by_id: Mapping[str, Section]
    section_cells: Mapping[str, tuple[str, ...]]
    answer: AnswerView
    real: RealView
    overview: tuple[tuple[str, str], ...]
    notices: tuple[str, ...]
    recommendations: Table
    wins: tuple[str, ...]
    best_loss: Table
    best: Table
    protocols: tuple[Table, ...]
    ratios: tuple[Table, ...]
    models: tuple[ModelView, ...]
    heatmap: FigureView
    main_note: str
    peft: PeftView
    memory_strategies: MemoryView
    claims: ClaimsView
    failures: Table
    skipped_lines: tuple[str, ...]
    superseded: int
    runs: Table
    environments: tuple[Table, ...]
    hparams: tuple[Table, ...]
    methods: tuple[tuple[str, str], ...]


def html_id(key: str, index: int, prefix: str = "m") -> str:
    """An HTML id from any key (records may hold anything): ``prefix`` and ``index`` for uniqueness, ``[a-z0-9_-]``."""
    return f"{prefix}{index}-" + (re.sub(r"[^a-z0-9_]+", "-", key.lower()).strip("-") or "x")


def status_text(record: CellRecord) -> str:
    """How a cell ended, for a table cell: ``ok``, ``diverged at step 37``, ``oom``, ``error``, ``skipped``."""
    if record.status == "diverged" and record.failed_step is not None:
        return f"diverged at step {record.failed_step}"
    return record.status


def display_name(registry: Registry, key: str) -> str:
    """The registry's human-readable name of ``key``, or the raw key if the registry does not know it."""
    # Records may name keys this gradeff does not know: show the raw key (escaped by the template).
    return registry[key].name if key in registry else key


def config_label(record: CellRecord) -> str:
    """``Adam + Gradient accumulation``: a cell's optimizer and strategy in words."""
    return f"{display_name(OPTIMIZERS, record.optimizer)} + {display_name(STRATEGIES, record.strategy)}"


def short_label(record: CellRecord) -> str:
    """``adam/accum``: a cell's keys, compact enough for legends and axis labels."""
    return f"{record.optimizer}/{record.strategy}"


def energy_sources(records: Iterable[CellRecord]) -> list[str]:
    """The energy meter sources (``nvml``, ``rapl``, ``estimate``, ``none``) the records name, sorted."""
    sources = (meter_field(record, "energy", "source") for record in records)
    return sorted({source for source in sources if isinstance(source, str)})


def metering_cost_fractions(records: Iterable[CellRecord]) -> list[float]:
    """Each record's metering cost as a fraction of its epochs' time, where the record carries one."""
    fractions = (meter_value(record, "cost", "fraction") for record in records)
    return [fraction for fraction in fractions if fraction is not None]


def first_word(name: str) -> str:
    """The first word of a name, for narrow headers."""
    # "Llama-3.2-1B-style decoder" → "Llama-3.2-1B-style": enough to tell the models apart in a header.
    return name.split(" ", 1)[0]


def text_or_na(value: object) -> str:
    """``str(value)``, or ``n/a`` for ``None`` and the empty string."""
    return NA if value is None or value == "" else str(value)


def distinct_text(values: Iterable[object]) -> str:
    """The distinct values as text, in first-seen order, comma-separated (``n/a`` if none)."""
    return ", ".join(dict.fromkeys(text_or_na(v) for v in values)) or NA
