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
from gradeff.analysis import METRICS, Metric, peft
from gradeff.data import TASKS
from gradeff.formatting import NA, as_number, format_percent, format_ratio, format_seconds, format_value
from gradeff.methods import METHODS
from gradeff.models import MODELS
from gradeff.report import figures, inference
from gradeff.report.tables import metric_cell
from gradeff.report.view import (
    Cell, FigureView, PeftGroupView, PeftView, Row, Table, display_name, distinct_text, energy_sources, first_word,
    html_id, status_text,
)
from gradeff.results import CellRecord
from gradeff.strategies import STRATEGIES

__all__ = [
    "BASELINES_NOTE", "MISSING_NOTE", "SANITY_LABEL", "TUNED_MISSING_NOTE", "build_peft_view", "format_count",
    "format_points", "method_label",
]

MISSING_NOTE = "No records of the PEFT study (a grid read by held-out accuracy) in these results."
TUNED_MISSING_NOTE = ("No fine-tuning records of the PEFT study in these results: only its foundation-model "
                      "baselines, below.")
BASELINES_NOTE = ("Foundation models used without fine-tuning, on the same datasets and held-out splits: CLIP and "
                  "SigLIP zero-shot (one text prompt per class), DINOv2 read by a linear probe (its head trained on "
                  "frozen features), two small autoregressive VLMs (SmolVLM, vlm_prompt) prompted to classify (each "
                  "class name's likelihood after a fixed prompt). A zero-shot cell has no epochs: its accuracy comes "
                  "from one evaluation of the held-out split. They are not cells of the method × strategy tables.")
_OBJECTIVE_TITLES = {"accuracy": "Highest accuracy", "memory": "Least memory", "time": "Fastest epoch",
                     "energy": "Least energy"}
_MEMORY_READS = {
    "gpu_alloc": "the torch allocator's peak on the GPU (what the device actually held)",
    "peak": "the live-tensor peak of one training step: the most bytes of tensors alive at once, transients "
            "included, tracked op by op and exact on any device (no GPU allocator peak was recorded)",
    "train_memory": "the breakdown sum: parameters (4-bit weights packed, with their quantisation constants) + "
                    "gradients + optimizer state + activations saved for backward, measured the same way on any "
                    "device (no GPU allocator peak was recorded)",
}
_MEMORY_SOURCES = {"gpu_alloc": "GPU allocator peak", "peak": "live-tensor peak of a step",
                   "train_memory": "breakdown sum"}
_MEMORY_LABELS = {key: f"Training memory ({source})" for key, source in _MEMORY_SOURCES.items()}


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


def _group_title(model: str, dataset: str) -> str:
    return f"{display_name(MODELS, model)} on {display_name(TASKS, dataset)}"


def _group_label(model: str, dataset: str) -> str:
    # "CIFAR-100 (synthetic, 100 classes)" → "CIFAR-100": row headers stay one line.
    return f"{display_name(MODELS, model)} · {first_word(display_name(TASKS, dataset))}"


def _memory_metric(records: Sequence[CellRecord]) -> Metric:
    key = peft.memory_metric_for(records) or "train_memory"
    return METRICS[key]


def _method_table(slug: str, caption: str, metric: Metric, records: Sequence[CellRecord], strategies: Sequence[str],
                  text: Callable[[CellRecord, float], tuple[str, str]], note: str) -> Table:
    """A method × strategy table of one metric of one backbone and dataset, the best ok cell highlighted."""
    table_id = f"{slug}-{metric.key}"
    if not any(analysis.metric_value(r, metric) is not None for r in records):
        return Table(id=table_id, caption=caption, header=(), rows=(),
                     note=f"n/a: not measured for any cell of this backbone and dataset. {note}".strip())
    best = analysis.best_value(records, metric)
    by_cell = {(r.method, r.strategy): r for r in records}
    methods = analysis.order_keys((r.method for r in records), METHODS)
    rows = tuple(Row(label=display_name(METHODS, method),
                     cells=tuple(metric_cell(by_cell.get((method, st)), metric, best, text=text,
                                                best_title="best of this backbone and dataset")
                                    for st in strategies))
                 for method in methods)
    goal = "lower is better" if metric.goal == "min" else "higher is better"
    return Table(id=table_id, caption=caption, header=("method", *strategies), rows=rows,
                 note=f"Best ok cell highlighted; {goal}. {note}".strip())


def _accuracy_caption(records: Sequence[CellRecord]) -> str:
    ceilings = sorted({c for c in (peft.bayes_accuracy(r) for r in records) if c is not None})
    if not ceilings:
        ceiling = "Bayes accuracy of this split unknown"
    elif len(ceilings) == 1:
        ceiling = f"ceiling: the Bayes classifier's {format_percent(ceilings[0])} on this split"
    else:
        ceiling = (f"the cells' splits differ: Bayes accuracy {format_percent(ceilings[0])} to "
                   f"{format_percent(ceilings[-1])}")
    return f"Final held-out top-1 accuracy ({ceiling})"


SANITY_LABEL = "1-NN on raw pixels (sanity baseline)"


def _with_sanity_row(table: Table, records: Sequence[CellRecord], strategies: Sequence[str]) -> Table:
    """The accuracy table with the raw-pixel 1-NN's accuracy as its last row, and every cell that does not
    beat it flagged: such an accuracy says nothing about the fine-tuning method."""
    baselines = sorted({b for b in (peft.pixel_baseline_accuracy(r) for r in records) if b is not None})
    if not table.rows or not baselines:
        return table
    by_cell = {(r.method, r.strategy): r for r in records}
    rows = []
    for row, method in zip(table.rows, analysis.order_keys((r.method for r in records), METHODS), strict=True):
        cells = []
        for cell, strategy in zip(row.cells, strategies, strict=True):
            record = by_cell.get((method, strategy))
            if record is not None and peft.beats_pixel_baseline(record) is False:
                cell = Cell(text=cell.text, sub="not above 1-NN on pixels", css=f"{cell.css} worse".strip(),
                            title=f"does not beat the raw-pixel 1-NN baseline "
                                  f"({format_percent(peft.pixel_baseline_accuracy(record))}) on this split: this "
                                  "accuracy says nothing about the fine-tuning method")
            cells.append(cell)
        rows.append(Row(label=row.label, cells=tuple(cells)))
    text = ", ".join(format_percent(b) for b in baselines)
    rows.append(Row(label=SANITY_LABEL, cells=tuple(Cell(text=text, css="text", title="no training, no features: "
                                                         "each test image takes the label of its nearest training "
                                                         "image") for _ in strategies)))
    note = (f"{table.note} Last row: a 1-nearest-neighbour classifier on raw pixels against the same training "
            "split; a cell marked 'not above 1-NN on pixels' (in italics) learned nothing pixel matching did not.")
    return Table(id=table.id, caption=table.caption, header=table.header, rows=tuple(rows), note=note)


def _parameters_text(record: CellRecord, value: float) -> tuple[str, str]:
    share, total = peft.trainable_percent(record), peft.total_parameters(record)
    return format_count(value), "" if share is None else f"{_share(share)} of {format_count(total)}"


def _group_tables(slug: str, records: Sequence[CellRecord], strategies: Sequence[str]) -> tuple[Table, ...]:
    memory = _memory_metric(records)
    sources = energy_sources(records)

    def unit(metric: Metric) -> Callable[[CellRecord, float], tuple[str, str]]:
        return lambda record, value: (format_value(value, metric.unit), "")

    accuracy, seconds, energy = METRICS["heldout_accuracy"], METRICS["epoch_seconds"], METRICS["energy"]
    return (
        _with_sanity_row(_method_table(slug, _accuracy_caption(records), accuracy, records, strategies,
                                       unit(accuracy), "The last epoch's accuracy on the held-out split the cell "
                                                       "never trains on."), records, strategies),
        _method_table(slug, "Trainable parameters (count, and share of all the model's parameters)", peft.TRAINABLE,
                      records, strategies, _parameters_text,
                      "4-bit weights count the values they hold; adapters count in the total."),
        _method_table(slug, _MEMORY_LABELS[memory.key], memory, records, strategies, unit(memory),
                      f"Read on {_MEMORY_READS[memory.key]}."),
        _method_table(slug, "Time per epoch", seconds, records, strategies, unit(seconds),
                      "Training only: the held-out evaluation after each epoch is not timed."),
        _method_table(slug, "Energy", energy, records, strategies, unit(energy),
                      f"Energy source: {', '.join(sources) if sources else 'none recorded'}."),
    )


def _group_summary(records: Sequence[CellRecord]) -> str:
    counts = Counter(r.status for r in records)
    weights = distinct_text(r.weights.get("source") if isinstance(r.weights, Mapping) else None for r in records)
    samples = distinct_text(
        f"{r.task.get('train_samples', NA)} / {r.task.get('heldout_samples', NA)}" if isinstance(r.task, Mapping)
        else NA for r in records)
    return (f"{len(records)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items())
            + f"; starting weights: {weights}; training / held-out samples: {samples}")


def _pick_table(groups: Mapping[tuple[str, str], Sequence[CellRecord]]) -> Table:
    rows = []
    for (model, dataset), records in groups.items():
        cells = []
        for objective, winner in peft.winners(records).items():
            if winner.record is None:
                cells.append(Cell(text=NA, css="na", title="no ok cell of this backbone and dataset measured it"))
                continue
            metric = METRICS[winner.metric]
            cells.append(Cell(text=method_label(winner.record), css="text",
                              sub=f"{format_value(winner.value, metric.unit)} ({metric.label})"))
        rows.append(Row(label=_group_label(model, dataset), cells=tuple(cells)))
    return Table(id="peft-pick-table", caption="Which method and strategy to use, per backbone, dataset and goal",
                 header=("backbone · dataset", *(_OBJECTIVE_TITLES[o] for o in peft.OBJECTIVES)), rows=tuple(rows),
                 note="Only cells that trained every epoch (status ok) compete; a tie goes to the first cell in "
                      "method, then strategy order. Memory: the GPU allocator peak where measured for the backbone "
                      "and dataset, else the training-memory breakdown sum.")


def _ratio_cell(value: float | None, reason: str) -> Cell:
    if value is None:
        return Cell(text=NA, css="na", title=reason)
    shown = round(value, 2)  # judged as printed: 0.999 reads "1.00×" and must not look like a win
    css = "better" if shown < 1 else "worse" if shown > 1 else ""
    return Cell(text=format_ratio(value), sub=f"{(value - 1) * 100:+.0f} %", css=css)


def _versus_row(versus: peft.Versus) -> Row:
    record, reference = versus.record, versus.reference
    if record.status != "ok":
        return Row(label=method_label(record),
                   cells=(Cell(text=status_text(record), css=f"status {record.status}", title=record.detail),)
                   + (Cell(text=NA, css="na", title="the cell did not end ok"),) * 3)
    if reference is None:
        reason = "no full fine-tuning cell with this strategy"
    elif reference.status != "ok":
        reason = f"full fine-tuning + {reference.strategy} ended {reference.status}"
    else:
        reason = "not measured for this cell or for full fine-tuning"
    points = versus.accuracy_points
    shown = None if points is None else round(points, 1)
    accuracy = Cell(text=NA, css="na", title=reason) if points is None else \
        Cell(text=format_points(points), css="better" if shown > 0 else "worse" if shown < 0 else "")
    return Row(label=method_label(record), cells=(accuracy, *(_ratio_cell(v, reason) for v in
                                                              (versus.memory, versus.time, versus.energy))))


def _versus_table(slug: str, model: str, dataset: str, records: Sequence[CellRecord]) -> Table:
    memory = _memory_metric(records)
    rows = tuple(_versus_row(v) for v in peft.versus_full(records, memory.key))
    caption = f"{_group_title(model, dataset)}: each method against full fine-tuning with the same strategy"
    if not rows:
        return Table(id=f"{slug}-versus-full", caption=caption, header=(), rows=(),
                     note="n/a: only full fine-tuning ran for this backbone and dataset.")
    return Table(id=f"{slug}-versus-full", caption=caption,
                 header=("method + strategy", "held-out accuracy", "training memory", "time per epoch", "energy"),
                 rows=rows,
                 note="Accuracy: percentage points above (+) or below (-) full fine-tuning; memory, time and "
                      "energy: ratio to full fine-tuning and the change in percent. Bold: better than full "
                      f"fine-tuning; italic: worse. n/a: a side is missing, failed or unmeasured. Memory: the "
                      f"{_MEMORY_SOURCES[memory.key]}.")


# What each strategy divided by standard stands for in the paper (the notes of its ratio tables).
_RATIO_MEANINGS = {
    "checkpoint": "checkpoint: the paper's static activation checkpointing; standard: its 'none'.",
    "budget": "budget: the paper's budget-adaptive checkpointing, which checkpoints the fewest blocks whose "
              "predicted peak fits the budget less its margin (the profile's absolute budget); standard: its "
              "'none'. Its claim, read per backbone, is in 'Memory strategies'.",
}


def _ratio_tables(groups: Mapping[tuple[str, str], Sequence[CellRecord]], records: Sequence[CellRecord],
                  numerator: str = "checkpoint") -> tuple[Table, ...]:
    """``numerator`` / standard ratios of training memory, time per epoch and energy: methods × backbone · dataset."""
    columns = list(groups)
    methods = analysis.order_keys((r.method for r in records), METHODS)
    memory = _memory_metric(records)
    # The checkpoint tables keep their ids (peft-ratio-<metric>) for links into earlier reports.
    prefix = "peft-ratio" if numerator == "checkpoint" else f"peft-ratio-{numerator}"
    meaning = _RATIO_MEANINGS.get(numerator, f"{numerator} against standard.")
    tables = []
    for metric in (memory, METRICS["epoch_seconds"], METRICS["energy"]):
        ratios = peft.checkpoint_ratios(records, metric, numerator=numerator)
        measured = any(r is not None for r in ratios.values())
        rows = []
        for method in methods:
            if not any((model, dataset, method) in ratios for model, dataset in columns):
                continue
            rows.append(Row(label=display_name(METHODS, method), cells=tuple(
                _ratio_cell(ratios.get((model, dataset, method)), f"needs both {numerator} and standard ok and "
                                                                   "measured") for model, dataset in columns)))
        label = _MEMORY_LABELS.get(metric.key, metric.label)
        tables.append(Table(
            id=f"{prefix}-{metric.key}",
            caption=f"{label}: {display_name(STRATEGIES, numerator)} / {display_name(STRATEGIES, 'standard')}",
            header=("method", *(f"{model} / {dataset}" for model, dataset in columns)) if measured else (),
            rows=tuple(rows) if measured else (),
            note=(f"{meaning} Bold: it lowers the figure (< 1); italic: it raises it (> 1)." if measured else
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
    others = Counter(r.weights.get("source", NA) if isinstance(r.weights, Mapping) else NA for r in records
                     if r.model not in by_backbone)
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
    """The PEFT study's section from its records.

    Fine-tuning cells fill the method × strategy tables, winners, ratios and curves; the foundation-model
    baselines (:func:`gradeff.analysis.peft.is_baseline`) are set against the best fine-tuned cells instead,
    and both enter the inference-cost tables and the NetScore-family ranking.

    Args:
        records: the records of grids read by held-out accuracy, one per cell (a cell's latest).

    Returns:
        The section's view; with no records, a view whose ``missing_note`` is all the page prints.
    """
    if not records:
        empty = Table(id="peft-pick-table", caption="", header=(), rows=())
        return PeftView(missing_note=MISSING_NOTE, tuned_note="", pick=empty, versus_full=(), groups=(), ratios=(),
                        budget_ratios=(), curves=FigureView(id="peft-curves", caption="", svg=None),
                        pretraining=empty, baselines=(), baselines_note="", inference=(), ranking=(),
                        ranking_note="")
    records = peft.sort_peft(records)
    tuned, baselines = peft.split_baselines(records)
    groups = peft.group_by_backbone(tuned)
    strategies = analysis.order_keys((r.strategy for r in tuned), STRATEGIES)
    slugs = {key: html_id(f"{key[0]}-{key[1]}", index, prefix="p") for index, key in enumerate(groups)}
    baseline_groups = peft.group_by_backbone(baselines)
    baseline_slugs = {key: html_id(f"{key[0]}-{key[1]}", index, prefix="b")
                      for index, key in enumerate(baseline_groups)}
    return PeftView(
        missing_note="",
        tuned_note="" if tuned else TUNED_MISSING_NOTE,
        pick=_pick_table(groups),
        versus_full=tuple(_versus_table(slugs[key], *key, group) for key, group in groups.items()),
        groups=tuple(PeftGroupView(slug=slugs[key], title=_group_title(*key), summary=_group_summary(group),
                                   tables=_group_tables(slugs[key], group, strategies))
                     for key, group in groups.items()),
        ratios=_ratio_tables(groups, tuned),
        # Only where the study ran the budget strategy: older results have no such column to divide.
        budget_ratios=_ratio_tables(groups, tuned, "budget") if any(r.strategy == "budget" for r in tuned)
        else (),
        curves=figures.accuracy_curves_figure(groups),
        pretraining=_pretraining_table(records),
        baselines=inference.baselines_views(tuned, baselines),
        baselines_note=BASELINES_NOTE if baselines else inference.BASELINES_MISSING_NOTE,
        inference=(*(inference.inference_table(slugs[key], _group_title(*key), group) for key, group in groups.items()),
                   *(inference.inference_table(baseline_slugs[key], _group_title(*key), group)
                     for key, group in baseline_groups.items())),
        ranking=inference.ranking_tables(records),
        ranking_note=inference.RANKING_NOTE,
    )
