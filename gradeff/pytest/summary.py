"""The terminal summary: one table per grid of the cells a session ran, in raw units made readable.

The main study's table reads losses against the task's floor; the PEFT study's reads held-out
accuracy against the Bayes classifier's, with the parameters a method trains and the memory a
training step holds. Unmeasured figures print ``n/a``; a failed cell's reason follows its row.

Cells repeated over seeds (``--gradeff-seeds``) get one row per seed (``llm-adam-accum-seed1``), then a
table of each cell's mean with the half-width of its 95 % Student-t interval over the seeds that ended
``ok`` (``n``). The summary ends with the Answer (:func:`gradeff.analysis.answer.answer`): a key line, then at
most three lines per model, or backbone and dataset (:mod:`gradeff.pytest.answer_brief`; the report holds every
verdict in full). Every figure is read through :mod:`gradeff.analysis.metrics`; ``f+b`` counts
forward+backward passes (a closure of an accumulation step runs one per micro-batch).

Every line fits the terminal's width (:mod:`gradeff.pytest.fitting`): a table too wide leaves out columns in the
order :data:`_DROP` states and says which under it; prose wraps. Under each grid's table, a line per model and
dataset names the strongest trivial baseline of its test split on the same metric as its ``test`` column
(:mod:`gradeff.analysis.trivial`), so the table stays as wide as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gradeff.analysis import metrics
from gradeff.analysis.answer import AnswerOptions, answer
from gradeff.analysis.answer_brief import key_line
from gradeff.analysis.runs import canonical
from gradeff.analysis.stats import interval
from gradeff.analysis.trivial import baseline_text, strongest_baseline
from gradeff.pytest.answer_brief import brief_lines
from gradeff.pytest.fitting import DEFAULT_WIDTH, ID_WIDTH, fit_table, wrap
from gradeff.records.formatting import as_number, format_value
from gradeff.records.results import CellRecord, meter_field, record_field, record_section
from gradeff.studies.grid import GRIDS

__all__ = ["ID_WIDTH", "WIDTH", "answer_lines", "summary_lines", "table_lines", "target_text", "trivial_lines"]

_MIB = 2**20
# The width lines are laid out for when the caller knows no terminal's (gradeff.pytest.fitting.terminal_width).
WIDTH = DEFAULT_WIDTH
# What an abbreviated column title means, said once under a table that shows it.
_ABBREVIATIONS = {"f+b": "forward+backward passes (an accumulation step runs one per micro-batch)"}


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _mib(value):
    return None if value is None else value / _MIB


def _count(value) -> str:
    """A parameter count in k / M (``43.4k``, ``22.1M``)."""
    if value is None:
        return "n/a"
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.1f}k"


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


@dataclass(frozen=True, slots=True)
class _Column:
    """One column of a grid's table: its title (what ``_DROP`` names) and its text for one record."""

    title: str
    text: Callable[[CellRecord], str]


def _meter(meter: str, name: str, spec: str, scale: Callable[[float | None], float | None] = lambda v: v):
    return lambda r: _fmt(scale(as_number(meter_field(r, meter, name))), spec)


def _plan_text(r: CellRecord) -> str:
    fraction = as_number(record_field(r, "plan", "activation_memory_budget"))
    blocks = as_number(record_field(r, "plan", "checkpointed_layers"))
    if fraction is not None:
        return f"act {fraction:.2f}"
    if blocks is not None:
        layers = as_number(record_field(r, "plan", "layers"))
        return f"{blocks:.0f}/{layers:.0f} blocks" if layers is not None else f"{blocks:.0f} blocks"
    return "-"


def _plan_mib(name: str) -> Callable[[CellRecord], str]:
    return lambda r: _fmt(_mib(as_number(record_field(r, "plan", name))), ".2f")


def _parameters_text(r: CellRecord) -> str:
    return f"{_count(record_field(r, 'parameters', 'trainable'))}/{_count(record_field(r, 'parameters', 'total'))}"


def _bayes_text(r: CellRecord) -> str:
    bayes = record_field(r, "task", "bayes_accuracy")
    return _fmt(bayes and 100 * bayes, ".1f")


_STATUS = _Column("status", lambda r: r.status)
_EPOCH_SECONDS = _Column("s/epoch", lambda r: _fmt(r.summary.mean_epoch_seconds, ".3f"))
_JOULES = _Column("J", _meter("energy", "joules", ".1f"))

# How each grid's cells read, a column per figure after the cell's id: the main study by loss against the task's
# floor, the PEFT study by held-out accuracy, the memory study by peak memory against time.
_TABLES: dict[str, tuple[_Column, ...]] = {
    "loss": (_STATUS, _Column("test", _quality_text),
             _Column("train loss", lambda r: f"{_fmt(r.summary.first_loss, '.4f')} → "
                                             f"{_fmt(r.summary.final_loss, '.4f')}"),
             _Column("floor", lambda r: _fmt(r.loss_floor, ".3f")),
             _Column("to target", lambda r: target_text(r.summary)), _EPOCH_SECONDS,
             _Column("steps", lambda r: str(r.summary.optimizer_steps)),
             _Column("f+b", lambda r: _fmt(metrics.forward_backward_passes(r), "d")),
             _Column("act MiB", _meter("memory", "activation_bytes", ".2f", _mib)),
             _Column("state MiB", _meter("memory", "optimizer_state_bytes", ".2f", _mib)),
             _Column("RSS MiB", _meter("ram", "peak_rss_bytes", ".0f", _mib)), _JOULES),
    "accuracy": (_STATUS, _Column("acc %", lambda r: _fmt(metrics.metric_value(r, "heldout_accuracy"), ".1f")),
                 _Column("bayes", _bayes_text),
                 _Column("test loss", lambda r: _fmt(metrics.metric_value(r, "test_loss"), ".3f")),
                 _Column("trainable/total", _parameters_text),
                 _Column("mem MiB", lambda r: _fmt(_mib(_train_memory(r)), ".2f")), _EPOCH_SECONDS, _JOULES),
    "memory": (_STATUS, _Column("plan", _plan_text), _Column("budget", _plan_mib("budget_bytes")),
               _Column("predicted", _plan_mib("predicted_peak_bytes")),
               _Column("peak MiB", _meter("memory", "peak_bytes", ".2f", _mib)), _EPOCH_SECONDS, _JOULES),
}


# Per focus: the columns a table too wide for the terminal leaves out, the first to go first (the cell, its status
# and its quality metric always stay). The loss table keeps what the Answer weighs (quality, time to target, time
# per epoch, memory, energy) longest; the counts that are the same in every cell of a grid (steps) go first.
_DROP: dict[str, tuple[str, ...]] = {
    "loss": ("steps", "RSS MiB", "floor", "f+b", "act MiB", "train loss", "J", "state MiB", "to target"),
    "accuracy": ("test loss", "J", "bayes", "trainable/total", "s/epoch"),
    "memory": ("J", "predicted", "budget", "s/epoch"),
    "seeds": ("J", "train loss", "test loss", "s/epoch"),
}


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


def _over_seeds_lines(records: list[CellRecord], focus: str, width: int) -> list[str]:
    """Each cell's mean ± 95 % t-interval half-width over its ok seeds."""
    columns = _OVER_SEEDS[focus]
    ok: dict[str, list[CellRecord]] = {}
    for r in records:
        if r.status == "ok":
            ok.setdefault(r.cell, []).append(r)
    rows = []
    for cell in dict.fromkeys(r.cell for r in records):
        runs = ok.get(cell, [])
        texts = [cell, str(len(runs))]
        for _, value, spec in columns:
            values = [v for v in (value(r) for r in runs) if v is not None]
            found = interval(values) if values else None
            texts.append("n/a" if found is None else f"{format(found.mean, spec)} ± {format(found.half_width, spec)}")
        rows.append(texts)
    return [*wrap("over seeds: mean ± half-width of the 95 % Student-t interval, n = seeds that ended ok", width),
            *table_lines(("cell", "n", *(title for title, _, _ in columns)), rows, width=width, drop=_DROP["seeds"])]


def trivial_lines(records: Sequence[CellRecord], width: int = WIDTH) -> list[str]:
    """Per model and dataset, the strongest trivial baseline its records carry, on the metric of their ``test``
    column (mean over the seeds): ``best trivial baseline, llm · causal_lm: bigram count model 3.109``."""
    groups: dict[tuple[str, str], list[CellRecord]] = {}
    for record in records:
        groups.setdefault((record.model, record.dataset), []).append(record)
    lines = []
    for (model, dataset), group in groups.items():
        baseline = strongest_baseline(group, metrics.quality_metric(group))
        if baseline is not None:
            subject = f"{model} · {dataset}" if dataset else model
            lines += wrap(f"best trivial baseline, {subject}: {baseline_text(baseline)}", width)
    return lines


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], *, width: int = WIDTH,
                drop: Sequence[str] = ()) -> list[str]:
    """A table laid out for ``width`` (:func:`gradeff.pytest.fitting.fit_table`), then, where it left columns out
    or shows an abbreviation, one key line saying which and where the full table is.

    Args:
        header: column titles.
        rows: the cells' texts, one list per row (row ``i`` is line ``i + 1``).
        width: the terminal's width.
        drop: the columns that may be left out to fit, the first to go first.
    """
    lines, key = _fitted(header, rows, width, drop)
    return lines + key


def _fitted(header: Sequence[str], rows: Sequence[Sequence[str]], width: int,
            drop: Sequence[str]) -> tuple[list[str], list[str]]:
    """The table's lines (row ``i`` on line ``i + 1``) and its key lines."""
    fitted = fit_table(header, rows, width=width, drop=drop)
    shown = [title for title in header if title not in fitted.left_out]
    key = [f"{title}: {_ABBREVIATIONS[title]}" for title in shown if title in _ABBREVIATIONS]
    if fitted.left_out:
        key.append(f"not shown at {width} columns: {', '.join(fitted.left_out)} (every column: the report, "
                   "or `gradeff report RESULTS -o table.csv`)")
    return list(fitted.lines), wrap("; ".join(key), width) if key else []


def answer_lines(records: Iterable[CellRecord], options: AnswerOptions | None = None, *,
                 width: int = WIDTH) -> list[str]:
    """The Answer as the terminal prints it (:mod:`gradeff.pytest.answer_brief`): its key, then at most three
    lines per model of :func:`gradeff.analysis.answer.answer`; none without a study that has one.

    Args:
        records: the session's records.
        options: the margins and the choice's order.
        width: the terminal's width.
    """
    found = answer(records, options)
    if not found:
        return []
    key = f"answer — {key_line(found)}; in full: the report"
    return [*wrap(key, width), *(text for line in found for text in brief_lines(line, width))]


def _protocol_lines(records: list[CellRecord]) -> list[str]:
    """Which learning-rate protocol the trained cells ran under, and where their rates came from."""
    trained = [r for r in records if r.status != "skipped" and "protocol" in record_section(r, "hparams")]
    lines = []
    for protocol in dict.fromkeys(record_field(r, "hparams", "protocol") for r in trained):
        sources: dict[str, int] = {}
        for r in trained:
            if record_field(r, "hparams", "protocol") == protocol:
                source = str(record_field(r, "hparams", "lr_source", ""))
                kind = source.split(":")[0] if ":" in source else source
                sources[kind] = sources.get(kind, 0) + 1
        lines.append(f"learning rates: protocol {protocol} — " + ", ".join(f"{kind} {count}" for kind, count in
                                                                         sources.items()))
    lines += [f"tuned with --gradeff-tune lr: {r.cell} chose {record_field(r, 'tuning', 'chosen'):.3g} at the "
              f"{record_field(r, 'tuning', 'at_edge')} edge of the rates tried"
              for r in records if record_field(r, "tuning", "at_edge")]
    return lines


def summary_lines(records: Iterable[CellRecord], *, width: int = WIDTH, answer: bool = True) -> list[str]:
    """The summary table(s) of ``records``: one per grid, rows sorted by cell id, then the statuses line.

    Columns of the accuracy table: final held-out top-1 (%), the Bayes classifier's on the same
    split, final held-out loss, trainable/total parameters, training memory (the live peak of one
    step, else parameters + gradients + optimizer state + activations), seconds per epoch, joules.

    Args:
        records: the session's records.
        width: the terminal's width (see :func:`table_lines`).
        answer: end with :func:`answer_lines` (the plugin prints them itself, after the report and the gate).
    """
    records, _ = canonical(records)
    lines: list[str] = []
    grids = dict.fromkeys(r.grid for r in records)
    for grid in grids:
        group = sorted((r for r in records if r.grid == grid), key=lambda r: (r.cell, r.seed))
        focus = GRIDS[grid].focus if grid in GRIDS else "loss"
        columns = _TABLES[focus]
        header = ("cell", *(column.title for column in columns))
        if len(grids) > 1:
            lines.append(f"[{grid}] {GRIDS[grid].name if grid in GRIDS else grid}")
        repeated = _repeated_cells(group)
        rows = [[f"{r.cell}-seed{r.seed}" if r.cell in repeated else r.cell, *(column.text(r) for column in columns)]
                for r in group]
        table, key = _fitted(header, rows, width, _DROP[focus])
        lines.append(table[0])
        for record, text in zip(group, table[1:], strict=True):
            lines.append(text)
            if record.status not in ("ok", "skipped"):
                lines += wrap(f"    {record.detail[:150]}", width, indent="    ")  # why it failed, under its row
        lines += key
        if repeated:
            lines += _over_seeds_lines(group, focus, width)
        lines += trivial_lines(group, width)
    counts = {status: sum(r.status == status for r in records) for status in dict.fromkeys(r.status for r in records)}
    span = max(r.finished_at for r in records) - min(r.started_at for r in records)
    lines.append(f"statuses: {', '.join(f'{k} {v}' for k, v in counts.items())}; wall time of the cells {span:.1f} s")
    pretrained: dict[str, dict] = {}
    for r in records:
        info = record_field(r, "weights", "pretraining")
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
    sources = sorted({meter_field(r, "energy", "source", "none") for r in records if r.meters})
    if sources:
        lines.append(f"energy source: {', '.join(sources)} (estimate = process CPU time × watts per logical CPU)")
    lines = [piece for line in lines for piece in wrap(line, width)]
    return lines + (answer_lines(records, width=width) if answer else [])
