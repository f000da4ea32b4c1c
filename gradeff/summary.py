"""The terminal summary: one table per grid of the cells a session ran, in raw units made readable.

The main study's table reads losses against the task's floor; the PEFT study's reads held-out
accuracy against the Bayes classifier's, with the parameters a method trains and the memory a
training step holds. Unmeasured figures print ``n/a``; a failed cell's reason follows its row.

Cells repeated over seeds (``--gradeff-seeds``) get one row per seed (``llm-adam-accum-seed1``), then a
table of each cell's mean with the half-width of its 95 % Student-t interval over the seeds that ended
``ok`` (``n``). The summary ends with the Answer (:func:`gradeff.analysis.answer.answer`): one verdict
line per model, or backbone and dataset, on the study's quality metric, speed, memory and energy, the
same lines the report opens with. Every figure is read through :mod:`gradeff.analysis.metrics`; ``f+b``
counts forward+backward passes (a closure of an accumulation step runs one per micro-batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gradeff.analysis import metrics
from gradeff.analysis.answer import answer, line_text
from gradeff.analysis.runs import canonical
from gradeff.formatting import as_number, format_value
from gradeff.grid import GRIDS
from gradeff.results import CellRecord

__all__ = ["answer_lines", "summary_lines", "target_text"]

_MIB = 2**20


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _mib(value):
    return None if value is None else value / _MIB


def _count(value) -> str:
    """A parameter count in k / M (``43.4k``, ``22.1M``)."""
    if value is None:
        return "n/a"
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.1f}k"


def _section(record: CellRecord, meter: str) -> dict:
    section = record.meters.get(meter) if isinstance(record.meters, dict) else None
    return section if isinstance(section, dict) else {}


def _train_memory(record: CellRecord):
    """The step's live peak where it was measured, else the breakdown's sum."""
    peak = metrics.metric_value(record, "peak")
    return peak if peak is not None else metrics.training_memory_bytes(record)


def _quality_text(record: CellRecord) -> str:
    """The cell's quality metric (test loss, test top-1, test F1) in its own unit."""
    metric = metrics.quality_metric([record])
    return format_value(metrics.metric_value(record, metric), metric.unit)


def target_text(summary) -> str:
    """Time to target as a cell reads: optimizer steps, ``not reached``, or ``n/a`` (no test split to reach it on)."""
    if summary.steps_to_target is not None:
        return f"{summary.steps_to_target} steps"
    return "not reached" if summary.target_reached is False else "n/a"


def _loss_row(r: CellRecord, name: str) -> str:
    s = r.summary
    memory, ram, energy = (_section(r, k) for k in ("memory", "ram", "energy"))
    loss = f"{_fmt(s.first_loss, '.4f')} → {_fmt(s.final_loss, '.4f')}"
    return (f"{name:<30} {r.status:<9} {_quality_text(r):>8} {loss:>20} {_fmt(r.loss_floor, '.3f'):>7} "
            f"{target_text(s):>12} {_fmt(s.mean_epoch_seconds, '.3f'):>8} {s.optimizer_steps:>6} "
            f"{_fmt(metrics.forward_backward_passes(r), 'd'):>5} "
            f"{_fmt(_mib(memory.get('activation_bytes')), '.2f'):>8} "
            f"{_fmt(_mib(memory.get('optimizer_state_bytes')), '.2f'):>9} "
            f"{_fmt(_mib(ram.get('peak_rss_bytes')), '.0f'):>8} {_fmt(energy.get('joules'), '.1f'):>7}")


_LOSS_HEADER = (f"{'cell':<30} {'status':<9} {'test':>8} {'train loss first → last':>20} {'floor':>7} "
                f"{'to target':>12} {'s/epoch':>8} {'steps':>6} {'f+b':>5} {'act MiB':>8} {'state MiB':>9} "
                f"{'RSS MiB':>8} {'J':>7}")


def _accuracy_row(r: CellRecord, name: str) -> str:
    s, parameters = r.summary, r.parameters if isinstance(r.parameters, dict) else {}
    accuracy = metrics.metric_value(r, "heldout_accuracy")
    bayes = r.task.get("bayes_accuracy") if isinstance(r.task, dict) else None
    trained = f"{_count(parameters.get('trainable'))}/{_count(parameters.get('total'))}"
    return (f"{name:<34} {r.status:<7} {_fmt(accuracy, '.1f'):>6} {_fmt(bayes and 100 * bayes, '.1f'):>6} "
            f"{_fmt(metrics.metric_value(r, 'test_loss'), '.3f'):>7} {trained:>15} "
            f"{_fmt(_mib(_train_memory(r)), '.2f'):>8} "
            f"{_fmt(s.mean_epoch_seconds, '.3f'):>8} {_fmt(_section(r, 'energy').get('joules'), '.1f'):>7}")


_ACCURACY_HEADER = (f"{'cell':<34} {'status':<7} {'acc %':>6} {'bayes':>6} {'test loss':>7} {'trainable/total':>15} "
                    f"{'mem MiB':>8} {'s/epoch':>8} {'J':>7}")

def _plan_text(plan: dict) -> str:
    fraction, blocks = as_number(plan.get("activation_memory_budget")), as_number(plan.get("checkpointed_layers"))
    if fraction is not None:
        return f"act {fraction:.2f}"
    if blocks is not None:
        layers = as_number(plan.get("layers"))
        return f"{blocks:.0f}/{layers:.0f} blocks" if layers is not None else f"{blocks:.0f} blocks"
    return "-"


def _memory_row(r: CellRecord, name: str) -> str:
    plan = r.plan if isinstance(r.plan, dict) else {}
    memory = _section(r, "memory")
    budget, predicted = (_mib(as_number(plan.get(k))) for k in ("budget_bytes", "predicted_peak_bytes"))
    return (f"{name:<26} {r.status:<7} {_plan_text(plan):>11} {_fmt(budget, '.2f'):>8} {_fmt(predicted, '.2f'):>9} "
            f"{_fmt(_mib(as_number(memory.get('peak_bytes'))), '.2f'):>9} {_fmt(r.summary.mean_epoch_seconds, '.3f'):>8} "
            f"{_fmt(as_number(_section(r, 'energy').get('joules')), '.1f'):>7}")


_MEMORY_HEADER = (f"{'cell':<26} {'status':<7} {'plan':>11} {'budget':>8} {'predicted':>9} {'peak MiB':>9} "
                  f"{'s/epoch':>8} {'J':>7}")

# How each grid's cells read: the main study by loss, the PEFT study by held-out accuracy, the memory
# study by peak memory against time.
_TABLES: dict[str, tuple[str, Callable[[CellRecord, str], str]]] = {
    "loss": (_LOSS_HEADER, _loss_row), "accuracy": (_ACCURACY_HEADER, _accuracy_row),
    "memory": (_MEMORY_HEADER, _memory_row)}


def _repeated_cells(records: Iterable[CellRecord]) -> set[str]:
    """Cells with records of more than one seed."""
    seeds: dict[str, set[int]] = {}
    for r in records:
        seeds.setdefault(r.cell, set()).add(r.seed)
    return {cell for cell, found in seeds.items() if len(found) > 1}


def _quality_value(r: CellRecord) -> float | None:
    return metrics.metric_value(r, metrics.quality_metric([r]))


# Per focus: the columns of the over-seeds table (title, value, format). "test" is each cell's quality
# metric (a loss for language tasks, top-1 % for classification).
_OVER_SEEDS: dict[str, tuple[tuple[str, Callable[[CellRecord], float | None], str], ...]] = {
    "loss": (("test", _quality_value, ".4f"),
             ("train loss", lambda r: metrics.metric_value(r, "final_loss"), ".4f"),
             ("s/epoch", lambda r: metrics.metric_value(r, "epoch_seconds"), ".3f"),
             ("J", lambda r: metrics.metric_value(r, "energy"), ".1f")),
    "accuracy": (("test", _quality_value, ".1f"),
                 ("test loss", lambda r: metrics.metric_value(r, "test_loss"), ".4f"),
                 ("s/epoch", lambda r: metrics.metric_value(r, "epoch_seconds"), ".3f"),
                 ("J", lambda r: metrics.metric_value(r, "energy"), ".1f")),
    "memory": (("peak MiB", lambda r: _mib(metrics.metric_value(r, "peak")), ".2f"),
               ("s/epoch", lambda r: metrics.metric_value(r, "epoch_seconds"), ".3f"),
               ("J", lambda r: metrics.metric_value(r, "energy"), ".1f")),
}


def _over_seeds_lines(records: list[CellRecord], focus: str) -> list[str]:
    """Each cell's mean ± 95 % t-interval half-width over its ok seeds."""
    from gradeff.analysis.stats import interval

    columns = _OVER_SEEDS[focus]
    ok: dict[str, list[CellRecord]] = {}
    for r in records:
        if r.status == "ok":
            ok.setdefault(r.cell, []).append(r)
    lines = ["over seeds: mean ± half-width of the 95 % Student-t interval, n = seeds that ended ok",
             f"{'cell':<30} {'n':>2} " + " ".join(f"{title:>19}" for title, _, _ in columns)]
    for cell in dict.fromkeys(r.cell for r in records):
        runs = ok.get(cell, [])
        texts = []
        for _, value, spec in columns:
            values = [v for v in (value(r) for r in runs) if v is not None]
            if not values:
                texts.append(f"{'n/a':>19}")
                continue
            found = interval(values)
            texts.append(f"{format(found.mean, spec) + ' ± ' + format(found.half_width, spec):>19}")
        lines.append(f"{cell:<30} {len(runs):>2} " + " ".join(texts))
    return lines


_ANSWER_FOOTER = ("answer: per model (backbone · dataset), the best cell on the study's quality metric (test loss, "
                  "or test top-1 / F1 for classifiers), then time and energy to target and the live-tensor peak; "
                  "over several seeds, cells are compared seed by seed (paired t-test, Holm, 5 %) and a tie names "
                  "every cell it cannot separate; identical: the same numbers on every seed; single draw: one seed")


def answer_lines(records: Iterable[CellRecord]) -> list[str]:
    """The Answer's verdict lines (:func:`gradeff.analysis.answer.answer`), or none without a study that has one."""
    lines = [line_text(line) for line in answer(records)]
    return [_ANSWER_FOOTER, *lines] if lines else []


def _protocol_lines(records: list[CellRecord]) -> list[str]:
    """Which learning-rate protocol the trained cells ran under, and where their rates came from."""
    trained = [r for r in records if r.status != "skipped" and isinstance(r.hparams, dict) and "protocol" in r.hparams]
    lines = []
    for protocol in dict.fromkeys(r.hparams["protocol"] for r in trained):
        sources: dict[str, int] = {}
        for r in trained:
            if r.hparams["protocol"] == protocol:
                source = str(r.hparams.get("lr_source", ""))
                kind = source.split(":")[0] if ":" in source else source
                sources[kind] = sources.get(kind, 0) + 1
        lines.append(f"learning rates: protocol {protocol} — " + ", ".join(f"{kind} {count}" for kind, count in
                                                                         sources.items()))
    lines += [f"tuned with --gradeff-tune lr: {r.cell} chose {r.tuning['chosen']:.3g} at the {r.tuning['at_edge']} "
              f"edge of the rates tried" for r in records if isinstance(r.tuning, dict) and r.tuning.get("at_edge")]
    return lines


def summary_lines(records: Iterable[CellRecord]) -> list[str]:
    """The summary table(s) of ``records``: one per grid, rows sorted by cell id, then the statuses line.

    Columns of the accuracy table: final held-out top-1 (%), the Bayes classifier's on the same
    split, final held-out loss, trainable/total parameters, training memory (the live peak of one
    step, else parameters + gradients + optimizer state + activations), seconds per epoch, joules.
    """
    records, _ = canonical(records)
    lines: list[str] = []
    grids = dict.fromkeys(r.grid for r in records)
    for grid in grids:
        group = sorted((r for r in records if r.grid == grid), key=lambda r: (r.cell, r.seed))
        focus = GRIDS[grid].focus if grid in GRIDS else "loss"
        header, row = _TABLES[focus]
        if len(grids) > 1:
            lines.append(f"[{grid}] {GRIDS[grid].name if grid in GRIDS else grid}")
        lines.append(header)
        repeated = _repeated_cells(group)
        for record in group:
            lines.append(row(record, f"{record.cell}-seed{record.seed}" if record.cell in repeated else record.cell))
            if record.status not in ("ok", "skipped"):
                lines.append(f"    {record.detail[:150]}")
        if repeated:
            lines += _over_seeds_lines(group, focus)
    counts = {status: sum(r.status == status for r in records) for status in dict.fromkeys(r.status for r in records)}
    span = max(r.finished_at for r in records) - min(r.started_at for r in records)
    lines.append(f"statuses: {', '.join(f'{k} {v}' for k, v in counts.items())}; wall time of the cells {span:.1f} s")
    pretrained: dict[str, dict] = {}
    for r in records:
        info = r.weights.get("pretraining") if isinstance(r.weights, dict) else None
        if info:
            # The session pretrained a backbone if any of its cells did; the others reused that copy.
            first_run = pretrained.get(r.model, {}).get("reused") is False
            pretrained[r.model] = pretrained[r.model] if first_run else info
    for model, info in pretrained.items():
        when = "from the cache" if info.get("reused") else "this session"
        lines.append(f"pretrained {model} ({when}): {info.get('optimizer_steps')} steps in "
                     f"{_fmt(info.get('seconds'), '.1f')} s, not counted in any cell; source-task held-out accuracy "
                     f"{_fmt(info.get('heldout_accuracy') and 100 * info['heldout_accuracy'], '.1f')} %")
    lines += _protocol_lines(records)
    sources = sorted({_section(r, "energy").get("source", "none") for r in records if r.meters})
    if sources:
        lines.append(f"energy source: {', '.join(sources)} (estimate = process CPU time × watts per logical CPU)")
    return lines + answer_lines(records)
