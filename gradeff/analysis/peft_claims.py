"""The PEFT study's claims: cheap methods' energy and accuracy, the adaptive algorithm's memory, the foundation
models against fine-tuning, and fine-tuning against a raw-pixel baseline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from gradeff.analysis import memory as memory_analysis
from gradeff.analysis import naming
from gradeff.analysis.answer import sanity_accuracy
from gradeff.analysis.claim_rules import (
    CONTRADICTED,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    cell_axes,
    effect_of,
    effect_verdict,
    paired_changes,
    percent_change,
)
from gradeff.analysis.runs import CellRuns, by_cell
from gradeff.records.results import CellRecord, meter_field

__all__ = ["PEFT_CLAIMS"]

# Energy sources that read a meter; "estimate" models CPU time and "none" read nothing.
_MEASURED_ENERGY = ("nvml", "rapl")


def _combine(*verdicts: str) -> str:
    """A claim of several halves: contradicted by any, not measurable if any is, reproduced only by all."""
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if NOT_MEASURABLE in verdicts:
        return NOT_MEASURABLE
    return REPRODUCED if set(verdicts) == {REPRODUCED} else NOT_REPRODUCED


def _energy_unmeasured(records: Iterable[CellRecord]) -> str:
    """Why energy cannot answer a paper's measured energy here (``""`` when every record read a meter)."""
    sources = sorted({str(meter_field(r, "energy", "source") or "none") for r in records})
    if all(source in _MEASURED_ENERGY for source in sources):
        return ""
    return (f"the energy here is {' / '.join(sources)} (an estimate is CPU time × a fixed power per logical CPU), "
            "not a meter reading like the paper's")


def _fine_tuned(records: Sequence[CellRecord]) -> list[CellRecord]:
    return [r for r in records if r.grid == "peft"]


def _cheap_methods(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """QLoRA and BitFit against full fine-tuning: energy cut (%) and accuracy cost (points), standard strategy."""
    tuned = [r for r in _fine_tuned(records) if r.strategy == "standard"]
    cheap = [r for r in tuned if r.method in ("qlora", "bitfit")]
    full = [r for r in tuned if r.method == "full"]

    def backbone(record: CellRecord) -> tuple:
        return record.model, record.dataset

    cuts = paired_changes(cheap, full, backbone, "energy", lambda top, bottom: 100 * (1 - top / bottom))
    costs = paired_changes(cheap, full, backbone, "heldout_accuracy", lambda top, bottom: bottom - top)
    energy, accuracy = effect_of(cuts), effect_of(costs)
    if accuracy is None:
        return ("n/a", NOT_MEASURABLE, "needs QLoRA or BitFit cells and full fine-tuning of the same backbone and "
                                       "dataset, standard strategy, ended ok with test accuracy", 0)
    accuracy_verdict = effect_verdict(accuracy, 1, 2, wrong_sign=0)
    unmeasured = _energy_unmeasured(cheap + full)
    if energy is None or unmeasured:
        energy_verdict, energy_why = NOT_MEASURABLE, unmeasured or "no energy measured on both sides"
    else:
        energy_verdict = effect_verdict(energy, 20, 30, wrong_sign=-1)
        energy_why = f"{energy_verdict} (20–30 %; more energy than full fine-tuning contradicts)"
    measured = (f"accuracy cost {accuracy.text('points')} over {len(costs)} cells"
                + (f"; energy cut {energy.text()}" if energy is not None else "; energy n/a")
                + _below_sanity(records, cheap + full))
    why = f"accuracy cost: {accuracy_verdict} (1–2 points); energy: {energy_why}"
    return measured, _combine(accuracy_verdict, energy_verdict), why, accuracy.n


def _below_sanity(records: Sequence[CellRecord], tuned: Sequence[CellRecord]) -> str:
    """``; not above the raw-pixel 1-NN baseline: ...`` for the fine-tuned cells that do not beat their dataset's
    sanity baseline (where the records carry one): their accuracy says nothing about the method."""
    behind = []
    for cell, runs in by_cell(tuned).items():
        baseline, mean = sanity_accuracy(records, runs.first.dataset), runs.mean("heldout_accuracy")
        if baseline is not None and mean is not None and mean <= baseline:
            behind.append(cell)
    return f"; not above the raw-pixel 1-NN baseline: {', '.join(behind)}" if behind else ""


def _adaptive_memory(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """Adaptive checkpointing against standard (PEFT cells only): live peak cut and energy overhead."""
    tuned = _fine_tuned(records)
    budgets = [r for r in tuned if memory_analysis.budget_kind(r) == "adaptive"
               and memory_analysis.plan_number(r, "checkpointed_layers")]
    standard = [r for r in tuned if r.strategy == "standard"]
    cuts = paired_changes(budgets, standard, cell_axes, "peak", lambda top, bottom: 100 * (1 - top / bottom))
    overheads = paired_changes(budgets, standard, cell_axes, "energy", percent_change)
    pool = budgets + [r for r in standard if cell_axes(r) in {cell_axes(b) for b in budgets}]
    memory = effect_of(cuts)
    if memory is None:
        return ("n/a", NOT_MEASURABLE, ("needs PEFT budget cells that checkpointed at least one block, and their "
                                       "standard cells, ended ok with the live-tensor peak"), 0)
    memory_verdict = effect_verdict(memory, 43, 79, wrong_sign=-1)
    energy = effect_of(overheads)
    unmeasured = _energy_unmeasured(pool)
    if energy is None or unmeasured:
        energy_verdict, energy_why = NOT_MEASURABLE, unmeasured or "no energy measured on both sides"
    else:
        energy_verdict = effect_verdict(energy, 9, 30, wrong_sign=0)
        energy_why = f"{energy_verdict} (9–30 %)"
    measured = (f"live peak cut {memory.text()} over {len(cuts)} backbone × method × dataset pairs"
                + (f"; energy overhead {energy.text()}" if energy is not None else ""))
    why = (f"peak: {memory_verdict} (43–79 %; more memory than standard contradicts); energy: {energy_why}; "
           "PEFT study's cells only, those that fit without checkpointing left out")
    return measured, _combine(memory_verdict, energy_verdict), why, memory.n


def _best_fine_tuned(records: Sequence[CellRecord], dataset: str) -> CellRuns | None:
    runs = by_cell(r for r in _fine_tuned(records) if r.dataset == dataset)
    means = {cell: m for cell, cell_runs in runs.items() if (m := cell_runs.mean("heldout_accuracy")) is not None}
    return runs[max(means, key=lambda cell: means[cell])] if means else None


def _stand_in(records: Sequence[CellRecord]) -> str:
    """Why baselines that did not load their named model's weights say nothing about it (``""`` if real)."""
    stand_ins = [r for r in records if not naming.real_weights(r)]
    if not stand_ins:
        return ""
    return ("ran as " + "; ".join(dict.fromkeys(naming.what_ran(r) for r in stand_ins))
            + ": a stand-in, not the named model's weights (give them with --gradeff-weights)")


def _dinov2(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """DINOv2 with a linear probe against the best fine-tuned cell on CIFAR-100: accuracy, and energy."""
    probes = [r for r in records if r.model == "dinov2" and r.dataset == "cifar100" and r.status == "ok"]
    best = _best_fine_tuned(records, "cifar100")
    if not probes or best is None:
        return "n/a", NOT_MEASURABLE, "needs an ok dinov2 cell and fine-tuned cells on cifar100", 0
    stand_in = _stand_in(probes)
    if stand_in:
        return "n/a", NOT_MEASURABLE, f"DINOv2 {stand_in}", 0
    probe = by_cell(probes)
    (probe_runs,) = probe.values()
    a_probe, a_best = probe_runs.mean("heldout_accuracy"), best.mean("heldout_accuracy")
    energy = (probe_runs.mean("energy") or math.nan) / (best.mean("energy") or math.nan)
    measured = f"DINOv2 probe {a_probe:.1f} % vs best fine-tuned {a_best:.1f} % ({best.cell})"
    if a_probe < a_best:
        return measured, CONTRADICTED, "the probe does not surpass fine-tuning", len(probe_runs.ok)
    unmeasured = _energy_unmeasured([*probe_runs.runs, *best.runs])
    if unmeasured or not math.isfinite(energy):
        return measured, NOT_MEASURABLE, f"surpasses in accuracy; energy: {unmeasured or 'not measured'}", \
            len(probe_runs.ok)
    verdict = REPRODUCED if energy < 1 else NOT_REPRODUCED
    return f"{measured}; energy {energy:.2f}× of it", verdict, "surpasses in accuracy; energy must be lower too", \
        len(probe_runs.ok)


def _prompted_vlms(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """Prompted autoregressive VLMs against the best fine-tuned cell: more than 10 points below is uncompetitive."""
    prompted = [r for r in records if r.model in ("smolvlm", "vlm_prompt") and r.status == "ok"]
    if not prompted:
        return "n/a", NOT_MEASURABLE, "needs ok smolvlm or vlm_prompt cells", 0
    real = [r for r in prompted if naming.real_weights(r)]
    if not real:
        return "n/a", NOT_MEASURABLE, f"the prompted VLMs {_stand_in(prompted)}", 0
    gaps = {}
    for cell, cell_runs in by_cell(real).items():
        best = _best_fine_tuned(records, cell_runs.first.dataset)
        if best is not None:
            gaps[cell] = best.mean("heldout_accuracy") - cell_runs.mean("heldout_accuracy")
    if not gaps:
        return "n/a", NOT_MEASURABLE, "no fine-tuned cell on the prompted VLMs' datasets", 0
    verdict = REPRODUCED if min(gaps.values()) > 10 else CONTRADICTED if max(gaps.values()) < 0 else NOT_REPRODUCED
    measured = "best fine-tuned minus prompted VLM: " + ", ".join(f"{c} {g:+.1f} points" for c, g in gaps.items())
    return measured, verdict, ("uncompetitive = every prompted VLM more than 10 points below the best fine-tuned "
                               "cell of its dataset"), min(len(r.ok) for r in by_cell(real).values())


def _pixel_baseline(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """Fine-tuned cells against their dataset's raw-pixel 1-NN on the same test split: a sanity check."""
    by_dataset: dict[str, dict[str, CellRuns]] = {}
    for cell, runs in by_cell(_fine_tuned(records)).items():
        by_dataset.setdefault(runs.first.dataset, {})[cell] = runs
    parts, failing, losing, seeds = [], 0, [], []
    for dataset, runs in by_dataset.items():
        baseline = sanity_accuracy(records, dataset)
        means = {cell: m for cell, r in runs.items() if r.ok and (m := r.mean("heldout_accuracy")) is not None}
        if baseline is None or not means:
            continue
        below = sum(1 for m in means.values() if m <= baseline)
        failing += below
        if below == len(means):
            losing.append(dataset)
        seeds.extend(len(runs[cell].ok) for cell in means)
        best = max(means, key=lambda cell: means[cell])
        parts.append(f"{dataset}: best fine-tuned {means[best]:.1f} % ({best}) vs 1-NN {baseline:.1f} %, "
                     f"{below} of {len(means)} cells not above it")
    if not parts:
        return ("n/a", NOT_MEASURABLE, "needs fine-tuned cells ended ok on a dataset whose raw-pixel 1-NN accuracy "
                                       "was recorded (the synthetic stand-ins record it)", 0)
    verdict = CONTRADICTED if losing else NOT_REPRODUCED if failing else REPRODUCED
    return ("; ".join(parts), verdict,
            "every fine-tuned cell's mean test accuracy must beat a 1-nearest-neighbour classifier on raw pixels "
            "that matches the same training split (no cell of a dataset above it contradicts; some cells at or "
            "below it: not reproduced): a cell that does not beat it learned nothing pixel matching did not",
            min(seeds))


PEFT_CLAIMS: tuple[Claim, ...] = (
    Claim(study="peft", key="cheap_methods", claim="QLoRA and BitFit cut energy 20–30 % at a 1–2 % accuracy cost",
          grids=("peft",), check=_cheap_methods),
    Claim(study="peft", key="adaptive_memory",
          claim="the adaptive algorithm reduces peak memory 43–79 % with 9–30 % energy overhead", grids=("peft",),
          check=_adaptive_memory),
    Claim(study="peft", key="dinov2",
          claim="DINOv2 surpasses fine-tuned models on CIFAR-100 (0.917 vs. 0.897) at a fraction of the energy",
          grids=("peft", "baselines"), check=_dinov2),
    Claim(study="peft", key="prompted_vlms", claim="small autoregressive VLMs remain uncompetitive",
          grids=("peft", "baselines"), check=_prompted_vlms),
    Claim(study="peft", key="pixel_baseline",
          claim="(sanity check, not a paper claim) fine-tuning beats a 1-nearest-neighbour classifier on raw pixels",
          grids=("peft",), check=_pixel_baseline),
)
