"""The PEFT study's deployment side: what each cell costs to use, the NetScore family, and the baselines.

Three parts of the PEFT section, built from the records of the grids read by held-out accuracy:

- per backbone × dataset, every cell's inference cost (latency at batch 1, throughput, peak
  inference memory, energy per image with its source, MACs per image) and its NetScore, NS-E,
  NS-M and NS# (:mod:`gradeff.analysis.netscore`), as recorded in ``record.inference``;
- per dataset, the cells ranked by each score, top first;
- per dataset, each foundation-model baseline next to the best fine-tuned cell of each backbone,
  with how the baseline's weights were obtained.

Numbers are formatted here (the reading is :mod:`gradeff.analysis.peft`). An estimated figure (the
CPU-time energy estimate, and the NS-E and NS# computed from it) reads ``(est.)``; a score whose input
was not measured reads ``n/a`` with the missing input in its tooltip, never 0. A baseline that ran from
random weights scores at chance by construction: it is flagged wherever its accuracy shows and left
out of the ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gradeff import analysis
from gradeff.analysis import naming, peft
from gradeff.analysis.netscore import LABELS, Score
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS
from gradeff.axes.models import MODELS
from gradeff.records.formatting import (
    NA,
    as_number,
    format_bytes,
    format_energy,
    format_joules,
    format_percent,
    format_quantity,
    format_rate,
    format_seconds,
)
from gradeff.records.results import CellRecord, meter_field, record_field
from gradeff.report.view import BaselinesView, Cell, Row, Table, display_name, first_word, html_id, status_text

__all__ = [
    "BASELINES_MISSING_NOTE", "ESTIMATED", "RANKING_NOTE", "SCORE_INPUTS", "baselines_views", "cell_label",
    "format_score", "inference_table", "ranking_tables", "weights_line",
]

ESTIMATED = "(est.)"
BASELINES_MISSING_NOTE = ("No foundation-model baselines in these results: run the baselines grid (-m baselines: "
                          "CLIP and SigLIP zero-shot, a DINOv2 linear probe, the prompted VLMs SmolVLM and vlm_prompt) "
                          "to set them against fine-tuning.")
# The argument names gradeff.analysis.netscore.netscore_family lists in ``missing``, in words.
SCORE_INPUTS: Mapping[str, str] = {
    "accuracy": "held-out accuracy",
    "parameters": "parameter count",
    "macs": "MACs per image (none counted)",
    "inference_seconds": "time of the inference pass",
    "mean_power_w": "mean power of the inference pass (no energy meter, or it read 0 J)",
    "peak_memory_bytes": "peak inference memory",
    "value": "the recorded value is not a number",
}
RANKING_NOTE = (
    "Each score is 20·log10(accuracy² / cost) in dB, in the papers' units: accuracy in %, parameters and MACs "
    "in millions (NetScore: a^2 / (p^0.5 · m^0.5)), time in s, power in W, memory in MiB (NS-E, NS-M, NS#: each "
    "cost to the power 1/8). The units are kept so the figures compare with published ones; below one million "
    "parameters or MACs, or under 1 s, 1 W or 1 MiB, a cost term raises the score instead of lowering it. A "
    "change of unit shifts every cell's score by the same amount, so differences and rankings hold in any unit: "
    "compare scores, never read one alone. NS-E and NS# charge the energy of the inference pass (its seconds "
    "times its mean power): where that energy is the CPU-time estimate (energy source 'estimate'), not a meter "
    "reading, they are estimated and marked (est.). Scores compare only between passes over the same images, "
    "hence one ranking per dataset. Only cells that ended ok are ranked; a baseline that ran from random weights "
    "is left out (it scores at chance by construction).")
_ESTIMATE_TITLE = "estimated: the energy is process CPU time × a fixed power per CPU, not a meter reading"
_NOT_OK_TITLE = "the cell did not end ok: no inference was measured"
_NO_INFERENCE_TITLE = "not recorded: this record carries no inference cost (an older record)"
_INFERENCE_HEADER = ("latency (batch 1)", "throughput", "peak inference memory", "energy per image",
                     "MACs per image", *(f"{label} (dB)" for label in LABELS.values()))


def format_score(score: Score | None) -> Cell:
    """One score's cell: its value in dB, ``(est.)`` where estimated, ``n/a`` with the missing input named."""
    if score is None:
        return Cell(text=NA, css="na", title=_NO_INFERENCE_TITLE)
    if score.value is None:
        missing = ", ".join(SCORE_INPUTS.get(name, name) for name in score.missing) or "an input"
        return Cell(text=NA, css="na", title=f"missing input: {missing}")
    if score.estimated:
        return Cell(text=f"{score.value:.1f} {ESTIMATED}", css="estimated", title=_ESTIMATE_TITLE)
    return Cell(text=f"{score.value:.1f}")


def cell_label(record: CellRecord) -> str:
    """``ViT-S/16 · QLoRA + standard`` for a fine-tuning cell, ``CLIP-shaped, random init, 0.26 M params · baseline``
    for a baseline (what ran: see :func:`gradeff.analysis.naming.what_ran`): one line, for rankings."""
    if peft.is_baseline(record):
        return f"{naming.what_ran(record)} · baseline"
    return f"{display_name(MODELS, record.model)} · {_short_method(record)} + {record.strategy}"


def _short_method(record: CellRecord) -> str:
    # "QLoRA (4-bit NF4 + LoRA)" → "QLoRA", "Linear probe (head only, frozen features)" → "Linear probe".
    return display_name(METHODS, record.method).split(" (", 1)[0]


def _row_label(record: CellRecord, seeds: bool = False) -> str:
    # Within one backbone's table: the method (and strategy, which a baseline does not vary), and the seed where
    # a cell ran several (each seed's deployment cost is its own measurement).
    method = display_name(METHODS, record.method)
    label = method if peft.is_baseline(record) else f"{method} + {record.strategy}"
    return f"{label} · seed {record.seed}" if seeds else label


def _is_estimated(record: CellRecord) -> bool:
    return (record_field(record, "inference", "energy_estimated") is True
            or record_field(record, "inference", "energy_source") == "estimate")


def _energy_cell(record: CellRecord) -> Cell:
    source = record_field(record, "inference", "energy_source")
    value = peft.inference_number(record, "energy_per_image_j")
    if value is None:
        reason = "no energy meter (source none)" if source in (None, "none") else "not measured"
        return Cell(text=NA, css="na", title=reason)
    if value == 0:
        # The CPU-time estimate counts clock ticks: a pass shorter than one reads 0 J, which is no measurement.
        return Cell(text=NA, css="na", title=f"the {source} energy read 0 J over this short pass: below its "
                                             "resolution, not a measurement")
    if _is_estimated(record):
        return Cell(text=f"{format_energy(value)} {ESTIMATED}", sub=f"source: {source}", css="estimated",
                    title=_ESTIMATE_TITLE)
    return Cell(text=format_energy(value), sub=f"source: {source}")


def _measured_cell(record: CellRecord, key: str, show, detail_key: str, detail, title: str = "") -> Cell:
    """``inference[key]`` shown with ``show``, and ``detail(inference[detail_key])`` under it where recorded."""
    value = peft.inference_number(record, key)
    if value is None:
        return Cell(text=NA, css="na", title="not measured")
    extra = peft.inference_number(record, detail_key)
    return Cell(text=show(value), sub="" if extra is None else detail(extra), title=title)


def _latency_cell(record: CellRecord) -> Cell:
    return _measured_cell(record, "latency_s", format_seconds, "latency_p90_s",
                          lambda p90: f"p90 {format_seconds(p90)}")


def _throughput_cell(record: CellRecord) -> Cell:
    return _measured_cell(record, "images_per_s", format_rate, "batch_size", lambda batch: f"batches of {batch:.0f}")


def _peak_cell(record: CellRecord) -> Cell:
    return _measured_cell(record, "peak_bytes", format_bytes, "allocator_peak_bytes",
                          lambda allocator: f"allocator {format_bytes(allocator)}",
                          title="live tensors of one forward at the batch size: parameters, buffers, inputs and every "
                                "tensor the forward creates")


def _macs_cell(record: CellRecord) -> Cell:
    value = peft.inference_number(record, "macs_per_image")
    parameters = peft.inference_number(record, "parameters")
    sub = "" if parameters is None else f"{format_quantity(parameters)} parameters"
    if value is None:
        return Cell(text=NA, css="na", sub=sub, title="not measured")
    if value == 0:
        return Cell(text=NA, css="na", sub=sub, title="no MACs counted: its kernels have no registered formula")
    return Cell(text=format_quantity(value), sub=sub)


def _cost_cells(record: CellRecord) -> tuple[Cell, ...]:
    """The inference cost and the four scores of one cell (status or ``n/a`` where there are none)."""
    width = len(_INFERENCE_HEADER)
    if record.status != "ok":
        return (Cell(text=status_text(record), css=f"status {record.status}", title=record.detail),
                *(Cell(text=NA, css="na", title=_NOT_OK_TITLE),) * (width - 1))
    if not peft.inference_of(record):
        return (Cell(text=NA, css="na", title=_NO_INFERENCE_TITLE),) * width
    return (_latency_cell(record), _throughput_cell(record), _peak_cell(record), _energy_cell(record),
            _macs_cell(record), *(format_score(peft.score_of(record, key)) for key in LABELS))


def inference_table(slug: str, title: str, records: Sequence[CellRecord]) -> Table:
    """Every cell of one backbone and dataset: its inference cost and NetScore family.

    Args:
        slug: the group's HTML id prefix (the table is ``{slug}-inference``).
        title: the group's heading (``ViT-S/16 on CIFAR-100-like (synthetic)``).
        records: the group's records, in study order.
    """
    caption = f"{title}: inference cost and NetScore family"
    elsewhere = [r for r in records if peft.measured_on_standard(r)]
    records = [r for r in records if not peft.measured_on_standard(r)]
    same_model = (" Left out, the standard cell's model bit for bit (checkpointing, offload and the adaptive budget "
                  "change what training keeps in memory, not what it computes): "
                  + "; ".join(dict.fromkeys(_row_label(r) for r in elsewhere)) + ".") if elsewhere else ""
    if not any(peft.inference_of(r) for r in records):
        return Table(id=f"{slug}-inference", caption=caption, header=(), rows=(),
                     note="n/a: no cell of this backbone and dataset recorded its inference cost." + same_model)
    sources = sorted({str(record_field(r, "inference", "energy_source")) for r in records if peft.inference_of(r)})
    estimated = any(_is_estimated(r) for r in records)
    return Table(
        id=f"{slug}-inference", caption=caption, header=("cell", *_INFERENCE_HEADER),
        rows=tuple(Row(label=_row_label(r, len({x.seed for x in records}) > 1), cells=_cost_cells(r))
                   for r in records),
        note="Measured on the held-out split once the cell is trained (a zero-shot cell as it is): latency is "
             "the median of single-image forwards (90th percentile below); throughput and energy over one pass in "
             "batches; peak memory is the live-tensor peak of one forward. Energy source: " + ", ".join(sources) + "."
             + (f" {ESTIMATED}: from the CPU-time energy estimate, not a meter; NS-E and NS# computed from it are "
                "estimated too." if estimated else "")
             + " Scores in dB, in the papers' units (see the ranking's note); n/a: an input was not measured "
               "(named in the tooltip)." + same_model)


def _random(record: CellRecord) -> bool:
    return peft.is_baseline(record) and peft.weights_source(record) == "random"


def _ranked_cell(runs: CellRuns, score: Score) -> Cell:
    value = f"{score.value:.1f} dB" + (f" {ESTIMATED}" if score.estimated else "")
    seeds = len(runs.ok)
    return Cell(text=cell_label(runs.first), sub=value + (f" (mean of {seeds} seeds)" if seeds > 1 else ""),
                css="text estimated" if score.estimated else "text",
                title=_ESTIMATE_TITLE if score.estimated else "")


def _ranking_table(index: int, dataset: str, records: Sequence[CellRecord]) -> Table:
    name = display_name(TASKS, dataset)
    table_id = html_id(dataset, index, prefix="peft-ranking-")
    caption = f"{name}: cells ranked by each NetScore-family score (mean over seeds), top first"
    # A cell that deploys the standard cell's model is that cell in the ranking, not a second entry.
    candidates = [r for r in records if not _random(r) and not peft.measured_on_standard(r)]
    rankings = {key: peft.netscore_ranking(candidates, key) for key in LABELS}
    depth = max(len(ranked) for ranked in rankings.values())
    notes = []
    left_out = list(dict.fromkeys(cell_label(r) for r in records if _random(r)))
    if left_out:
        notes.append("Left out, random weights (at chance by construction): " + "; ".join(left_out) + ".")
    ok_cells = {r.cell for r in candidates if analysis.comparable(r)}
    failed = list(dict.fromkeys(r.cell for r in candidates if r.cell not in ok_cells))
    if failed:
        notes.append("Left out, no seed ended ok: " + ", ".join(failed) + ".")
    for key, label in LABELS.items():
        ranked = {runs.cell for runs, _ in rankings[key]}
        unscored = list(dict.fromkeys(cell_label(r) for r in candidates if r.cell in ok_cells and r.cell not in ranked))
        if unscored:
            notes.append(f"No {label} (an input not measured): " + "; ".join(unscored) + ".")
    devices = sorted({r.device for r in candidates})
    if len(devices) > 1:
        notes.append(f"The cells ran on several devices ({', '.join(devices)}): time, power and energy compare "
                     "only between cells of one device.")
    if depth == 0:
        return Table(id=table_id, caption=caption, header=(), rows=(),
                     note="n/a: no cell of this dataset has a score. " + " ".join(notes))
    rows = []
    for rank in range(depth):
        cells = tuple(_ranked_cell(*rankings[key][rank]) if rank < len(rankings[key])
                      else Cell(text="", css="empty") for key in LABELS)
        rows.append(Row(label=str(rank + 1), cells=cells))
    return Table(id=table_id, caption=caption, header=("rank", *LABELS.values()), rows=tuple(rows),
                 note=" ".join(["Fine-tuned cells and baselines together; a tie keeps the study's order.", *notes]))


def ranking_tables(records: Sequence[CellRecord]) -> tuple[Table, ...]:
    """Per dataset, the cells (fine-tuned and baselines) ranked by each score of the NetScore family.

    Args:
        records: the study's records, fine-tuned and baselines, in study order.

    Returns:
        One table per dataset, datasets in registry order; rows are ranks, columns the four scores.
    """
    by_dataset: dict[str, list[CellRecord]] = {}
    for record in records:
        by_dataset.setdefault(record.dataset, []).append(record)
    return tuple(_ranking_table(index, dataset, by_dataset[dataset])
                 for index, dataset in enumerate(analysis.order_keys(by_dataset, TASKS)))


def weights_line(record: CellRecord) -> str:
    """How a baseline's starting weights were obtained, and what that makes of its accuracy, in one line."""
    name = naming.what_ran(record)
    source = peft.weights_source(record)
    give = f"give real weights with --gradeff-weights {record.model}=PATH"
    if source == "random":
        if record.method in METHODS and not METHODS[record.method].trains:
            return (f"{name}: random weights, so it scores at chance by construction; its accuracy is not a "
                    f"finding; {give}.")
        return (f"{name}: random weights: the probe reads random features, so its accuracy says nothing about "
                f"{first_word(name)}; {give}.")
    if source == "pretrained":
        info = record_field(record, "weights", "pretraining")
        info = info if isinstance(info, Mapping) else {}
        steps, accuracy = as_number(info.get("optimizer_steps")), as_number(info.get("heldout_accuracy"))
        detail = ", ".join(part for part in (
            "" if steps is None else f"{steps:.0f} steps",
            "" if accuracy is None else f"source-task held-out accuracy {format_percent(100 * accuracy)}") if part)
        return (f"{name}: the suite's own pretraining on a synthetic source task (cached"
                + (f"; {detail}" if detail else "") + f"), not the model's published weights; {give}.")
    if source == "local":
        folder = record_field(record, "weights", "path") or NA
        return f"{name}: weights loaded from the local folder {folder} (--gradeff-weights)."
    return f"{name}: starting weights not recorded ({source or NA})."


_BASELINE_HEADER = ("kind", "starting weights", "held-out accuracy", "training / probe time", "training energy",
                    "latency (batch 1)", "peak inference memory", "energy per image", "NetScore (dB)", "NS# (dB)")


def _trains(record: CellRecord) -> bool:
    return bool(record.epochs) or not (record.method in METHODS and not METHODS[record.method].trains)


def _accuracy_cell(record: CellRecord) -> Cell:
    value = analysis.metric_value(record, "heldout_accuracy")
    if value is None:
        return Cell(text=NA, css="na", title="not measured")
    if _random(record):
        what = "at chance by construction" if not _trains(record) else "a probe of random features"
        return Cell(text=format_percent(value), sub=f"random weights: {what}, not a finding", css="random",
                    title="random weights: see the line below the table")
    return Cell(text=format_percent(value))


def _training_cells(record: CellRecord) -> tuple[Cell, Cell]:
    if not _trains(record):
        none = Cell(text="none", sub="zero-shot: no training", css="text")
        return none, none
    seconds = peft.training_seconds(record)
    epochs = len(record.epochs)
    time = Cell(text=NA, css="na", title="not measured") if seconds is None else \
        Cell(text=format_seconds(seconds), sub=f"{epochs} epoch{'' if epochs == 1 else 's'}")
    joules = analysis.metric_value(record, "energy")
    source = meter_field(record, "energy", "source")
    if joules is None:
        energy = Cell(text=NA, css="na", title="not measured")
    elif source == "estimate":
        energy = Cell(text=f"{format_joules(joules)} {ESTIMATED}", sub="source: estimate", css="estimated",
                      title=_ESTIMATE_TITLE)
    else:
        energy = Cell(text=format_joules(joules), sub=f"source: {source or NA}")
    return time, energy


def _baseline_row(record: CellRecord, kind: str, seeds: bool = False) -> Row:
    label = (naming.what_ran(record) if peft.is_baseline(record) else display_name(MODELS, record.model)) \
        + (f" · seed {record.seed}" if seeds else "")
    weights = Cell(text=peft.weights_source(record) or NA, css="text" if peft.weights_source(record) else "na")
    if record.status != "ok":
        return Row(label=label, cells=(Cell(text=kind, css="text"), weights,
                                       Cell(text=status_text(record), css=f"status {record.status}",
                                            title=record.detail),
                                       *(Cell(text=NA, css="na", title=_NOT_OK_TITLE),) * 7))
    costs = _cost_cells(record)
    cost = dict(zip(_INFERENCE_HEADER, costs, strict=True))
    netscore = cost[f"{LABELS['netscore']} (dB)"]
    sharp = cost[f"{LABELS['ns_sharp']} (dB)"]
    if _random(record):
        netscore, sharp = (Cell(text=c.text, sub="random weights", css=f"{c.css} random".strip(), title=c.title)
                           for c in (netscore, sharp))
    return Row(label=label, cells=(Cell(text=kind, css="text"), weights, _accuracy_cell(record),
                                   *_training_cells(record), cost["latency (batch 1)"],
                                   cost["peak inference memory"], cost["energy per image"], netscore, sharp))


def _method_word(record: CellRecord) -> str:
    return _short_method(record).lower()


def _baselines_view(index: int, dataset: str, baselines: Sequence[CellRecord],
                    tuned: Sequence[CellRecord]) -> BaselinesView:
    slug = html_id(dataset, index, prefix="peft-baselines-")
    name = display_name(TASKS, dataset)
    repeated = len({r.seed for r in [*baselines, *tuned]}) > 1
    rows = [_baseline_row(r, f"baseline: {_method_word(r)}", repeated) for r in baselines]
    backbones = peft.group_by_backbone(r for r in tuned if r.dataset == dataset)
    for model in analysis.order_keys((m for m, _ in backbones), MODELS):
        runs = by_cell(backbones[(model, dataset)])
        means = {cell: m for cell, r in runs.items() if (m := r.mean("heldout_accuracy")) is not None}
        if not means:
            rows.append(Row(label=display_name(MODELS, model), cells=(
                Cell(text="fine-tuned", css="text"),
                *(Cell(text=NA, css="na", title="no fine-tuning cell of this backbone ended ok with an accuracy"),)
                * (len(_BASELINE_HEADER) - 1))))
            continue
        best = runs[max(means, key=lambda cell: means[cell])]
        kind = f"best fine-tuned: {display_name(METHODS, best.first.method)} + {best.first.strategy}"
        rows.extend(_baseline_row(r, kind, repeated) for r in best.runs)
    note = ("Each baseline, then the fine-tuning cell of each backbone with the best mean test accuracy over its ok "
            "seeds on this dataset (every seed a row). "
            "Training time and energy: the epochs that trained (a linear probe trains its head only; zero-shot "
            "trains nothing); inference figures as in the inference tables. "
            f"{ESTIMATED}: from the CPU-time energy estimate, not a meter.")
    if not backbones:
        note += " No fine-tuning cell ran on this dataset."
    table = Table(id=f"{slug}-table", caption=f"{name}: foundation-model baselines against the best fine-tuned cells",
                  header=("model", *_BASELINE_HEADER), rows=tuple(rows), note=note)
    return BaselinesView(slug=slug, title=name, table=table, weights=tuple(weights_line(r) for r in baselines))


def baselines_views(tuned: Sequence[CellRecord], baselines: Sequence[CellRecord]) -> tuple[BaselinesView, ...]:
    """Per dataset that has baselines, each baseline next to the best fine-tuned cell of each backbone.

    Args:
        tuned: the study's fine-tuning records, in study order.
        baselines: its baseline records, in study order.

    Returns:
        One view per dataset, in registry order; empty without baselines.
    """
    by_dataset: dict[str, list[CellRecord]] = {}
    for record in baselines:
        by_dataset.setdefault(record.dataset, []).append(record)
    return tuple(_baselines_view(index, dataset, by_dataset[dataset], tuned)
                 for index, dataset in enumerate(analysis.order_keys(by_dataset, TASKS)))
