"""The memory study's section of the report: records of grids read by peak memory against time → :class:`MemoryView`.

Per model, memory against time per epoch relative to ``standard`` (a figure), every strategy's plan
and measurements (a table), and the PEFT paper's claim ("adaptive: peak -x % for +y % time and +z %
energy") as measured per budget level, with the adaptive budget held against torch.compile's
knapsack at the same target; then the same claim over every model, and for the PEFT study's
``budget`` cells. Numbers are formatted here (the analysis is :mod:`gradeff.analysis.memory`); a
failed cell shows its status, an unmeasured one ``n/a`` with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from gradeff import analysis
from gradeff.analysis import METRICS, Metric, naming
from gradeff.analysis import memory as ma
from gradeff.analysis import peft as peft_analysis
from gradeff.analysis.pairing import PairedRatio
from gradeff.analysis.runs import CellRuns
from gradeff.axes.models import MODELS
from gradeff.records.formatting import NA, format_bytes, format_ratio, format_seconds, format_value
from gradeff.records.results import CellRecord, record_field
from gradeff.report import figures
from gradeff.report.view import (
    Cell,
    MemoryGroupView,
    MemoryView,
    Row,
    Table,
    display_name,
    distinct_text,
    energy_sources,
    html_id,
    status_text,
)

__all__ = ["MISSING_NOTE", "SPREAD_WARNING", "TABLE_HEADER", "build_memory_view", "format_change", "format_range",
           "memory_methods"]

MISSING_NOTE = "No records of the memory study (a grid read by peak memory against time) in these results."
TABLE_HEADER = ("strategy", "status", "plan", "budget", "predicted peak", "live peak", "breakdown sum",
                "time per epoch", "compile time", "energy")
_TIME, _ENERGY, _PEAK = METRICS["epoch_seconds"], METRICS["energy"], METRICS["peak"]
_COMPILED_PEAK = ("not measurable: under the live tracker's dispatch mode torch.compile's code falls back to "
                  "eager, so the compiled step is not what would be measured")
_OUTCOMES = {
    "beats": "adaptive beats it: lower memory at equal or less time",
    "loses": "adaptive loses: the compiler holds no more memory in no more time",
    "ties": "a tie: equal memory and time as printed",
    "less memory, more time": "neither wins: adaptive holds less memory but takes more time",
    "more memory, less time": "neither wins: adaptive is faster but holds more memory",
}
# A cell whose slowest epoch took this many times its fastest has a time per epoch to read with care.
SPREAD_WARNING = 1.5

def format_change(ratio: float | None) -> str:
    """A ratio as a signed change in percent: ``0.72`` → ``-28 %``; ``n/a`` if missing."""
    return NA if ratio is None else f"{(ratio - 1) * 100:+.0f} %"


def format_range(ratios: Iterable[float | None]) -> str:
    """The changes of several ratios, lowest to highest: ``-33 % to -28 %``, one value if they print alike.

    Returns:
        The text; ``n/a`` when no ratio is known.
    """
    texts = [format_change(r) for r in sorted(r for r in ratios if r is not None)]
    if not texts:
        return NA
    return texts[0] if texts[0] == texts[-1] else f"{texts[0]} to {texts[-1]}"


def _percent(fraction: float) -> str:
    """A fraction as a whole percent: a budget level (``0.6`` → ``60 %``) or a margin."""
    return f"{fraction * 100:.0f} %"


# Table cells ----------------------------------------------------------------------------------------


def _ratio_sub(runs: CellRuns, reference: CellRuns | None, metric: Metric | str) -> str:
    if reference is not None and runs.cell == reference.cell:
        return "the reference"
    ratio = ma.ratio_of(runs, reference, metric)
    if ratio is None:
        return ""
    value = ratio.interval.mean
    text = "identical" if ratio.identical else f"{format_ratio(value)} ({format_change(value)})"
    if reference.first.strategy != ma.STANDARD:
        text += f" of {reference.first.strategy}"
    # No-break spaces: a narrow column must not strand "%" on a line of its own.
    return text.replace(" ", "\u00a0")


def _measured_cell(runs: CellRuns, reference: CellRuns | None, metric: Metric, unmeasured: str,
                   extra: str = "") -> Cell:
    """A measurement (mean over ok seeds) with its ratio to standard below it; a failed cell's status; ``n/a``."""
    if not runs.ok:
        record = runs.runs[-1]
        return Cell(text=status_text(record), css=f"status {record.status}", title=record.detail)
    spread = runs.interval(metric)
    if spread is None:
        return Cell(text=NA, css="na", title=unmeasured)
    seeds = f"± {format_value(spread.half_width, metric.unit)} (n={spread.n})" if spread.n > 1 else ""
    sub = " · ".join(part for part in (_ratio_sub(runs, reference, metric), seeds, extra) if part)
    return Cell(text=format_value(spread.mean, metric.unit), sub=sub)


def _status_cell(runs: CellRuns) -> Cell:
    if len(runs.ok) == len(runs.runs):
        return Cell(text="ok", css="text", sub=f"{len(runs.runs)} seeds" if len(runs.runs) > 1 else "")
    # The reason in full, not in a tooltip: an oom budget cell's numbers are the finding.
    record = next(r for r in runs.runs if r.status != "ok")
    return Cell(text=runs.status if len(runs.runs) > 1 else status_text(record), sub=record.detail,
                css=f"text status {record.status}")


def _plan_cell(record: CellRecord) -> Cell:
    if record.plan is not None and not isinstance(record.plan, Mapping):
        return Cell(text=NA, css="na", title="the record's plan is not a mapping")
    if ma.is_compiled(record):
        fraction = ma.plan_number(record, "activation_memory_budget")
        backend = record_field(record, "plan", "compile_backend")
        if fraction is None:
            return Cell(text=NA, css="na", title="no activation memory budget recorded")
        return Cell(text=f"activation budget {fraction:.2f}", css="text",
                    sub=f"torch.compile ({backend})" if isinstance(backend, str) else "torch.compile")
    chosen, layers = ma.plan_number(record, "checkpointed_layers"), ma.plan_number(record, "layers")
    if chosen is not None:
        text = f"{chosen:.0f} / {layers:.0f} blocks" if layers is not None else f"{chosen:.0f} blocks"
        if ma.is_offload(record):
            offloaded = ma.plan_number(record, "offloaded_bytes_per_step")
            return Cell(text=f"{text} + host offload", css="text",
                        sub="" if offloaded is None else f"{format_bytes(offloaded)} to the host per step")
        return Cell(text=text, css="text", sub=", ".join(ma.checkpointed_blocks(record)))
    if record.strategy == ma.STANDARD and not ma.plan_of(record):
        return Cell(text="none", css="text", title="nothing checkpointed, compiled or offloaded")
    return Cell(text=NA, css="na", title="this record carries no plan (an older record, or it ended before planning)")


def _budget_cell(record: CellRecord) -> Cell:
    budget = ma.plan_number(record, "budget_bytes")
    if budget is None:
        return Cell(text=NA, css="na", title="no memory budget" if ma.budget_kind(record) is None else
                    "the plan records no budget")
    level = ma.budget_level(record)
    target, margin = ma.plan_number(record, "target_bytes"), ma.plan_number(record, "margin")
    parts = [f"level {_percent(level)}" if level is not None else "absolute budget"]
    if target is not None:
        parts.append(f"target {format_bytes(target)}" + (f" ({_percent(margin)} margin)" if margin is not None else ""))
    within = ma.compiled_within_target(record)
    if within is not None:
        parts.append("met on the allocator's peak" if within else "missed: the allocator's peak is over the target")
    elif ma.is_compiled(record) and record.status == "ok":
        parts.append("met or missed: not measurable here (no allocator peak, no live peak of compiled code)")
    return Cell(text=format_bytes(budget), sub=", ".join(parts))


def _predicted_cell(record: CellRecord) -> Cell:
    predicted = ma.plan_number(record, "predicted_peak_bytes")
    if predicted is None:
        title = ("torch.compile's partitioner makes no peak prediction" if ma.is_compiled(record) else
                 "no prediction: only the budget-adaptive plan predicts a peak")
        return Cell(text=NA, css="na", title=title)
    fits = record_field(record, "plan", "fits")
    sub = {True: "fits the target", False: "over the target"}.get(fits, "") if isinstance(fits, bool) else ""
    return Cell(text=format_bytes(predicted), sub=sub)


def _compile_cell(record: CellRecord) -> Cell:
    seconds = ma.plan_number(record, "compile_seconds")
    if seconds is None:
        return Cell(text=NA, css="na", title="not compiled" if not ma.is_compiled(record) else
                    "the plan records no compile time")
    return Cell(text=format_seconds(seconds), sub="once, not in the epochs")


def _spread(record: CellRecord) -> str:
    """``epochs 49.0 ms to 755 ms`` where the epochs' times differ by :data:`SPREAD_WARNING` or more, else ``""``."""
    span = ma.epoch_range(record)
    if span is None or span[1] < SPREAD_WARNING * span[0]:
        return ""
    return f"epochs {format_seconds(span[0])} to {format_seconds(span[1])}"


def _compiled_peak_cell(runs: CellRuns) -> Cell:
    """A compiled cell's peak: the GPU allocator's where there is one (labelled so: it adds the allocator's overhead
    to the tensors), else n/a with why."""
    peaks = [p for r in runs.ok if (p := ma.allocator_peak_bytes(r)) is not None]
    if not peaks:
        return Cell(text=NA, css="na", title=_COMPILED_PEAK)
    return Cell(text=format_bytes(max(peaks)), sub="allocator peak: compiled code has no live peak here",
                title=_COMPILED_PEAK)


def _row(runs: CellRuns, reference: CellRuns | None) -> Row:
    record = runs.first
    host = ma.host_copies_bytes(record)
    return Row(label=record.strategy, cells=(
        _status_cell(runs), _plan_cell(record), _budget_cell(record), _predicted_cell(record),
        _compiled_peak_cell(runs) if ma.is_compiled(record) and runs.ok else
        _measured_cell(runs, reference, _PEAK, _COMPILED_PEAK if ma.is_compiled(record) else "not measured"),
        _measured_cell(runs, reference, ma.DEVICE_MEMORY, "the memory breakdown is incomplete",
                       extra=f"incl. {format_bytes(host)} host copies (host = device)" if host else ""),
        _measured_cell(runs, reference, _TIME, "no epoch completed", extra=_spread(record)),
        _compile_cell(record),
        _measured_cell(runs, reference, _ENERGY, "no energy meter read"),
    ))


def _table(slug: str, title: str, runs: Mapping[str, CellRuns]) -> Table:
    records = [r for cell_runs in runs.values() for r in cell_runs.runs]
    sources = energy_sources(records)
    uneven = list(dict.fromkeys(r.strategy for r in records if r.status == "ok" and _spread(r)))
    spread_text = ("" if not uneven else
                   f" Epoch times differ by {SPREAD_WARNING:g}× or more within {', '.join(uneven)} (their range is "
                   "below the time): the time and energy ratios of these cells are uncertain.")
    reference_text = ("Second lines: the ratio to this model's standard cell (×) and the change in percent; a "
                      "compiled cell's to the compiled anchor (compile_budget100: compiled at the full activation "
                      "budget), so that its ratio is the recomputation's and not the compile backend's, which the "
                      "anchor's own ratio to standard shows." if ma.STANDARD in runs
                      else "No standard cell here: no ratios.")
    return Table(
        id=f"{slug}-strategies", caption=f"{title}: every strategy's plan and measurements",
        header=TABLE_HEADER, rows=tuple(_row(r, ma.reference_of(r, runs)) for r in runs.values()),
        note=(f"{reference_text} Figures are means over the seeds that ended ok (± 95 % half-width and n with "
              "several); ratios are taken seed by seed. Live peak: tensors alive at once in one training step, "
              "exact on "
              "any device; n/a "
              "for compiled cells. Breakdown sum: parameters + gradients + optimizer state + activations saved for "
              "backward, the figure's memory. Predicted peak: the adaptive plan's prediction for the blocks it "
              "chose. Compile time is paid once before the first epoch and is not part of the time per epoch. "
              f"Energy source: {', '.join(sources) if sources else 'none recorded'}.{spread_text}"))


# Claim lines ----------------------------------------------------------------------------------------


def _blocks_text(record: CellRecord) -> str:
    chosen, layers = ma.plan_number(record, "checkpointed_layers"), ma.plan_number(record, "layers")
    if chosen is None:
        return ""
    return f"{chosen:.0f} of {layers:.0f} blocks checkpointed" if layers is not None else \
        f"{chosen:.0f} blocks checkpointed"


def _unmeasured(change: ma.Change) -> str:
    missing = [name for name, value in (("peak", change.memory), ("time", change.time), ("energy", change.energy))
               if value is None]
    return f"; {', '.join(missing)} not measured on one side" if missing else ""


def _uneven(*runs: CellRuns | None) -> str:
    """``; time uncertain: uneven epochs in standard (49.0 ms to 755 ms)`` for the sides whose epochs differ widely."""
    sides = [f"{r.first.strategy} ({_spread(r.first).removeprefix('epochs ')})" for r in runs
             if r is not None and _spread(r.first)]
    return f"; time uncertain: uneven epochs in {', '.join(sides)}" if sides else ""


def _change_text(ratio: PairedRatio | None) -> str:
    """A change over seeds: ``-28 %`` (one seed), ``-28 % ± 3`` (several), ``identical``; ``n/a`` if missing."""
    if ratio is None:
        return NA
    if ratio.identical:
        return "identical (±0 %)"
    spread = ratio.interval
    text = format_change(spread.mean)
    return text + (f" ± {spread.half_width * 100:.0f} (n={spread.n})" if spread.n > 1 else "")


def _levels_text(levels: Sequence[float]) -> str:
    if len(levels) == 1:
        return _percent(levels[0])
    return "/".join(f"{level * 100:.0f}" for level in levels) + " % (the same plan at each: one entry)"


def _claim_line(levels: Sequence[float], claim: ma.LevelClaim) -> str:
    head = f"adaptive at {_levels_text(levels)}"
    change = claim.change
    if change is None:
        return f"{head}: n/a: no budget-adaptive cell at this level"
    if change.reason:
        return f"{head}: n/a: {change.reason}"
    blocks = _blocks_text(change.record)
    return (f"{head}: peak {_change_text(change.memory)} for {_change_text(change.time)} time and "
            f"{_change_text(change.energy)} energy ({change.record.strategy} / standard"
            f"{'; ' + blocks if blocks else ''}){_unmeasured(change)}{_uneven(change.reference, change.runs)}")


def _versus_line(claim: ma.LevelClaim) -> str:
    target = next((t for t in (ma.plan_number(r.first, "target_bytes") for r in (claim.adaptive, claim.compiler)
                               if r is not None) if t is not None), None)
    head = f"at {_percent(claim.level)}" + (f" (target {format_bytes(target)})" if target is not None else "")
    verdict = claim.verdict
    if verdict.outcome == "n/a":
        return f"{head}: against the compiler's knapsack n/a: {verdict.reason}"
    compile_seconds = ma.plan_number(claim.compiler.first, "compile_seconds")
    compile_text = "" if compile_seconds is None else \
        f"; its {format_seconds(compile_seconds)} compile is not in its epochs"
    return (f"{head}: against the compiler's knapsack, {_OUTCOMES[verdict.outcome]} (memory "
            f"{format_ratio(verdict.memory)} of {claim.compiler.first.strategy}'s on the breakdown sum; recomputation "
            f"time {format_ratio(verdict.time)} of the compiler's, each against its own cell at the full budget: "
            f"{claim.adaptive.first.strategy} / standard over {claim.compiler.first.strategy} / the compiled anchor"
            f"{compile_text}){_uneven(claim.adaptive, claim.compiler)}")


def _ranges(changes: Sequence[ma.Change], side: str) -> str:
    return format_range(None if (ratio := getattr(c, side)) is None else ratio.interval.mean for c in changes)


def _overall_lines(claims_by_group: Mapping[str, Sequence[ma.LevelClaim]]) -> tuple[str, ...]:
    by_level: dict[tuple[float, ...], list[tuple[str, ma.LevelClaim]]] = {}
    outcomes: Counter = Counter()
    for title, claims in claims_by_group.items():
        for claim in claims:
            outcomes[claim.verdict.outcome] += 1
        for levels, claim in ma.merge_levels(claims):
            by_level.setdefault(levels, []).append((title, claim))
    lines = []
    for levels in sorted(by_level, key=lambda key: (-key[0], len(key))):
        pairs = by_level[levels]
        head = f"adaptive at {_levels_text(levels)}, {len(pairs)} model{'' if len(pairs) == 1 else 's'}"
        changes = [c.change for _, c in pairs if c.change is not None and not c.change.reason]
        missing = [f"{title}: {c.change.reason if c.change is not None else 'no budget-adaptive cell'}"
                   for title, c in pairs if c.change is None or c.change.reason]
        if not changes:
            lines.append(f"{head}: n/a: " + "; ".join(missing))
            continue
        text = (f"{head}: peak {_ranges(changes, 'memory')} for {_ranges(changes, 'time')} time and "
                f"{_ranges(changes, 'energy')} energy")
        if missing:
            text += " (n/a for " + "; ".join(missing) + ")"
        uncertain = [title for title, c in pairs if c.change is not None and not c.change.reason
                     and _uneven(c.change.reference, c.change.runs)]
        if uncertain:
            text += f" (time uncertain for {', '.join(uncertain)}: uneven epochs)"
        lines.append(text)
    decided = sum(n for outcome, n in outcomes.items() if outcome != "n/a")
    if decided:
        lines.append(f"adaptive against the compiler's knapsack at the same target, every level and model: beats in "
                     f"{outcomes['beats']}, loses in {outcomes['loses']} of {decided} comparisons"
                     + (f" (ties {outcomes['ties']})" if outcomes["ties"] else "") + ".")
    return tuple(lines)


def _peft_lines(records: Sequence[CellRecord]) -> tuple[tuple[str, ...], str]:
    if not records:
        return (), "n/a: no records of the PEFT study in these results."
    changes = ma.peft_budget_changes(peft_analysis.split_baselines(records)[0])
    if not changes:
        return (), "n/a: no PEFT cell used the budget strategy (budget-adaptive checkpointing)."
    lines = []
    for backbone in analysis.order_keys(changes, MODELS):
        group = changes[backbone]
        name = display_name(MODELS, backbone)
        budgets = distinct_text(format_bytes(ma.plan_number(c.record, "budget_bytes")) for c in group)
        known = [c for c in group if not c.reason]
        missing = "; ".join(f"{c.record.method}/{c.record.dataset}: {c.reason}" for c in group if c.reason)
        if not known:
            lines.append(f"{name}: adaptive (budget {budgets}) n/a: {missing}")
            continue
        pairs = len(known)
        lines.append(
            f"{name}: adaptive (budget {budgets}): peak {_ranges(known, 'memory')} for {_ranges(known, 'time')} "
            f"time and {_ranges(known, 'energy')} energy over {pairs} method × dataset pair"
            f"{'' if pairs == 1 else 's'} (peak: the live-tensor peak of a step)"
            + (f"; n/a for {missing}" if missing else ""))
    return tuple(lines), ("The PEFT study's own cells only: each budget cell divided, seed by seed, by the standard "
                          "cell of the same backbone, dataset and method; ranges run over methods and datasets, "
                          "lowest to highest (means over seeds).")


# How it was measured ---------------------------------------------------------------------------------


def memory_methods(records: Sequence[CellRecord]) -> tuple[tuple[str, str], ...]:
    """How the section's numbers were measured, naming the margins, devices and energy sources of ``records``.

    Args:
        records: the memory study's records and the PEFT study's budget cells.

    Returns:
        ``(quantity, explanation)`` pairs.
    """
    margins = sorted({m for m in (ma.plan_number(r, "margin") for r in records) if m is not None})
    margin_text = ("These plans kept " + ", ".join(_percent(m) for m in margins) + " free." if margins else
                   "These records carry no margin.")
    devices = sorted({str(r.device) for r in records})
    cpu_only = bool(devices) and all(d.split(":", 1)[0] == "cpu" for d in devices)
    sources = energy_sources(records)
    return (
        ("Live peak", "The most bytes of tensors alive at once during one training step (forward, backward and "
                      "optimizer step), read after every operation by a dispatch-mode tracker: exact on any device, "
                      "transients included, allocator overhead excluded. n/a for compiled cells: under a dispatch "
                      "mode torch.compile's code falls back to eager, so the compiled step cannot be measured that "
                      "way; they are placed by the breakdown sum instead, as every cell in the figure is."),
        ("Breakdown sum", "Parameters + gradients + optimizer state + distinct storages saved for backward on one "
                          "representative step, counted from the tensors; the same on every device and available "
                          "for every cell, so the figure uses it for every point. It leaves out transients, so it "
                          "is below the live peak."),
        ("Plan's prediction", "One measured forward and backward pass without checkpointing gives each block's saved "
                              "activations and inputs; the predicted peak for a set of checkpointed blocks is the "
                              "largest of the forward's end, each recomputation during backward, and the optimizer "
                              "step. The adaptive plan checkpoints the fewest blocks whose prediction fits the "
                              "target; a level of N % puts the budget N % of the way from the predicted peak with "
                              "every block checkpointed (0 %) to the one with none (100 %). The compiler's cells "
                              "turn the same target into torch.compile's activation memory budget."),
        ("Margin", "The target is the budget × (1 - margin): room for allocator fragmentation and what the "
                   "prediction cannot see. A budget whose most frugal plan still misses its target ends oom before "
                   f"training, with the numbers in its status. {margin_text}"),
        ("Compile time", "torch.compile compiles forward and backward once, on a call before the first epoch whose "
                         "random draws are forked away; those seconds are the compile-time column and never part "
                         "of the time per epoch."),
        ("Host offload", "offload checkpoints every block and keeps what is still saved for backward in host "
                         "memory. On a GPU that frees device memory for copy time; on a CPU-only machine the host "
                         "is the device, so it saves nothing and only costs the copies; its host copies are then "
                         "counted in the breakdown sum. "
                         + (f"These records ran on {', '.join(devices)}: host = device." if cpu_only else
                            f"These records ran on {', '.join(devices) or 'no device'}.")),
        ("Energy", "Joules over the cell's epochs from " + (", ".join(sources) if sources else "no meter")
                   + ("; estimate: process CPU time × a fixed power per logical CPU, a model rather than a "
                      "measurement." if "estimate" in sources else ".")),
    )


# The section -------------------------------------------------------------------------------------------


def _group_titles(groups: Mapping[ma.GroupKey, Mapping[str, CellRuns]]) -> dict[ma.GroupKey, str]:
    # What ran (its shape, start and size), and the other axes only where one model has groups that differ in them
    # (each model trains on its own dataset: naming it would tell nothing).
    keys = list(groups)
    models = {k.model for k in keys}
    varying = [axis for axis in ("optimizer", "method", "dataset")
               if any(len({getattr(k, axis) for k in keys if k.model == model}) > 1 for model in models)]
    return {key: " · ".join([naming.what_ran(next(iter(groups[key].values())).first),
                             *(getattr(key, axis) for axis in varying)])
            for key in keys}


def _summary(records: Sequence[CellRecord]) -> str:
    counts = Counter(r.status for r in records)
    return (f"{len(records)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items())
            + f"; optimizer {distinct_text(r.optimizer for r in records)}; device "
            + distinct_text(r.device for r in records))


def build_memory_view(records: Sequence[CellRecord], peft_records: Sequence[CellRecord] = ()) -> MemoryView:
    """The memory strategies section from the memory study's records and the PEFT study's.

    Args:
        records: the memory grid's records (no other study's), any number of seeds.
        peft_records: the PEFT study's records (its ``budget`` cells get claim lines of their own).

    Returns:
        The section's view; without memory-study records its ``missing_note`` stands for that part.
    """
    peft_claims, peft_note = _peft_lines(peft_records)
    budget_cells = [r for r in peft_records if ma.budget_kind(r) is not None]
    methods = memory_methods([*records, *budget_cells])
    if not records:
        return MemoryView(missing_note=MISSING_NOTE, groups=(), claims=(), peft_claims=peft_claims,
                          peft_note=peft_note, methods=methods)
    groups = ma.group_cells(ma.sort_memory(records))
    titles = _group_titles(groups)
    views, claims_by_group = [], {}
    for index, (key, runs) in enumerate(groups.items()):
        slug = html_id("-".join(key), index, prefix="ms")
        reference = runs.get(ma.STANDARD)
        claims = ma.level_claims(runs)
        claims_by_group[titles[key]] = claims
        views.append(MemoryGroupView(
            slug=slug, title=titles[key], summary=_summary([r for c in runs.values() for r in c.runs]),
            figure=figures.tradeoff_figure(slug, titles[key], runs, reference),
            table=_table(slug, titles[key], runs),
            claims=tuple(_claim_line(levels, c) for levels, c in ma.merge_levels(claims))
            or ("n/a: no budget cell of this model.",),
            versus=tuple(_versus_line(c) for c in claims)))
    return MemoryView(missing_note="", groups=tuple(views), claims=_overall_lines(claims_by_group),
                      peft_claims=peft_claims, peft_note=peft_note, methods=methods)
