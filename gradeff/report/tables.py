"""The main study's tables: optimizer × strategy grids (paper Tables 4–19), best cells (Table 2),
recommendations (Figure 1) and strategy ratios (Table 3), as :class:`~gradeff.report.view.Table` values.

Every table reads cells over all their seeds (:class:`~gradeff.analysis.runs.CellRuns`): a value is the
mean over the seeds that ended ok, with the half-width of its 95 % t-interval and ``n`` where there are
several, and the highlighted first place is the ranking's (:func:`gradeff.analysis.pairing.rank`: cells
compared seed by seed, ties named, identical cells merged). The cells are :mod:`gradeff.report.table_cells`'; a
cell whose every seed failed shows its status instead of a number, an unmeasured one ``n/a`` with the reason in
its tooltip or the table's note.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gradeff import analysis
from gradeff.analysis import METRICS, Metric
from gradeff.analysis.answer import verdict_text
from gradeff.analysis.metrics import ANSWER_OBJECTIVES, OBJECTIVE_TITLES, quality_metric
from gradeff.analysis.pairing import EQUIVALENT, IDENTICAL, OPEN, Ranking, rank
from gradeff.analysis.runs import CellRuns
from gradeff.analysis.verdicts import verdict
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.axes.strategies import STRATEGIES
from gradeff.records.fields import SELF_TUNED
from gradeff.records.formatting import NA, as_number, format_loss, format_value
from gradeff.records.results import CellRecord, meter_field, record_field
from gradeff.report.papers import cite
from gradeff.report.table_cells import places, ratio_cell, resolve, runs_cell
from gradeff.report.view import (
    Cell,
    Row,
    Table,
    config_label,
    display_name,
    energy_sources,
    first_word,
    status_text,
)
from gradeff.specs.registry import Registry

__all__ = [
    "BEST_METRICS", "GRID_METRICS", "best_loss_table", "best_table", "grid_metrics_for", "grid_table",
    "protocol_tables", "ratio_tables", "recommendation_table", "target_table",
]

# The per-model tables: the quality metric first (resolved per model), then the paper's tables — loss (4–7),
# GPU utilization (8–11), RAM (12–15), time (16–19) — as diagnostics, and what gradeff measures beyond them.
GRID_METRICS = ("quality", "seconds_to_target", "peak", "joules_to_target", "final_loss", "mean_loss",
                "epoch_seconds", "gpu_util", "mfu", "ram_peak", "ram_percent", "gpu_mem", "gpu_alloc", "activation",
                "train_memory", "energy")
# Shown only for a model that measured it: MFU needs a device peak no CPU has, whereas a GPU meter that read
# nothing is worth a note.
_WHERE_MEASURED = ("mfu",)
BEST_METRICS = ("quality", "final_loss", "seconds_to_target", "epoch_seconds", "peak", "gpu_util", "ram_peak",
                "gpu_alloc", "energy")
_RATIO_PAIRS = (("checkpoint", "standard"), ("accum", "standard"))


def _metric_note(metric: Metric, records: Sequence[CellRecord]) -> str:
    notes = []
    if metric.key in ("gpu_util", "gpu_mem", "gpu_alloc"):
        devices = sorted({r.device for r in records})
        notes.append(f"GPU meters read nothing on device {', '.join(devices)}")
    if metric.key in ("energy", "joules_to_target"):
        sources = energy_sources(records)
        notes.append(f"energy source: {', '.join(sources) if sources else 'none recorded'}")
    if metric.key in ("activation", "train_memory", "peak"):
        notes.append("needs the memory-breakdown meter (older records do not have it)")
    if metric.key in ("seconds_to_target", "joules_to_target"):
        notes.append("no cell reached its target (halfway from the untrained model's test loss to the task's floor)")
    if metric.key == "ram_peak" and not all(analysis.isolated(r) for r in records):
        notes.append("RSS of one long process: a diagnostic, never a winner (run with --gradeff-isolate)")
    return "; ".join(notes)


def grid_metrics_for(records: Sequence[CellRecord]) -> tuple[str, ...]:
    """The :data:`GRID_METRICS` a model's tables show: all of them, less MFU where no cell measured it."""
    return tuple(key for key in GRID_METRICS if key not in _WHERE_MEASURED
                 or any(analysis.metric_value(r, key) is not None for r in records))


_NOTE = ("Mean over the seeds that ended ok; with several: ± half-width of the 95 % Student-t interval (n = seeds). "
         "Highlighted: the best mean, cells identical to it, and cells a paired comparison over seeds (t-test, "
         "Holm, 5 %) cannot tell from it.")


def grid_table(model_slug: str, name: str, metric: Metric, runs: Mapping[str, CellRuns],
               optimizers: Sequence[str], strategies: Sequence[str]) -> Table:
    """One model's optimizer × strategy table of one metric over seeds (paper Tables 4–19).

    Args:
        model_slug: the model's HTML id prefix.
        name: the model's display name.
        metric: what the cells show.
        runs: the model's cells over their seeds.
        optimizers: row keys, in order.
        strategies: column keys, in order.

    Returns:
        The table, or a row-less table whose note says the metric was not measured for this model.
    """
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    by_cell = {(r.first.optimizer, r.first.strategy): r for r in runs.values()}
    paper = f" ({cite(metric.paper)})" if metric.paper else ""
    caption = f"{metric.label}{paper}"  # the model is the heading above
    table_id = f"{model_slug}-{metric.key}"
    if not any(analysis.metric_value(r, metric) is not None for r in records):
        return Table(id=table_id, caption=caption, header=(), rows=(),
                     note=f"n/a: not measured for any cell of this model ({_metric_note(metric, records)}).")
    # RSS of one long process never names a winner: its first cell paid for every import.
    ranked = places(runs, metric) if metric.key != "ram_peak" or all(analysis.isolated(r) for r in records) else {}
    rows = tuple(
        Row(label=display_name(OPTIMIZERS, opt),
            cells=tuple(runs_cell(cell, metric, ranked.get(cell.cell, "") if cell else "")
                        for cell in (by_cell.get((opt, st)) for st in strategies)))
        for opt in optimizers
    )
    note = f"{_NOTE} {'Lower' if metric.goal == 'min' else 'Higher'} is better."
    if metric.key == "gpu_util" and any(meter_field(r, "gpu", "short_window") for r in records):
        note += " Some runs were shorter than NVML's sampling window: their utilization is approximate."
    extra = _metric_note(metric, records) if metric.key in ("energy", "joules_to_target", "ram_peak") else ""
    if extra:
        note += f" {extra[0].upper()}{extra[1:]}."
    # Strategy keys as column heads: the words of ``-k accum``, and narrow enough for two tables a row.
    return Table(id=table_id, caption=caption, header=("optimizer", *strategies), rows=rows, note=note)


def _config_labels(runs: Mapping[str, CellRuns]) -> dict[str, str]:
    return {cell: config_label(r.first) for cell, r in runs.items()}


def recommendation_table(models: Sequence[str], runs_by_model: Mapping[str, Mapping[str, CellRuns]]
                         ) -> tuple[Table, tuple[str, ...]]:
    """Per model, the optimizer + strategy that wins quality, speed, memory and energy (paper Figure 1).

    Args:
        models: model keys, in order.
        runs_by_model: model → its cells over seeds.

    Returns:
        The table, and lines tallying how often each optimizer and strategy wins outright.
    """
    recs = {model: {objective: verdict(runs_by_model[model], objective) for objective in ANSWER_OBJECTIVES}
            for model in models}
    rows = []
    for model in models:
        labels = _config_labels(runs_by_model[model])
        cells = []
        for objective in ANSWER_OBJECTIVES:
            found = recs[model][objective]
            if found.ranking is None:
                cells.append(Cell(text=NA, css="na", title=found.reason))
                continue
            cells.append(Cell(text=verdict_text(found, labels), css="text", sub=found.metric.label,
                              title=_outcome_title(found.ranking)))
        rows.append(Row(label=display_name(MODELS, model), cells=tuple(cells)))
    confirmed = any(v.ranking is not None and v.ranking.n > 1 for per in recs.values() for v in per.values())
    significance = ("Cells run over several seeds are compared seed by seed (paired t-test, Holm-adjusted over the "
                    "model's cells; equivalence by two one-sided tests against the question's margin): a shared "
                    "first place is never tallied as a win." if confirmed else "One seed per cell: every question "
                    "is open (--gradeff-seeds auto spends seeds until the answers are decided).")
    table = Table(id="recommendation-table", caption="Which optimizer and strategy to use, per model and goal",
                  header=("model", *(OBJECTIVE_TITLES[o] for o in ANSWER_OBJECTIVES)), rows=tuple(rows),
                  note="Only seeds that trained every epoch (status ok) compete. Quality: the test split's loss, or "
                       "its top-1 accuracy for a classifier; speed and energy: to the target test loss (a cell that "
                       "missed it on any seed does not compete); memory: the live-tensor peak of a training step. "
                       f"Identical: the same numbers on every seed, one entry. {significance}")
    optimizer_wins, strategy_wins = analysis.tally_wins(recs)
    total = sum(optimizer_wins.values())
    wins = (
        f"Optimizer wins ({total} best paths): " + _tally(optimizer_wins, OPTIMIZERS),
        "Strategy wins: " + _tally(strategy_wins, STRATEGIES),
    ) if total else ("No cell ended ok: nothing to recommend.",)
    return table, wins


def _outcome_title(ranking: Ranking) -> str:
    return {OPEN: "open: neither separated from the best nor shown equivalent yet",
            EQUIVALENT: "equivalent: within the question's margin of the best, with 95 % confidence",
            IDENTICAL: "every cell gave the same numbers"}.get(
        ranking.outcome, "every other cell significantly worse" if ranking.worse else "")


def _tally(counter: Counter, registry: Registry) -> str:
    wins = ", ".join(f"{display_name(registry, key)} {count}" for key, count in counter.most_common()
                     if key != analysis.SHARED)
    shared = counter.get(analysis.SHARED, 0)
    return wins + (f"{', ' if wins else ''}shared {shared}" if shared else "")


def best_loss_table(models: Sequence[str], runs_by_model: Mapping[str, Mapping[str, CellRuns]]) -> Table:
    """Best quality per model, with the training loss of that cell and the task's loss floor (paper Table 2).

    Args:
        models: model keys, in order.
        runs_by_model: model → its cells over seeds.

    Returns:
        One row per model.
    """
    rows = []
    for model in models:
        runs = runs_by_model[model]
        found = verdict(runs, "quality")
        records = [r for cell_runs in runs.values() for r in cell_runs.runs]
        floors = {f for f in (as_number(r.loss_floor) for r in records) if f is not None}
        floor = min(floors) if floors else None
        best = found.best
        if best is None:
            cells = (Cell(text=NA, css="na", title=found.reason),) * 4
            train = None
        else:
            train = best.mean("final_loss")
            cells = (Cell(text=verdict_text(found, _config_labels(runs)), css="text"),
                     Cell(text=found.metric.label, css="text"),
                     runs_cell(best, found.metric), runs_cell(best, METRICS["final_loss"]))
        gap = train - floor if train is not None and floor is not None else None
        rows.append(Row(label=display_name(MODELS, model),
                        cells=(*cells, Cell(text=format_loss(floor), css="" if floor is not None else "na"),
                               Cell(text=format_loss(gap), css="" if gap is not None else "na"))))
    return Table(id="best-loss", caption="Best test quality achieved by each model",
                 header=("model", "configuration", "quality metric", "value", "its training loss", "loss floor",
                         "training loss above floor"),
                 rows=tuple(rows), note="Quality: the test split's loss (top-1 accuracy for a classifier), over "
                                        "seeds. The training loss is a diagnostic: the loss floor is the Bayes-optimal "
                                        "predictor's on the same samples, and only memorising the training set goes "
                                        "below it.")


def best_table(models: Sequence[str], runs_by_model: Mapping[str, Mapping[str, CellRuns]]) -> Table:
    """The best mean over seeds and its configuration, per model and metric.

    Args:
        models: model keys, in order.
        runs_by_model: model → its cells over seeds.

    Returns:
        Models as rows, :data:`BEST_METRICS` as columns (``quality`` read per model).
    """
    rows = []
    for model in models:
        runs = runs_by_model[model]
        records = [r for cell_runs in runs.values() for r in cell_runs.runs]
        cells = []
        for key in BEST_METRICS:
            metric = resolve(key, records)
            ranking = None if key == "ram_peak" and not all(analysis.isolated(r) for r in records) else \
                rank({c: r.values(metric) for c, r in runs.items()}, goal=metric.goal, resolution=metric.resolution,
                     fingerprints={c: r.fingerprint() for c, r in runs.items()})
            if ranking is None:
                cells.append(Cell(text=NA, css="na", title="not measured for any ok cell, or not comparable"))
                continue
            tied = len(ranking.members) - 1
            cells.append(Cell(text=format_value(runs[ranking.best].mean(metric), metric.unit),
                              sub=config_label(runs[ranking.best].first) + (f" (+{tied} tied or identical)"
                                                                             if tied else ""),
                              title=metric.label))
        rows.append(Row(label=display_name(MODELS, model), cells=tuple(cells)))
    return Table(id="best-per-metric", caption="Best cell per model and metric (mean over seeds)",
                 header=("model", "Test quality", *(METRICS[k].label for k in BEST_METRICS[1:])), rows=tuple(rows),
                 note="Test quality: the test loss (lower is better), or top-1 accuracy for a classifier (higher); "
                      "utilization: higher is better; every other metric: lower is better. Process RSS names no "
                      "best unless every cell ran isolated.")


def ratio_tables(models: Sequence[str], optimizers: Sequence[str],
                 records: Sequence[CellRecord]) -> tuple[Table, ...]:
    """Checkpoint/standard and accum/standard ratios of quality, training loss, time and memory, seed by seed
    (paper Table 3).

    Args:
        models: model keys (columns), in order.
        optimizers: optimizer keys (rows), in order.
        records: the main study's records, any number of seeds.

    Returns:
        One table per strategy pair and metric.
    """
    by_model = analysis.group_by_model(records)
    tables = []
    for top, bottom in _RATIO_PAIRS:
        for key in ("quality", "final_loss", "epoch_seconds", "peak"):
            ratios = {}
            for model in models:
                metric = resolve(key, by_model[model])
                ratios |= analysis.strategy_ratios(by_model[model], metric, numerator=top, denominator=bottom)
            label = "Test quality (test loss; top-1 accuracy of a classifier)" if key == "quality" else \
                METRICS[key].label
            pairs = {m: {o for (mm, o) in ratios if mm == m} for m in models}
            rows = []
            for opt in optimizers:
                if not any(opt in pairs[m] for m in models):
                    continue
                rows.append(Row(label=display_name(OPTIMIZERS, opt), cells=tuple(
                    ratio_cell(ratios.get((model, opt)), f"needs both {top} and {bottom} ok and measured on a seed")
                    for model in models)))
            paper = f" ({cite('Table 3')})" if (top, key) == ("checkpoint", "final_loss") else ""
            caption = f"{label}: {display_name(STRATEGIES, top)} / {display_name(STRATEGIES, bottom)}{paper}"
            measured = any(r is not None for r in ratios.values())
            tables.append(Table(
                id=f"ratio-{top}-{key}", caption=caption,
                header=("optimizer", *(first_word(display_name(MODELS, m)) for m in models)) if measured else (),
                rows=tuple(rows) if measured else (),
                note=(f"The mean of each seed's {top} / {bottom} over the seeds both ended ok. Bold: {top} lowers it "
                      "(< 1), italic: it raises it (> 1), where the 95 % interval over seeds excludes 1 (one seed: as "
                      "printed). Identical: the same numbers on every seed." if measured else
                      f"n/a: no optimizer has both {top} and {bottom} cells that ended ok with this metric.")))
    return tuple(tables)


def _target_cell(cell_runs: CellRuns | None, fastest: float | None) -> Cell:
    """Steps to the target, the mean over the seeds that reached it; how many seeds did, where not all."""
    if cell_runs is None:
        return Cell(text=NA, css="na", title="cell not in the results")
    ok = cell_runs.ok
    if not ok:
        first = cell_runs.first
        return Cell(text=status_text(first), css=f"status {first.status}", title=first.detail)
    test = f"test loss {format_loss(cell_runs.mean('test_loss'))}"
    steps = [as_number(r.summary.steps_to_target) for r in ok]
    reached = [s for s in steps if s is not None]
    of_seeds = f" ({len(reached)} of {len(ok)} seeds)" if len(ok) > 1 and len(reached) < len(ok) else ""
    if not reached:
        never = any(getattr(r.summary, "target_reached", None) is False for r in ok)
        return Cell(text="not reached" if never else NA, css="na", sub=test,
                    title="the test loss never reached the target" if never else "no test split")
    mean_steps = sum(reached) / len(reached)
    seconds = [as_number(r.summary.seconds_to_target) for r in ok]
    seconds = [s for s in seconds if s is not None]
    seconds_text = format_value(sum(seconds) / len(seconds) if seconds else None, "seconds")
    # A cell is fastest only when every seed got there: a mean over the lucky seeds is no ranking.
    best = fastest is not None and not of_seeds and mean_steps == fastest
    return Cell(text=f"{mean_steps:.0f} steps{of_seeds}", sub=f"{seconds_text}; {test}", css="best" if best else "",
                title="fewest steps to the target (mean over seeds)" if best else "")


def target_table(model_slug: str, runs: Mapping[str, CellRuns], optimizers: Sequence[str],
                 strategies: Sequence[str]) -> Table:
    """One model's optimizer × strategy table of time to the test-loss target (AlgoPerf's measure), over seeds.

    Each cell: optimizer steps to the target (evaluated every ``eval_every`` steps outside the timing; the mean
    over seeds, with how many seeds reached it where not all did), the training seconds they took, and the final
    test loss; ``not reached`` where the test loss never got there, ``n/a`` where there is no test split.
    """
    by_cell = {(r.first.optimizer, r.first.strategy): r for r in runs.values()}
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    everywhere = [cell_runs for cell_runs in runs.values() if cell_runs.ok
                  and all(as_number(r.summary.steps_to_target) is not None for r in cell_runs.ok)]
    means = [sum(as_number(r.summary.steps_to_target) for r in c.ok) / len(c.ok) for c in everywhere]
    reached = sum(as_number(r.summary.steps_to_target) is not None for r in records if r.status == "ok")
    targets = {round(t, 4) for t in (as_number(r.summary.target_loss) for r in records) if t is not None}
    target = f"target test loss {', '.join(map(str, sorted(targets)))}: " if targets else ""
    rows = tuple(Row(label=display_name(OPTIMIZERS, opt),
                     cells=tuple(_target_cell(by_cell.get((opt, st)), min(means) if means else None)
                                 for st in strategies)) for opt in optimizers)
    # Numbers only: a hand-edited record may hold anything there, and the table still renders.
    every = sorted({round(n) for n in (as_number(record_field(r, "evaluation", "every_steps")) for r in records)
                    if n})
    return Table(id=f"{model_slug}-to-target", caption="Optimizer steps to the target test loss",
                 header=("optimizer", *strategies), rows=rows,
                 note=f"{target}halfway from the untrained model's test loss to the test split's floor. "
                      f"{reached} of {len(records)} runs ({len(runs)} cells) reached it. The test split is evaluated "
                      + (f"every {', '.join(map(str, every))} optimizer steps and " if every else "")
                      + "after each epoch, outside the timed epochs; seconds are training seconds.")


def protocol_tables(records: Sequence[CellRecord]) -> tuple[Table, ...]:
    """Where cells ran under both learning-rate protocols: each model's optimizers ranked by its quality metric
    (test loss, or test top-1 / F1 for classifiers: :func:`~gradeff.analysis.metrics.quality_metric`) under each
    protocol, the best strategy of each optimizer by its mean over seeds, side by side; ``()`` otherwise.

    Args:
        records: every record read (not only the latest of each cell: the two protocols' runs share cell ids).
    """
    latest: dict[tuple, CellRecord] = {}
    for record in records:
        protocol = record_field(record, "hparams", "protocol")
        # A cell of the tuned protocol that had no row searched its own rate: the same protocol, not another.
        protocol = "tuned" if protocol == SELF_TUNED else protocol
        if isinstance(protocol, str) and protocol and record.grid == "main":
            latest[(protocol, record.cell, record.seed)] = record
    protocols = tuple(dict.fromkeys(key[0] for key in latest))
    if len(protocols) < 2:
        return ()
    models = tuple(dict.fromkeys(r.model for r in latest.values()))
    rows = []
    for model in models:
        metric = quality_metric(r for r in latest.values() if r.model == model)
        sign = 1 if metric.goal == "min" else -1
        cells = []
        for protocol in protocols:
            values: dict[str, dict[str, list[float]]] = {}
            for (p, _, _), r in latest.items():
                value = analysis.metric_value(r, metric)
                if p == protocol and r.model == model and r.status == "ok" and value is not None:
                    values.setdefault(r.optimizer, {}).setdefault(r.strategy, []).append(value)
            best = {opt: sign * min(sign * sum(v) / len(v) for v in by_strategy.values())
                    for opt, by_strategy in values.items()}
            ranking = sorted(best, key=lambda o: sign * best[o])
            cells.append(Cell(text=" < ".join(display_name(OPTIMIZERS, o) for o in ranking) or NA, css="text",
                              sub=f"{metric.label}: " + ", ".join(format_value(best[o], metric.unit) for o in ranking)
                              if ranking else ""))
        rows.append(Row(label=display_name(MODELS, model), cells=tuple(cells)))
    return (Table(id="protocol-rankings", caption="Optimizers ranked by test quality under each learning-rate "
                                                  "protocol", header=("model", *protocols), rows=tuple(rows),
                  note="tuned: each optimizer at its own rate from the tuned table, or searched by the cell itself "
                       "where the table has no row (self-tuned; both on the validation split); shared: one rate per "
                       "model for every optimizer, as in the paper. Each optimizer by its best strategy, mean over "
                       "seeds; best first."),)
