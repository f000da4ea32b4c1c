"""The report's tables: optimizer × strategy grids (paper Tables 4–19), best cells (Table 2),
recommendations (Figure 1) and strategy ratios (Table 3), as :class:`~gradeff.report.view.Table` values.

Numbers are formatted here; a failed cell shows its status instead of a number, an unmeasured
one ``n/a`` with the reason in its tooltip or the table's note.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from gradeff import analysis
from gradeff.analysis import METRICS, Metric
from gradeff.formatting import NA, as_number, format_loss, format_ratio, format_value
from gradeff.models import MODELS
from gradeff.optim import OPTIMIZERS
from gradeff.registry import Registry
from gradeff.report.view import (
    Cell, Row, Table, config_label, display_name, energy_sources, first_word, status_text,
)
from gradeff.results import CellRecord
from gradeff.strategies import STRATEGIES

__all__ = [
    "BEST_METRICS", "GRID_METRICS", "best_loss_table", "best_table", "grid_metrics_for", "grid_table",
    "protocol_tables", "ratio_tables", "recommendation_table", "target_table",
]

# The paper's per-model tables: loss (4–7), GPU utilization (8–11), RAM (12–15), time (16–19),
# plus the held-out accuracy, memory and energy columns gradeff measures beyond the paper.
GRID_METRICS = ("mean_loss", "final_loss", "heldout_accuracy", "epoch_seconds", "gpu_util", "mfu", "ram_peak",
                "ram_percent", "gpu_mem", "gpu_alloc", "activation", "train_memory", "energy")
# Shown only for a model that measured it: a language model has no held-out accuracy to be missing, and MFU
# needs a device peak no CPU has, whereas a GPU meter that read nothing is worth a note.
_WHERE_MEASURED = ("heldout_accuracy", "mfu")
BEST_METRICS = ("final_loss", "mean_loss", "epoch_seconds", "gpu_util", "ram_peak", "gpu_alloc",
                "train_memory", "energy")
_RATIO_PAIRS = (("checkpoint", "standard"), ("accum", "standard"))
_OBJECTIVE_TITLES = {"loss": "Lowest final loss", "time": "Fastest epoch", "memory": "Least memory",
                     "energy": "Least energy"}


def metric_cell(record: CellRecord | None, metric: Metric, best: float | None, *, best_title: str = "best of this model",
                text: Callable[[CellRecord, float], tuple[str, str]] | None = None) -> Cell:
    """One table cell of a metric: its value (best highlighted), a failed cell's status, or ``n/a`` with why.

    Args:
        record: the cell's record, or ``None`` when the results do not have it.
        metric: what the cell shows.
        best: the best value among the table's cells, highlighted where equal.
        best_title: the tooltip of the best cell.
        text: ``(record, value) → (text, second line)``; default: the value in the metric's unit.
    """
    if record is None:
        return Cell(text=NA, css="na", title="cell not in the results")
    if record.status != "ok":
        return Cell(text=status_text(record), css=f"status {record.status}", title=record.detail)
    value = analysis.metric_value(record, metric)
    if value is None:
        odd = analysis.nonfinite_value(record, metric)
        if odd is not None:
            # Measured, and the measurement is not a number: shown as such, never as "n/a" (not measured).
            return Cell(text="NaN" if math.isnan(odd) else "inf" if odd > 0 else "-inf", css="nonfinite",
                        title="measured, but not a finite number: left out of every best, mean and ranking")
        return Cell(text=NA, css="na", title="not measured")
    main, sub = text(record, value) if text is not None else (format_value(value, metric.unit), "")
    is_best = best is not None and value == best
    return Cell(text=main, sub=sub, css="best" if is_best else "", title=best_title if is_best else "")


def _metric_note(metric: Metric, records: Sequence[CellRecord]) -> str:
    notes = []
    if metric.key in ("gpu_util", "gpu_mem", "gpu_alloc"):
        devices = sorted({r.device for r in records})
        notes.append(f"GPU meters read nothing on device {', '.join(devices)}")
    if metric.key == "energy":
        sources = energy_sources(records)
        notes.append(f"energy source: {', '.join(sources) if sources else 'none recorded'}")
    if metric.key in ("activation", "train_memory"):
        notes.append("needs the memory-breakdown meter (older records do not have it)")
    return "; ".join(notes)


def grid_metrics_for(records: Sequence[CellRecord]) -> tuple[str, ...]:
    """The :data:`GRID_METRICS` a model's tables show: all of them, less held-out accuracy where no cell measured it.

    Args:
        records: one model's records.

    Returns:
        Metric keys, in table order.
    """
    return tuple(key for key in GRID_METRICS if key not in _WHERE_MEASURED
                 or any(analysis.metric_value(r, key) is not None for r in records))


_OVER_SEEDS_NOTE = ("Mean over seeds ± half-width of the 95 % Student-t interval (n = seeds that ended ok); "
                    "highlighted: the best mean and every cell Welch's t-test (5 %) cannot tell from it.")


def _seeds_cell(record: CellRecord | None, runs: Sequence[CellRecord], metric: Metric, tied: set[str],
                best: str | None) -> Cell:
    """A cell repeated over seeds: the mean ± 95 % t-interval half-width of its ok seeds, or why there is none."""
    from gradeff.analysis.stats import interval

    if record is None:
        return Cell(text=NA, css="na", title="cell not in the results")
    ok = [r for r in runs if analysis.comparable(r)]
    values = [v for v in (analysis.metric_value(r, metric) for r in ok) if v is not None]
    if not ok:
        return metric_cell(record, metric, None)
    if not values:
        return Cell(text=NA, css="na", title="not measured")
    spread = interval(values)
    failed = len(runs) - len(ok)
    sub = (f"± {format_value(spread.half_width, metric.unit)} " if spread.n > 1 else "") + f"(n={spread.n})"
    if failed:
        sub += f", {failed} seed{'s' * (failed > 1)} not ok"
    css = "best" if record.cell in tied else ""
    title = ("best mean over seeds" if record.cell == best else
             "tied with the best: Welch's t-test (5 %) cannot tell them apart") if css else ""
    return Cell(text=format_value(spread.mean, metric.unit), sub=sub, css=css, title=title)


def grid_table(model_slug: str, name: str, metric: Metric, records: Sequence[CellRecord],
               optimizers: Sequence[str], strategies: Sequence[str],
               runs: Mapping[str, Sequence[CellRecord]] | None = None) -> Table:
    """One model's optimizer × strategy table of one metric, best cell highlighted (paper Tables 4–19).

    Args:
        model_slug: the model's HTML id prefix.
        name: the model's display name.
        metric: what the cells show.
        records: the model's records, one per cell.
        optimizers: row keys, in order.
        strategies: column keys, in order.
        runs: cell id → its records over seeds. Where a cell has several, every cell shows its mean over
            seeds with a 95 % t-interval, and the best mean and the cells tied with it by Welch's t-test
            are highlighted.

    Returns:
        The table, or a row-less table whose note says the metric was not measured for this model.
    """
    by_cell = {(r.optimizer, r.strategy): r for r in records}
    paper = f" (paper {metric.paper})" if metric.paper else ""
    caption = f"{metric.label}{paper}"  # the model is the heading above
    table_id = f"{model_slug}-{metric.key}"
    if not any(analysis.metric_value(r, metric) is not None for r in records):
        return Table(id=table_id, caption=caption, header=(), rows=(),
                     note=f"n/a: not measured for any cell of this model ({_metric_note(metric, records)}).")
    repeated = runs is not None and any(len(runs.get(r.cell, ())) > 1 for r in records)
    if repeated:
        from gradeff.analysis.stats import winners

        samples = {r.cell: [v for v in (analysis.metric_value(x, metric) for x in runs.get(r.cell, (r,))
                                        if analysis.comparable(x)) if v is not None] for r in records}
        found = winners(samples, goal=metric.goal)
        tied, best_cell = (set(found.ties), found.best) if found is not None else (set(), None)

        def shown(record: CellRecord | None) -> Cell:
            return _seeds_cell(record, runs.get(record.cell, (record,)) if record else (), metric, tied, best_cell)
    else:
        best = analysis.best_value(records, metric)

        def shown(record: CellRecord | None) -> Cell:
            return metric_cell(record, metric, best)
    rows = tuple(
        Row(label=display_name(OPTIMIZERS, opt), cells=tuple(shown(by_cell.get((opt, st))) for st in strategies))
        for opt in optimizers
    )
    note = "Best cell highlighted; lower is better." if metric.goal == "min" else \
        "Best cell highlighted; higher is better."
    if repeated:
        note = f"{_OVER_SEEDS_NOTE} {'Lower' if metric.goal == 'min' else 'Higher'} is better."
    if metric.key == "gpu_util" and any(analysis.meter_section(r, "gpu").get("short_window") for r in records):
        note += " Some runs were shorter than NVML's sampling window: their utilization is approximate."
    if metric.key == "energy":
        note += f" {_metric_note(metric, records).capitalize()}."
    # Strategy keys as column heads: the words of ``-k accum``, and narrow enough for two tables a row.
    return Table(id=table_id, caption=caption, header=("optimizer", *strategies), rows=rows, note=note)


def recommendation_table(models: Sequence[str], records: Sequence[CellRecord]) -> tuple[Table, tuple[str, ...]]:
    """Per model, the optimizer + strategy that wins loss, time, memory and energy (paper Figure 1).

    Args:
        models: model keys, in order.
        records: one record per cell and seed: a cell with several seeds competes with its mean, and cells
            Welch's t-test cannot tell from the winner are shown as ties and tallied as ties.

    Returns:
        The table, and lines tallying how often each optimizer and strategy wins.
    """
    recs = analysis.recommendations(records)
    rows = []
    for model in models:
        cells = []
        for objective in analysis.OBJECTIVES:
            rec = recs[model][objective]
            if rec.record is None:
                cells.append(Cell(text=NA, css="na", title="no ok cell of this model measured it"))
                continue
            metric = METRICS[rec.metric]
            spread = rec.interval
            value = format_value(rec.value, metric.unit)
            if spread is not None and spread.n > 1:
                value += f" ± {format_value(spread.half_width, metric.unit)} (n={spread.n})"
            others = [config_label(r) for r in rec.ties[1:]]
            cells.append(Cell(text=config_label(rec.record) + (f"; tied: {', '.join(others)}" if others else ""),
                              css="text", sub=f"{value} ({metric.label})",
                              title="tied: Welch's t-test (5 %) over seeds cannot tell these cells from the best"
                              if others and rec.confirmed else "equal values" if others else ""))
        rows.append(Row(label=display_name(MODELS, model), cells=tuple(cells)))
    confirmed = any(rec.confirmed for per_model in recs.values() for rec in per_model.values())
    significance = ("Cells with several seeds compete with their mean ± 95 % t-interval; a cell Welch's t-test (5 %) "
                    "cannot tell from the winner is listed as tied and a tie is tallied as a tie."
                    if confirmed else "One seed per cell: each winner is a single draw, not a significant result "
                    "(--gradeff-seeds 3 runs each cell over three seeds); only equal values are listed as tied.")
    table = Table(id="recommendation-table", caption="Which optimizer and strategy to use, per model and goal",
                  header=("model", *(_OBJECTIVE_TITLES[o] for o in analysis.OBJECTIVES)), rows=tuple(rows),
                  note="Only cells that trained every epoch (status ok) compete. Memory compares, per model, the "
                       "first of: torch allocator peak, live-tensor peak of a step, training-memory breakdown, "
                       f"process RSS that was measured. {significance}")
    optimizer_wins, strategy_wins = analysis.tally_wins(recs)
    total = sum(optimizer_wins.values())
    wins = (
        f"Optimizer wins ({total} best paths): " + _tally(optimizer_wins, OPTIMIZERS),
        "Strategy wins: " + _tally(strategy_wins, STRATEGIES),
    ) if total else ("No cell ended ok: nothing to recommend.",)
    return table, wins


def _tally(counter: Counter, registry: Registry) -> str:
    wins = ", ".join(f"{display_name(registry, key)} {count}" for key, count in counter.most_common()
                     if key != analysis.TIE)
    ties = counter.get(analysis.TIE, 0)
    return wins + (f"{', ' if wins else ''}tied {ties}" if ties else "")


def best_loss_table(models: Sequence[str], groups: Mapping[str, Sequence[CellRecord]]) -> Table:
    """Best final loss per model, with its configuration and the task's loss floor (paper Table 2).

    Args:
        models: model keys, in order.
        groups: model key → its records.

    Returns:
        One row per model.
    """
    rows = []
    for model in models:
        best = analysis.best_cell(groups[model], "final_loss")
        floors = {f for f in (as_number(r.loss_floor) for r in groups[model]) if f is not None}
        floor = min(floors) if floors else None
        if best is None:
            cells = (Cell(text=NA, css="na", title="no ok cell"),) * 3
        else:
            loss = analysis.metric_value(best, "final_loss")
            cells = (Cell(text=display_name(OPTIMIZERS, best.optimizer), css="text"),
                     Cell(text=display_name(STRATEGIES, best.strategy), css="text"), Cell(text=format_loss(loss)))
        gap = (analysis.metric_value(best, "final_loss") - floor) if best is not None and floor is not None \
            else None
        rows.append(Row(label=display_name(MODELS, model),
                        cells=(*cells, Cell(text=format_loss(floor), css="" if floor is not None else "na"),
                               Cell(text=format_loss(gap), css="" if gap is not None else "na"))))
    return Table(id="best-loss", caption="Best final training loss achieved by each model",
                 header=("model", "optimizer", "strategy", "final loss", "loss floor", "above floor"),
                 rows=tuple(rows), note="Loss floor: mean cross-entropy of the Bayes-optimal predictor on the same "
                                        "samples; only memorising the training set goes below it.")


def best_table(models: Sequence[str], groups: Mapping[str, Sequence[CellRecord]]) -> Table:
    """Best value and configuration per model and metric.

    Args:
        models: model keys, in order.
        groups: model key → its records.

    Returns:
        Models as rows, :data:`BEST_METRICS` as columns.
    """
    rows = []
    for model in models:
        cells = []
        for key in BEST_METRICS:
            best = analysis.best_cell(groups[model], key)
            if best is None:
                cells.append(Cell(text=NA, css="na", title="not measured for any ok cell"))
            else:
                cells.append(Cell(text=format_value(analysis.metric_value(best, key), METRICS[key].unit),
                                  sub=config_label(best)))
        rows.append(Row(label=display_name(MODELS, model), cells=tuple(cells)))
    return Table(id="best-per-metric", caption="Best cell per model and metric",
                 header=("model", *(METRICS[k].label for k in BEST_METRICS)), rows=tuple(rows),
                 note="Utilization: higher is better; every other metric: lower is better.")


def ratio_tables(models: Sequence[str], optimizers: Sequence[str],
                 records: Sequence[CellRecord]) -> tuple[Table, ...]:
    """Checkpoint/standard and accum/standard ratios of loss, time and memory per optimizer (paper Table 3).

    Args:
        models: model keys (columns), in order.
        optimizers: optimizer keys (rows), in order.
        records: one record per cell.

    Returns:
        One table per strategy pair and metric.
    """
    memory_metric = analysis.memory_metric_for(records) or "train_memory"
    tables = []
    for top, bottom in _RATIO_PAIRS:
        for key in ("mean_loss", "final_loss", "epoch_seconds", memory_metric):
            metric = METRICS[key]
            ratios = analysis.strategy_ratios(records, metric, numerator=top, denominator=bottom)
            pairs = {m: {o for (mm, o) in ratios if mm == m} for m in models}
            rows = []
            for opt in optimizers:
                if not any(opt in pairs[m] for m in models):
                    continue
                cells = []
                for model in models:
                    ratio = ratios.get((model, opt))
                    # Judged as printed: 0.999 reads "1.00×" and must not look like a win.
                    shown = None if ratio is None else round(ratio, 2)
                    css = "na" if shown is None else "better" if shown < 1 else "worse" if shown > 1 else ""
                    cells.append(Cell(text=format_ratio(ratio), css=css,
                                      title="" if ratio is not None else
                                      f"needs both {top} and {bottom} ok and measured"))
                rows.append(Row(label=display_name(OPTIMIZERS, opt), cells=tuple(cells)))
            paper = " (paper Table 3)" if (top, key) == ("checkpoint", "mean_loss") else ""
            caption = f"{metric.label}: {display_name(STRATEGIES, top)} / {display_name(STRATEGIES, bottom)}{paper}"
            measured = any(r is not None for r in ratios.values())
            tables.append(Table(
                id=f"ratio-{top}-{key}", caption=caption,
                header=("optimizer", *(first_word(display_name(MODELS, m)) for m in models)) if measured else (),
                rows=tuple(rows) if measured else (),
                note=(f"Bold: {top} lowers it (< 1); italic: it raises it (> 1)." if measured else
                      f"n/a: no optimizer has both {top} and {bottom} cells that ended ok with this metric.")))
    return tuple(tables)


def _target_cell(record: CellRecord | None, fastest: int | None) -> Cell:
    if record is None:
        return Cell(text=NA, css="na", title="cell not in the results")
    if record.status != "ok":
        return Cell(text=status_text(record), css=f"status {record.status}", title=record.detail)
    summary = record.summary
    test = f"test loss {format_loss(as_number(summary.final_heldout_loss))}"
    steps = as_number(summary.steps_to_target)
    if steps is None:
        reached = getattr(summary, "target_reached", None)
        return Cell(text="not reached" if reached is False else NA, css="na", sub=test,
                    title="the test loss never reached the target" if reached is False else "no test split")
    seconds = format_value(as_number(summary.seconds_to_target), "seconds")
    best = fastest is not None and steps == fastest
    return Cell(text=f"{steps:.0f} steps", sub=f"{seconds}; {test}", css="best" if best else "",
                title="fewest steps to the target" if best else "")


def target_table(model_slug: str, records: Sequence[CellRecord], optimizers: Sequence[str],
                 strategies: Sequence[str]) -> Table:
    """One model's optimizer × strategy table of time to the test-loss target (AlgoPerf's measure).

    Each cell: optimizer steps to the target (evaluated every ``eval_every`` steps outside the timing), the
    training seconds they took, and the final test loss; ``not reached`` where the test loss never got there,
    ``n/a`` where there is no test split.
    """
    by_cell = {(r.optimizer, r.strategy): r for r in records}
    reached = [as_number(r.summary.steps_to_target) for r in records if r.status == "ok"]
    reached = [steps for steps in reached if steps is not None]
    targets = {round(t, 4) for t in (as_number(r.summary.target_loss) for r in records) if t is not None}
    target = f"target test loss {', '.join(map(str, sorted(targets)))}: " if targets else ""
    rows = tuple(Row(label=display_name(OPTIMIZERS, opt),
                     cells=tuple(_target_cell(by_cell.get((opt, st)), min(reached) if reached else None)
                                 for st in strategies)) for opt in optimizers)
    every = sorted({r.evaluation.get("every_steps") for r in records
                    if isinstance(r.evaluation, Mapping) and r.evaluation.get("every_steps")})
    return Table(id=f"{model_slug}-to-target", caption="Optimizer steps to the target test loss",
                 header=("optimizer", *strategies), rows=rows,
                 note=f"{target}halfway from the untrained model's test loss to the test split's floor. "
                      f"{len(reached)} of {len(records)} cells reached it. The test split is evaluated "
                      + (f"every {', '.join(map(str, every))} optimizer steps and " if every else "")
                      + "after each epoch, outside the timed epochs; seconds are training seconds.")


def protocol_tables(records: Sequence[CellRecord]) -> tuple[Table, ...]:
    """Where cells ran under both learning-rate protocols: each model's optimizers ranked by final test loss
    under each protocol (the best strategy of each optimizer, mean over seeds), side by side; ``()`` otherwise.

    Args:
        records: every record read (not only the latest of each cell: the two protocols' runs share cell ids).
    """
    latest: dict[tuple, CellRecord] = {}
    for record in records:
        protocol = record.hparams.get("protocol") if isinstance(record.hparams, Mapping) else None
        if protocol and record.grid == "main":
            latest[(protocol, record.cell, record.seed)] = record
    protocols = tuple(dict.fromkeys(key[0] for key in latest))
    if len(protocols) < 2:
        return ()
    models = tuple(dict.fromkeys(r.model for r in latest.values()))
    rows = []
    for model in models:
        cells = []
        for protocol in protocols:
            losses: dict[str, dict[str, list[float]]] = {}
            for (p, _, _), r in latest.items():
                value = as_number(r.summary.final_heldout_loss)
                if p == protocol and r.model == model and r.status == "ok" and value is not None:
                    losses.setdefault(r.optimizer, {}).setdefault(r.strategy, []).append(value)
            best = {opt: min(sum(v) / len(v) for v in by_strategy.values()) for opt, by_strategy in losses.items()}
            ranking = sorted(best, key=best.get)
            cells.append(Cell(text=" < ".join(display_name(OPTIMIZERS, o) for o in ranking) or NA, css="text",
                              sub=", ".join(f"{format_loss(best[o])}" for o in ranking)))
        rows.append(Row(label=display_name(MODELS, model), cells=tuple(cells)))
    return (Table(id="protocol-rankings", caption="Optimizers ranked by final test loss under each learning-rate "
                                                  "protocol", header=("model", *protocols), rows=tuple(rows),
                  note="tuned: each optimizer at its own rate from the tuned table (searched on the validation "
                       "split); shared: one rate per model for every optimizer, as in the paper. Each optimizer by "
                       "its best strategy; lower is better."),)
