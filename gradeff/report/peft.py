"""The PEFT study's section of the report: records of the grids read by held-out accuracy → :class:`PeftView`.

Per backbone and dataset, method × strategy tables of accuracy, trainable parameters, training
memory, time per epoch and energy; which method to pick; each method against full fine-tuning;
checkpoint / standard and budget / standard ratios; accuracy curves; and the backbones' one-off pretraining.
The foundation-model baselines, every cell's inference cost and NetScore family, and their ranking are
built by :mod:`gradeff.report.inference`. Numbers are formatted here (the analysis is
:mod:`gradeff.analysis.peft`); a failed cell shows its status, an unmeasured one ``n/a`` with the reason
in its tooltip or the table's note.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from gradeff import analysis
from gradeff.analysis import METRICS, Metric, naming, peft
from gradeff.analysis.answer import sanity_accuracy
from gradeff.analysis.metrics import quality_metric
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.axes.strategies import STRATEGIES
from gradeff.records.formatting import NA, as_number, format_percent, format_seconds
from gradeff.records.results import CellRecord, record_field
from gradeff.report import figures, inference
from gradeff.report.table_cells import places, ratio_cell, runs_cell
from gradeff.report.view import (
    Cell,
    FigureView,
    PeftGroupView,
    PeftView,
    Row,
    Table,
    display_name,
    distinct_text,
    energy_sources,
    first_word,
    html_id,
    status_text,
)

__all__ = [
    "BASELINES_NOTE", "MISSING_NOTE", "SANITY_LABEL", "TUNED_MISSING_NOTE", "build_peft_view", "format_count",
    "format_points",
    "method_label",
]

MISSING_NOTE = "No records of the PEFT study (a grid read by held-out accuracy) in these results."
TUNED_MISSING_NOTE = ("No fine-tuning records of the PEFT study in these results: only its foundation-model "
                      "baselines, below.")
BASELINES_NOTE = ("Foundation models used without fine-tuning, on the same datasets and held-out splits: CLIP and "
                  "SigLIP zero-shot (one text prompt per class), DINOv2 read by a linear probe (its head trained on "
                  "frozen features), two small autoregressive VLMs (SmolVLM, vlm_prompt) prompted to classify (each "
                  "class name's likelihood after a fixed prompt). A zero-shot cell has no epochs: its accuracy comes "
                  "from one evaluation of the held-out split. They are not cells of the method × strategy tables.")
_MEMORY_NOTE = ("Read on the live-tensor peak of one training step: the most bytes of tensors alive at once, "
                "transients included, tracked op by op and exact on any device.")


def format_count(value: object) -> str:
    """A parameter count with three significant digits: ``950``, ``43.4k``, ``22.1M``, ``1.24B``; ``n/a`` if missing."""
    number = as_number(value)
    if number is None:
        return NA
    for suffix, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(number) >= scale:
            scaled = number / scale
            return f"{scaled:.0f}{suffix}" if abs(scaled) >= 100 else f"{scaled:.3g}{suffix}"
    return f"{number:.0f}"


def format_points(value: object) -> str:
    """A difference of percentages in points, signed: ``+1.2 pts``, ``-0.4 pts``; ``n/a`` if missing."""
    number = as_number(value)
    return NA if number is None else f"{number:+.1f} pts"


def _share(value: float) -> str:
    # Adapters are often well under 1 % of a model: two significant digits keep 0.27 % from reading 0.3 %.
    return f"{value:.1f} %" if value >= 1 else f"{value:.2g} %"


def method_label(record: CellRecord) -> str:
    """``LoRA + checkpoint``: a cell's fine-tuning method in words and its strategy key."""
    return f"{display_name(METHODS, record.method)} + {record.strategy}"


def _group_title(model: str, dataset: str, runs: Mapping[str, CellRuns] | None = None) -> str:
    if runs:
        # What ran: a tiny backbone pretrained here is not the published ViT-S/16.
        return naming.group_title([r.first for r in runs.values()])
    return f"{display_name(MODELS, model)} on {display_name(TASKS, dataset)}"


def _group_label(model: str, dataset: str) -> str:
    # "CIFAR-100-like (synthetic)" → "CIFAR-100-like": row headers stay one line.
    return f"{display_name(MODELS, model)} · {first_word(display_name(TASKS, dataset))}"


def _method_table(slug: str, caption: str, metric: Metric, runs: Mapping[str, CellRuns], strategies: Sequence[str],
                  text: Callable[[CellRuns, float], tuple[str, str]] | None, note: str, *, ranked: bool = True
                  ) -> Table:
    """A method × strategy table of one metric of one backbone and dataset over seeds, the first place highlighted."""
    table_id = f"{slug}-{metric.key}"
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    if not any(analysis.metric_value(r, metric) is not None for r in records):
        return Table(id=table_id, caption=caption, header=(), rows=(),
                     note=f"n/a: not measured for any cell of this backbone and dataset. {note}".strip())
    found = places(runs, metric) if ranked else {}
    by_cell_key = {(r.first.method, r.first.strategy): r for r in runs.values()}
    methods = analysis.order_keys((r.first.method for r in runs.values()), METHODS)
    rows = tuple(Row(label=display_name(METHODS, method),
                     cells=tuple(runs_cell(cell, metric, found.get(cell.cell, "") if cell else "", text=text)
                                 for cell in (by_cell_key.get((method, st)) for st in strategies)))
                 for method in methods)
    goal = "lower is better" if metric.goal == "min" else "higher is better"
    head = (f"Mean over seeds; the first place highlighted (best, identical to it, or tied over seeds); {goal}."
            if ranked else "Mean over seeds.")
    return Table(id=table_id, caption=caption, header=("method", *strategies), rows=rows, note=f"{head} {note}".strip())


def _accuracy_caption(records: Sequence[CellRecord]) -> str:
    ceilings = sorted({c for c in (peft.bayes_accuracy(r) for r in records) if c is not None})
    if not ceilings:
        ceiling = "Bayes accuracy of this split unknown"
    elif len(ceilings) == 1:
        ceiling = f"ceiling: the Bayes classifier's {format_percent(ceilings[0])} on this split"
    else:
        ceiling = (f"the cells' splits differ: Bayes accuracy {format_percent(ceilings[0])} to "
                   f"{format_percent(ceilings[-1])}")
    return f"Final test top-1 accuracy ({ceiling})"


SANITY_LABEL = "1-NN on raw pixels (sanity baseline)"
SANITY_FLAG = "not above 1-NN on pixels"


def _with_sanity_row(table: Table, runs: Mapping[str, CellRuns], strategies: Sequence[str]) -> Table:
    """The accuracy table with its dataset's raw-pixel 1-NN accuracy as the last row, and every cell whose mean
    does not beat it flagged: such an accuracy says nothing about the fine-tuning method."""
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    baseline = sanity_accuracy(records, records[0].dataset) if records else None
    if not table.rows or baseline is None:
        return table
    by_cell_key = {(r.first.method, r.first.strategy): r for r in runs.values()}
    methods = analysis.order_keys((r.first.method for r in runs.values()), METHODS)
    rows = []
    for row, method in zip(table.rows, methods, strict=True):
        cells = []
        for cell, strategy in zip(row.cells, strategies, strict=True):
            cell_runs = by_cell_key.get((method, strategy))
            mean = cell_runs.mean("heldout_accuracy") if cell_runs is not None and cell_runs.ok else None
            if mean is not None and mean <= baseline:
                cell = Cell(text=cell.text, sub=" ".join(p for p in (cell.sub, SANITY_FLAG) if p),
                            css=f"{cell.css} worse".strip(),
                            title=f"does not beat the raw-pixel 1-NN baseline ({format_percent(baseline)}) on this "
                                  "split: this accuracy says nothing about the fine-tuning method")
            cells.append(cell)
        rows.append(Row(label=row.label, cells=tuple(cells)))
    rows.append(Row(label=SANITY_LABEL, cells=tuple(
        Cell(text=format_percent(baseline), css="text",
             title="no training, no features: each test image takes the label of its nearest training image")
        for _ in strategies)))
    note = (f"{table.note} Last row: a 1-nearest-neighbour classifier on raw pixels against the same training split; "
            f"a cell marked '{SANITY_FLAG}' (in italics) learned nothing pixel matching did not.")
    return Table(id=table.id, caption=table.caption, header=table.header, rows=tuple(rows), note=note)


def _parameters_text(cell_runs: CellRuns, value: float) -> tuple[str, str]:
    record = cell_runs.first
    share, total = peft.trainable_percent(record), peft.total_parameters(record)
    return format_count(value), "" if share is None else f"{_share(share)} of {format_count(total)}"


def _group_tables(slug: str, runs: Mapping[str, CellRuns], strategies: Sequence[str]) -> tuple[Table, ...]:
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    quality = quality_metric(records)
    sources = energy_sources(records)
    seconds, to_target, energy = METRICS["epoch_seconds"], METRICS["seconds_to_target"], METRICS["energy"]
    caption = _accuracy_caption(records) if quality.key == "heldout_accuracy" else quality.label
    return (
        _with_sanity_row(_method_table(slug, caption, quality, runs, strategies, None,
                                       "The last epoch's figure on the test split the cell never trains on."),
                         runs, strategies),
        _method_table(slug, "Trainable parameters (count, and share of the deployed model's parameters)",
                      peft.TRAINABLE, runs, strategies, _parameters_text,
                      "4-bit weights count the values they hold; adapters count in the total; peft's frozen copy "
                      "of a retrained head does not.", ranked=False),
        _method_table(slug, "Training memory (live-tensor peak of a step)", METRICS["peak"], runs, strategies, None,
                      _MEMORY_NOTE),
        _method_table(slug, "Time to target", to_target, runs, strategies, None,
                      "Seconds of training until the test loss first reached the target (halfway from the untrained "
                      "model's to the floor); n/a: not reached."),
        _method_table(slug, "Time per epoch", seconds, runs, strategies, None,
                      "Training only: the test evaluation after each epoch is not timed."),
        _method_table(slug, "Energy", energy, runs, strategies, None,
                      f"Energy source: {', '.join(sources) if sources else 'none recorded'}."),
    )


def _group_summary(runs: Mapping[str, CellRuns]) -> str:
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    counts = Counter(r.status for r in records)
    weights = distinct_text(naming.weights_source(r) for r in records)
    samples = distinct_text(
        f"{record_field(r, 'task', 'train_samples', NA)} / {record_field(r, 'task', 'heldout_samples', NA)}"
        if isinstance(r.task, Mapping) else NA for r in records)
    seeds = distinct_text(r.seed for r in records)
    return (f"{len(runs)} cells, {len(records)} runs (seeds {seeds}): " + ", ".join(f"{n} {s}" for s, n in
                                                                                  counts.items())
            + f"; starting weights: {weights}; training / test samples: {samples}")


def _versus_row(versus: peft.Versus) -> Row:
    runs, reference = versus.runs, versus.reference
    if not runs.ok:
        record = runs.runs[-1]
        return Row(label=method_label(runs.first),
                   cells=(Cell(text=status_text(record) if len(runs.runs) == 1 else runs.status,
                               css=f"status {record.status}", title=record.detail),)
                   + (Cell(text=NA, css="na", title="no seed of the cell ended ok"),) * 3)
    if reference is None:
        reason = "no full fine-tuning cell with this strategy"
    elif not reference.ok:
        reason = f"full fine-tuning + {reference.first.strategy} ended {reference.status}"
    else:
        reason = "not measured on a seed both ended ok"
    points = versus.accuracy_points
    if points is None:
        accuracy = Cell(text=NA, css="na", title=reason)
    else:
        shown = round(points.mean, 1)
        decided = points.n == 1 or not points.low <= 0 <= points.high
        accuracy = Cell(text=format_points(points.mean),
                        sub=f"± {points.half_width:.1f} (n={points.n})" if points.n > 1 else "",
                        css="" if not decided else "better" if shown > 0 else "worse" if shown < 0 else "")
    return Row(label=method_label(runs.first), cells=(accuracy, *(ratio_cell(v, reason) for v in
                                                                   (versus.memory, versus.time, versus.energy))))


def _versus_table(slug: str, title: str, runs: Mapping[str, CellRuns]) -> Table:
    rows = tuple(_versus_row(v) for v in peft.versus_full(runs))
    caption = f"{title}: each method against full fine-tuning with the same strategy"
    if not rows:
        return Table(id=f"{slug}-versus-full", caption=caption, header=(), rows=(),
                     note="n/a: only full fine-tuning ran for this backbone and dataset.")
    return Table(id=f"{slug}-versus-full", caption=caption,
                 header=("method + strategy", "test accuracy", "training memory (live peak)", "time per epoch",
                         "energy"),
                 rows=rows,
                 note="Seed by seed against full fine-tuning, then the mean over seeds. Accuracy: percentage points "
                      "above (+) or below (-) full fine-tuning; memory, time and energy: ratio and change in percent. "
                      "Bold: better than full fine-tuning, italic: worse, where the 95 % interval over seeds "
                      "excludes no change (one seed: as printed). n/a: a side is missing, failed or unmeasured.")


# What each strategy divided by standard stands for in the paper (the notes of its ratio tables).
_RATIO_MEANINGS = {
    "checkpoint": "checkpoint: the paper's static activation checkpointing; standard: its 'none'.",
    "budget": "budget: the paper's budget-adaptive checkpointing, which checkpoints the fewest blocks whose "
              "predicted peak fits the budget less its margin (the profile's absolute budget); standard: its "
              "'none'. Its claim, read per backbone, is in 'Memory strategies'.",
}


def _ratio_tables(groups: Mapping[tuple[str, str], Mapping[str, CellRuns]], records: Sequence[CellRecord],
                  numerator: str = "checkpoint") -> tuple[Table, ...]:
    """``numerator`` / standard ratios of training memory, time per epoch and energy, seed by seed:
    methods × backbone · dataset."""
    columns = list(groups)
    methods = analysis.order_keys((r.method for r in records), METHODS)
    # The checkpoint tables keep their ids (peft-ratio-<metric>) for links into earlier reports.
    prefix = "peft-ratio" if numerator == "checkpoint" else f"peft-ratio-{numerator}"
    meaning = _RATIO_MEANINGS.get(numerator, f"{numerator} against standard.")
    tables = []
    for metric in (METRICS["peak"], METRICS["epoch_seconds"], METRICS["energy"]):
        ratios = peft.checkpoint_ratios(records, metric, numerator=numerator)
        measured = any(r is not None for r in ratios.values())
        rows = []
        for method in methods:
            if not any((model, dataset, method) in ratios for model, dataset in columns):
                continue
            rows.append(Row(label=display_name(METHODS, method), cells=tuple(
                ratio_cell(ratios.get((model, dataset, method)), f"needs both {numerator} and standard ok and "
                                                                  "measured on a seed") for model, dataset in columns)))
        label = "Training memory (live-tensor peak)" if metric.key == "peak" else metric.label
        tables.append(Table(
            id=f"{prefix}-{metric.key}",
            caption=f"{label}: {display_name(STRATEGIES, numerator)} / {display_name(STRATEGIES, 'standard')}",
            header=("method", *(f"{model} / {dataset}" for model, dataset in columns)) if measured else (),
            rows=tuple(rows) if measured else (),
            note=(f"{meaning} Seed by seed, then the mean over seeds. Bold: it lowers the figure (< 1); italic: it "
                  "raises it (> 1), where the interval over seeds excludes 1; identical: the same numbers on every "
                  "seed." if measured else
                  f"n/a: no method has both {numerator} and standard cells that ended ok with this metric.")))
    return tuple(tables)


_REUSE_WORDS = {True: "yes: loaded from the cache", False: "no: pretrained in this session", None: NA}


def _reuse_text(pairs: Sequence[tuple[CellRecord, Mapping]]) -> str:
    # Reuse is per session: the first session pretrains and caches, later ones load the copy.
    sessions: dict[bool | None, dict[str, None]] = {}
    for record, info in pairs:
        reused = info.get("reused")
        sessions.setdefault(reused if isinstance(reused, bool) else None, {})[record.session or NA] = None
    if len(sessions) == 1:
        return _REUSE_WORDS[next(iter(sessions))]
    return "; ".join(f"{_REUSE_WORDS[reused].split(':')[0]} in session(s) {', '.join(names)}"
                     for reused, names in sessions.items())


def _distinct_cell(infos: Sequence[Mapping], name: str, fmt: Callable[[object], str]) -> Cell:
    # One backbone's cells normally share one pretraining; different caches list each value.
    text = ", ".join(dict.fromkeys(fmt(info.get(name)) for info in infos))
    return Cell(text=text, css="na" if text == NA else "")


def _steps_text(value: object) -> str:
    number = as_number(value)
    return NA if number is None else f"{number:.0f}"


def _fraction_text(value: object) -> str:
    number = as_number(value)
    return format_percent(None if number is None else 100 * number)


def _pretraining_table(records: Sequence[CellRecord]) -> Table:
    by_backbone = peft.pretraining_by_backbone(records)
    rows = []
    for model in analysis.order_keys(by_backbone, MODELS):
        infos = [info for _, info in by_backbone[model]]
        rows.append(Row(label=display_name(MODELS, model), cells=(
            _distinct_cell(infos, "optimizer_steps", _steps_text), _distinct_cell(infos, "seconds", format_seconds),
            _distinct_cell(infos, "heldout_accuracy", _fraction_text),
            _distinct_cell(infos, "bayes_accuracy", _fraction_text),
            Cell(text=_reuse_text(by_backbone[model]), css="text"))))
    others = Counter(record_field(r, "weights", "source", NA) for r in records if r.model not in by_backbone)
    other_text = ("" if not others else " Other starting weights in this study: "
                  + ", ".join(f"{source} ({n} cell{'' if n == 1 else 's'})" for source, n in others.items()) + ".")
    caption = "One-off pretraining of each backbone on the synthetic source task"
    if not rows:
        return Table(id="peft-pretraining-table", caption=caption, header=(), rows=(),
                     note=f"n/a: no record of this study started from the suite's own pretraining.{other_text}")
    return Table(id="peft-pretraining-table", caption=caption,
                 header=("backbone", "optimizer steps", "seconds", "source-task held-out accuracy",
                         "its Bayes accuracy", "cached copy reused"), rows=tuple(rows),
                 note="Each backbone is pretrained once and cached; every cell starts from that copy with a fresh "
                      "head. This one-off cost is not in any cell's time, memory or energy." + other_text)


def build_peft_view(records: Sequence[CellRecord]) -> PeftView:
    """The PEFT study's section from its records (its fine-tuning grid and its baselines, no other study's).

    Fine-tuning cells fill the method × strategy tables, winners, ratios and curves, every cell read over all
    its seeds; the foundation-model baselines (:func:`gradeff.analysis.peft.is_baseline`) are set against the
    best fine-tuned cells instead, and both enter the inference-cost tables and the NetScore-family ranking.

    Args:
        records: the PEFT study's records, any number of seeds, in canonical order.

    Returns:
        The section's view; with no records, a view whose ``missing_note`` is all the page prints.
    """
    if not records:
        empty = Table(id="peft-pick-table", caption="", header=(), rows=())
        return PeftView(missing_note=MISSING_NOTE, tuned_note="", versus_full=(), groups=(), ratios=(),
                        budget_ratios=(), curves=FigureView(id="peft-curves", caption="", svg=None),
                        costs=FigureView(id="peft-costs", caption="", svg=None),
                        pretraining=empty, baselines=(), baselines_note="", inference=(), ranking=(),
                        ranking_note="")
    records = peft.sort_peft(records)
    tuned, baselines = peft.split_baselines(records)
    groups = {key: by_cell(group) for key, group in peft.group_by_backbone(tuned).items()}
    strategies = analysis.order_keys((r.strategy for r in tuned), STRATEGIES)
    slugs = {key: html_id(f"{key[0]}-{key[1]}", index, prefix="p") for index, key in enumerate(groups)}
    titles = {key: _group_title(*key, runs) for key, runs in groups.items()}
    baseline_groups = peft.group_by_backbone(baselines)
    baseline_slugs = {key: html_id(f"{key[0]}-{key[1]}", index, prefix="b")
                      for index, key in enumerate(baseline_groups)}
    return PeftView(
        missing_note="",
        tuned_note="" if tuned else TUNED_MISSING_NOTE,
        versus_full=tuple(_versus_table(slugs[key], titles[key], runs) for key, runs in groups.items()),
        groups=tuple(PeftGroupView(slug=slugs[key], title=titles[key], summary=_group_summary(runs),
                                   tables=_group_tables(slugs[key], runs, strategies))
                     for key, runs in groups.items()),
        ratios=_ratio_tables(groups, tuned),
        # Only where the study ran the budget strategy: older results have no such column to divide.
        budget_ratios=_ratio_tables(groups, tuned, "budget") if any(r.strategy == "budget" for r in tuned)
        else (),
        curves=figures.accuracy_curves_figure(groups),
        costs=figures.peft_costs_figure(groups),
        pretraining=_pretraining_table(records),
        baselines=inference.baselines_views(tuned, baselines),
        baselines_note=BASELINES_NOTE if baselines else inference.BASELINES_MISSING_NOTE,
        inference=(*(inference.inference_table(slugs[key], titles[key], group)
                     for key, group in peft.group_by_backbone(tuned).items()),
                   *(inference.inference_table(baseline_slugs[key], _group_title(*key), group)
                     for key, group in baseline_groups.items())),
        ranking=inference.ranking_tables(records),
        ranking_note=inference.RANKING_NOTE,
        scale_note=naming.scale_note(tuned),
    )
