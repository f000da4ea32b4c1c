"""The report's context: failed cells, sessions, machines, hyper-parameters, and how each number was measured."""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Mapping, Sequence

from gradeff.axes.models import MODELS
from gradeff.records.formatting import NA, as_number
from gradeff.records.results import CellRecord, record_field, record_section
from gradeff.report.view import (
    Cell,
    Row,
    Table,
    display_name,
    distinct_text,
    energy_sources,
    metering_cost_fractions,
    status_text,
    text_or_na,
)
from gradeff.studies.grid import GRIDS

__all__ = ["environment_tables", "failures_table", "hparams_table", "methods", "runs_table"]


def failures_table(records: Sequence[CellRecord]) -> Table:
    """Every cell that did not end ``ok``: its status and the message it ended with.

    Args:
        records: one record per cell.

    Returns:
        The table (row-less, with a note, when every cell ended ok).
    """
    failed = [r for r in records if r.status != "ok"]
    rows = tuple(Row(label=r.cell, cells=(Cell(text=status_text(r), css=f"status {r.status}"),
                                          Cell(text=r.detail or NA, css="" if r.detail else "na")))
                 for r in failed)
    note = f"All {len(records)} cells trained every epoch." if not failed else \
        "Diverged (NaN/Inf loss) and out-of-memory cells are findings, not crashes; they never compete for best."
    return Table(id="failure-table", caption="Cells that did not end ok", header=("cell", "status", "detail")
                 if failed else (), rows=rows, note=note)


def runs_table(records: Sequence[CellRecord]) -> Table:
    """One row per pytest session: its profile(s), seed(s), device(s), cell count and end time.

    Args:
        records: one record per cell.

    Returns:
        The table.
    """
    sessions: dict[str, list[CellRecord]] = {}
    for record in records:
        sessions.setdefault(record.session or NA, []).append(record)
    rows = tuple(
        Row(label=session, cells=(Cell(text=distinct_text(r.profile for r in group)),
                                  Cell(text=distinct_text(r.seed for r in group)),
                                  Cell(text=distinct_text(r.device for r in group)), Cell(text=str(len(group))),
                                  Cell(text=_when(group))))
        for session, group in sessions.items())
    return Table(id="runs", caption="Sessions", header=("session", "profile", "seed", "device", "cells", "finished"),
                 rows=rows)


def _when(group: Sequence[CellRecord]) -> str:
    stamps = [r.finished_at for r in group if as_number(r.finished_at)]
    if not stamps:
        return NA
    return _dt.datetime.fromtimestamp(max(stamps), tz=_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def environment_tables(records: Sequence[CellRecord]) -> tuple[Table, ...]:
    """One key/value table per distinct machine environment (versions, device, CPU).

    Args:
        records: one record per cell.

    Returns:
        The tables, in order of first appearance.
    """
    distinct: dict[tuple, list[CellRecord]] = {}
    for record in records:
        env = record_section(record, "environment")
        distinct.setdefault(tuple(sorted((str(k), text_or_na(v)) for k, v in env.items())), []).append(record)
    tables = []
    for index, (env, group) in enumerate(distinct.items(), start=1):
        sessions = distinct_text(r.session for r in group)
        tables.append(Table(
            id=f"environment-{index}", caption=f"Machine {index}: {len(group)} cells (sessions {sessions})",
            header=("field", "value") if env else (),
            rows=tuple(Row(label=k, cells=(Cell(text=v, css="na" if v == NA else ""),)) for k, v in env),
            note="" if env else "n/a: these records carry no environment."))
    return tuple(tables)


def _flat(prefix: str, value: object, out: dict[str, object]) -> None:
    # The method's settings nest under "method": one column each (method.lora_r), not one dict.
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = value


def _hparams(record: CellRecord) -> dict[str, object]:
    out: dict[str, object] = {}
    # Where each rate came from is a sentence per cell (the summary tallies it), not a setting to tabulate.
    _flat("", {k: v for k, v in record_section(record, "hparams").items() if k != "lr_source"}, out)
    return out


def _value_text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"  # LoRA's target modules
    return text_or_na(value)


def _weights_source(record: CellRecord) -> str:
    return text_or_na(record_field(record, "weights", "source"))


def _weights_text(record: CellRecord) -> str:
    # random, pretrained, or local with its folder: the same model may start from different places.
    source, folder = _weights_source(record), record_field(record, "weights", "path")
    return f"local ({folder})" if source == "local" and folder else source


def _cells_text(pairs: Sequence[tuple[str, str]]) -> str:
    """The values of one setting over a model's cells: one value, or each value with the methods that use it."""
    values = dict.fromkeys(value for _, value in pairs)
    if len(values) <= 1:
        return next(iter(values), NA)
    by_method: dict[str, dict[str, None]] = {}
    for method, value in pairs:
        by_method.setdefault(method, {})[value] = None
    if all(len(v) == 1 for v in by_method.values()):
        # A setting that follows the method (the learning-rate scale): say which method uses which value.
        methods_of: dict[str, list[str]] = {}
        for method, value in by_method.items():
            methods_of.setdefault(next(iter(value)), []).append(method)
        return "; ".join(f"{value} ({', '.join(methods)})" for value, methods in methods_of.items())
    return ", ".join(values)


def hparams_table(models: Sequence[str], groups: Mapping[str, Sequence[CellRecord]], *, grid: str | None = None,
                  table_id: str = "hparams") -> Table:
    """Hyper-parameters and starting weights per model; a value that differs between a model's cells lists each one.

    Nested settings (the fine-tuning method's, under ``method``) get a column each; a value that
    follows the method names the methods using it.

    Args:
        models: model keys, in order.
        groups: model key → its records.
        grid: the grid the records belong to, named in the caption (``None``: not named).
        table_id: the table's HTML id.

    Returns:
        Models as rows, hyper-parameter names and the starting weights as columns.
    """
    flat = {model: [(r, _hparams(r)) for r in groups[model]] for model in models}
    keys: list[str] = []
    for model in models:
        for _, hparams in flat[model]:
            keys.extend(k for k in hparams if k not in keys)
    rows = []
    for model in models:
        cells = [Cell(text=_cells_text([(r.method, _value_text(hparams.get(key))) for r, hparams in flat[model]]))
                 for key in keys]
        cells.append(Cell(text=_cells_text([(r.method, _weights_text(r)) for r in groups[model]])))
        rows.append(Row(label=display_name(MODELS, model), cells=tuple(cells)))
    study = f": {display_name(GRIDS, grid)}" if grid is not None else ""
    return Table(id=table_id, caption=f"Hyper-parameters and starting weights per model{study}",
                 header=("model", *keys, "starting weights") if rows else (), rows=tuple(rows),
                 note=_hparams_note(keys) if rows else "n/a: these records carry no hyper-parameters.")


def _hparams_note(keys: Sequence[str]) -> str:
    notes = []
    if "heldout_samples" in keys:
        notes.append("heldout_samples: the test split, evaluated before training, every eval_every optimizer steps "
                     "and after every epoch, outside the timing (0: none)")
    if "validation_samples" in keys:
        notes.append("validation_samples: the validation split tuning reads, evaluated after the last epoch")
    if "protocol" in keys:
        notes.append("protocol: where lr came from (tuned: the committed table; shared: one rate per model)")
    if any(key.startswith("method.") for key in keys):
        notes.append("method.*: the fine-tuning method's settings (lr_scale multiplies lr)")
    notes.append("starting weights: random initialisation, the suite's cached pretraining, or a local folder "
                 "(see 'How each number was measured')")
    return "; ".join(notes) + "."


def _carried(records: Sequence[CellRecord]) -> str:
    carried = sum(bool(record_section(r, "inference")) for r in records)
    return f"{carried} of the {len(records)} cells here carry it."


def methods(records: Sequence[CellRecord]) -> tuple[tuple[str, str], ...]:
    """How each number was measured, naming the energy sources these records actually used.

    Args:
        records: one record per cell.

    Returns:
        ``(quantity, explanation)`` pairs.
    """
    sources = energy_sources(records)
    weights = Counter(_weights_source(r) for r in records)
    weights_used = ", ".join(f"{source} ({n} cell{'' if n == 1 else 's'})" for source, n in weights.items()) or NA
    heldout = sum(any(as_number(e.heldout_accuracy) is not None for e in r.epochs) for r in records)
    source_text = {
        "nvml": "nvml: the GPU's own energy counter (GPU board only, not CPU or DRAM)",
        "rapl": "rapl: the CPU packages' RAPL counters (whole packages, every process)",
        "estimate": "estimate: process CPU time × a fixed power per logical CPU — a model, not a measurement",
        "none": "none: nothing measured (n/a)",
    }
    used = "; ".join(source_text.get(s, s) for s in sources) if sources else "no energy meter in these records"
    fractions = sorted(metering_cost_fractions(records))
    cost = (f"In these records it is {fractions[len(fractions) // 2]:.2%} of epoch time at the median cell and "
            f"{fractions[-1]:.2%} at most." if fractions else "These records do not carry it.")
    return (
        ("Quality, speed, memory", "One answer metric per question, the same in every table, verdict and claim: "
                                   "quality is the test split's loss (its top-1 accuracy for a classifier, "
                                   "micro-F1 for multi-label); speed is the time to target, the seconds until the "
                                   "test loss first reached halfway from the untrained model's to the task's floor "
                                   "('not reached' where it never did); memory is the live-tensor peak of a training "
                                   "step (the process RSS only where every cell ran isolated, and then a gap under "
                                   "4 MiB is no difference). The training loss, time per epoch and the other "
                                   "figures are diagnostics. Over several seeds every comparison is paired by seed "
                                   "(paired t-test, Holm-adjusted within a table or ranking); cells with the same "
                                   "numbers on every seed are one entry, 'identical'."),
        ("Loss", "Mean cross-entropy per target token (or image) over each epoch, weighted by targets; final "
                 "loss is the last epoch's, mean loss the average over epochs (the paper's tables average over "
                 "the run). The loss floor is the Bayes-optimal predictor's loss on the same samples."),
        ("Time", "Wall-clock seconds per measured epoch, read after synchronising the device; warm-up and model "
                 "building are excluded. Time per epoch is the mean over epochs."),
        ("RAM", "Resident set size of the benchmark process and its children (data-loader workers). Peak: the "
                "kernel's high-water mark of the process (VmHWM, reset at each epoch), exact; with child processes "
                "the largest sample instead, a lower bound (peak_source says which). Mean: samples taken at 10 Hz "
                "on a background thread and at each epoch's two ends, with the system-wide percentage in use. RSS "
                "counts shared pages once per process: an upper bound of the footprint."),
        ("GPU", "Utilization and memory from NVML, sampled periodically (NVML averages utilization over its own "
                "window, so very short runs are flagged); allocator peaks from torch.cuda max_memory_allocated / "
                "max_memory_reserved, reset at each epoch. n/a without a GPU."),
        ("Energy", f"Joules over the cell's epochs, and CO2 from a grid intensity. Sources in this report: {used}."),
        ("Metering cost", "The meters' window is opened once per cell and each epoch is a segment of it. Recorded "
                          "per epoch: seconds of the segments' synchronous reads on the training thread plus CPU "
                          f"seconds of the sampling threads, over the epoch's seconds. {cost}"),
        ("Memory breakdown", "Parameter, gradient and optimizer-state bytes counted from the tensors (a 4-bit "
                             "weight counts its packed bytes plus its quantisation constants); activation "
                             "bytes = distinct storages saved for backward (saved-tensor hooks, parameters excluded, "
                             "deduplicated by storage) on one representative step: the warm-up micro-batch, with "
                             "the strategy applied. Identical on CPU and GPU. The PEFT study's training memory is "
                             "the GPU allocator peak where measured, else the live-tensor peak of a step, else the "
                             "sum of these four parts (the live peak and the memory study's plans: see 'Memory "
                             "strategies')."),
        ("Test evaluation", "Every held-out figure is the task's test split's (never trained or tuned on), "
                            "evaluated before training, every eval_every optimizer steps and after each epoch, "
                            "outside the epochs' timing and meters, in eval mode (dropout off) without autograd: "
                            "mean cross-entropy per target and top-1 accuracy. Final held-out accuracy is the "
                            "last epoch's. The ceiling is the Bayes classifier's accuracy on the same split. "
                            "Tuning reads the validation split, evaluated after the last epoch. Time to target: "
                            "optimizer steps, training seconds and joules until the test loss first reached "
                            "halfway from the untrained model's to the floor, at eval_every-step resolution. "
                            f"{heldout} of the {len(records)} runs here carry it."),
        ("Parameters", "Total and trainable parameter counts are the values the deployed model's parameters hold, "
                       "tied ones once and adapters included, peft's frozen copy of a retrained head left out; a "
                       "4-bit (QLoRA NF4) weight counts the values it stands for, unpacked, not its packed bytes. The "
                       "share trained is trainable / total."),
        ("Starting weights", "random: the model's seeded initialisation; pretrained: the suite pretrains each "
                             "backbone once on a related synthetic source task and caches it, and every cell "
                             "starts from that copy with a fresh head (the one-off cost is listed in the PEFT "
                             "study's pretraining table, not in any cell's time); local: a save_pretrained folder "
                             f"given with --gradeff-weights. In these records: {weights_used}."),
        ("Inference cost", "After training, the classifier runs on the held-out split in eval mode without "
                           "autograd: latency is the median (and 90th percentile) of single-image forwards; "
                           "throughput, energy and mean power come from one pass over the split in batches "
                           "(energy per image = its joules / its images, from the same energy sources as training, "
                           "an 'estimate' marked (est.)); peak inference memory is the live-tensor peak of one "
                           "forward at the batch size, parameters and inputs included (with the GPU allocator's "
                           "peak where on CUDA); MACs per image are counted by PyTorch's FLOP counter (matrix "
                           "products, convolutions, attention kernels, and bitsandbytes' 4-bit matmuls as the dense "
                           "products they compute, so QLoRA counts what LoRA counts; element-wise ops and "
                           f"normalisations are not counted). {_carried(records)}"),
        ("NetScore family", "NetScore = 20·log10(a² / (p^0.5 · m^0.5)) with accuracy a in %, parameters p "
                            "and MACs per image m in millions (Wong 2018); NS-E = 20·log10(A² / (t·P)^(1/8)), "
                            "NS-M = 20·log10(A² / r^(1/8)), NS# = 20·log10(A² / (r·t·P)^(1/8)) with A in %, the "
                            "inference pass's time t in s and mean power P in W (its measured energy over t, so t·P "
                            "is the pass's energy), peak inference memory r in MiB. "
                            "Units: the papers', kept so figures compare with published ones; they make the "
                            "absolute value (even its sign: under 1 million parameters or MACs, 1 s, 1 W or 1 MiB "
                            "a cost term raises the score) depend on the units, while differences and rankings do "
                            "not. Compare scores of one dataset, never read one alone. A score is computed from "
                            "measured inputs only: a missing, zero or non-finite input makes it n/a (the input "
                            "named in the tooltip), never 0. NS-E and NS# from an estimated energy are estimated "
                            "(est.)."),
        ("Baselines", "Foundation models used without fine-tuning on the same datasets and held-out splits: "
                      "zero-shot CLIP and SigLIP (one text prompt per class), DINOv2 read by a linear probe (head "
                      "only, frozen features), two small autoregressive VLMs (SmolVLM, vlm_prompt) prompted to "
                      "classify. A zero-shot cell has no epochs: its accuracy is one evaluation of the held-out "
                      "split. A baseline from random weights scores at chance by construction: give real weights "
                      "with --gradeff-weights MODEL=PATH."),
        ("Claims", "Each claim of the papers is checked on its own study's cells that ended ok, seed by seed; where "
                   "the paper gives a range, the effect's 95 % interval over seeds is held against it, with no "
                   "other tolerance: reproduced (they meet; one seed: the value inside), not reproduced (apart, or "
                   "no effect beyond the seed spread), "
                   "contradicted (the effect goes against the claim beyond the spread), not measurable here (the "
                   "cells or measurements it needs are missing, or the measured quantity is not the paper's: a "
                   "stand-in model, an estimated energy, a vocabulary-dependent loss). A tie is never a win. Each "
                   "row states its rule; a verdict on a CPU profile carries a scale caveat."),
        ("Names", "A model's name is what ran: a tiny model from random weights, or pretrained here on a synthetic "
                  "task, is '<family>-shaped' with its size ('CLIP-shaped, random init, 0.26 M params'); the named "
                  "model's own name only where its real weights were loaded. A dataset's name carries the sizes it "
                  "was trained at (classes and image side, or token types and sequence length)."),
        ("Status", "ok: trained every epoch; diverged: NaN/Inf loss (with the optimizer step); oom: out of "
                   "memory; error: another exception; skipped: the cell is incompatible. Only ok cells compete."),
    )
