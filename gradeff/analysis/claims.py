"""The papers' claims, checked against the records: each with its measured figures and a verdict.

A claim is a sentence of a paper, the grids whose records it reads (:attr:`Claim.grids`: never another
study's cells), and a function from those records to a :class:`ClaimResult`: the figures measured here,
in words, a verdict (``reproduced``, ``not reproduced``, ``contradicted``, ``not measurable here``)
and why. The rules:

- **Every seed, paired.** A claim's effect is computed per seed, from cells that shared their start
  and data (``checkpoint`` against ``standard`` of the same model, optimizer and seed), then summarised
  over seeds: its mean and 95 % t-interval (:class:`Effect`). A paper's range is reproduced where that
  interval meets it: the range is widened by the measured interval only, never by a fixed tolerance (a
  fixed ±10 points let ModernBERT's −2.6 % "reproduce" the paper's −11…−20 %). With one seed the interval is
  the value itself, so the value must lie in the paper's range.
- **An effect must exceed the seed spread.** With several seeds, an effect whose interval holds 0 is
  no effect: a claimed change is then not reproduced, and nothing is contradicted by noise. With one
  seed there is no spread: the verdict is a single draw, and says so.
- **A shared first place is never a win.** "X is the best" holds only where X wins its ranking outright
  (:mod:`gradeff.analysis.pairing`): cells shown equivalent to it, or still open against it, share the place;
  cells with the same numbers on every seed are one entry, "identical".
- **Not measurable here** where the quantity measured is not the paper's: a stand-in instead of the
  named foundation model, an energy estimate against a measured energy, a loss whose scale depends on a
  vocabulary the suite does not have.
- Quality claims read each study's quality metric (:mod:`gradeff.analysis.metrics`); time claims read
  the paper's own quantity, the training time per epoch.

A verdict from a CPU profile also says so (``scale``): tiny models on synthetic data can disagree with a
GPU study for reasons of scale alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gradeff.analysis import memory as memory_analysis
from gradeff.analysis import naming
from gradeff.analysis.answer import sanity_accuracy
from gradeff.analysis.metrics import METRICS, Metric, is_isolated, memory_metric, quality_metric
from gradeff.analysis.pairing import EQUIVALENT, IDENTICAL, OPEN, WINNER, Ranking, rank
from gradeff.analysis.runs import CellRuns, by_cell, canonical, seed_values
from gradeff.analysis.stats import Interval, interval
from gradeff.records.results import CellRecord, meter_field, record_field

__all__ = ["CLAIMS", "VERDICTS", "Claim", "ClaimResult", "Effect", "effect_of", "effect_verdict", "evaluate_claims",
           "range_verdict"]

VERDICTS = ("reproduced", "not reproduced", "contradicted", "not measurable here")
REPRODUCED, NOT_REPRODUCED, CONTRADICTED, NOT_MEASURABLE = VERDICTS
_GPU_PROFILES = ("paper",)
# Energy sources that read a meter; "estimate" models CPU time and "none" read nothing.
_MEASURED_ENERGY = ("nvml", "rapl")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimResult:
    """One claim as measured.

    Attributes:
        study: ``peft`` or ``main``.
        key: the claim's identifier.
        claim: the paper's statement.
        grids: the grids whose records the claim read.
        measured: the figures measured here, in words (``n/a`` parts say why).
        verdict: one of :data:`VERDICTS`.
        why: the rule that gave the verdict, or why it could not be measured.
        seeds: how many seeds the figures rest on (``3 seeds``), or ``single draw``; ``""`` when not measured.
        scale: a caveat when the figures come from a CPU profile (``""`` at the paper's scale).
    """

    study: str
    key: str
    claim: str
    grids: tuple[str, ...]
    measured: str
    verdict: str
    why: str
    seeds: str = ""
    scale: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A claim of a paper, the grids it reads, and how to check it."""

    study: str
    key: str
    claim: str
    grids: tuple[str, ...]
    check: Callable[[Sequence[CellRecord]], tuple[str, str, str, int]]  # → (measured, verdict, why, seeds)


# --- Effects over seeds ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Effect:
    """A claim's effect over seeds: the per-seed statistic's mean and 95 % t-interval.

    ``within_spread`` holds when several seeds give an interval that contains 0: no effect is measured.
    """

    spread: Interval

    @property
    def value(self) -> float:
        return self.spread.mean

    @property
    def n(self) -> int:
        return self.spread.n

    @property
    def within_spread(self) -> bool:
        return self.n > 1 and self.spread.low <= 0 <= self.spread.high

    def text(self, unit: str = "%") -> str:
        """``+25.0 % (95 % interval +24.1 to +25.9, n=3 seeds)``; a unitless effect (a loss) to 3 significant digits."""
        spec = "+.3g" if not unit else "+.1f"
        value = f"{self.value:{spec}} {unit}".rstrip()
        if self.n == 1:
            return f"{value} ({SINGLE_DRAW})"
        return (f"{value} (95 % interval {self.spread.low:{spec}} to {self.spread.high:{spec}}, "
                f"n={self.n} seeds)")


def effect_of(per_pair: Mapping[Hashable, Mapping[int, float]]) -> Effect | None:
    """The median over pairs of each seed's values, summarised over seeds; ``None`` without a value.

    Args:
        per_pair: pair (e.g. model and optimizer) → seed → that pair's effect on that seed.
    """
    seeds = sorted({seed for values in per_pair.values() for seed in values})
    per_seed = [statistics.median(v[seed] for v in per_pair.values() if seed in v) for seed in seeds]
    return Effect(interval(per_seed)) if per_seed else None


def range_verdict(measured_low: float, measured_high: float, low: float, high: float, *, wrong_way: bool) -> str:
    """``reproduced`` where the measured interval ``[measured_low, measured_high]`` meets the paper's ``[low, high]``;
    ``contradicted`` if the effect goes the wrong way (``wrong_way``); ``not reproduced`` otherwise."""
    if wrong_way:
        return CONTRADICTED
    return REPRODUCED if measured_low <= high and low <= measured_high else NOT_REPRODUCED


def effect_verdict(effect: Effect, low: float, high: float, *, wrong_sign: int) -> str:
    """The verdict on an effect the paper puts in ``[low, high]`` (a range that excludes 0).

    Args:
        effect: the measured effect over seeds.
        low, high: the paper's range; it is widened by the effect's own 95 % interval only.
        wrong_sign: ``+1`` when a positive effect goes against the claim, ``-1`` when a negative one does, ``0``
            when neither does.

    Returns:
        ``not reproduced`` for an effect within the seed spread (nothing measured either way),
        ``contradicted`` for one on the wrong side, else :func:`range_verdict` of its interval.
    """
    if effect.within_spread:
        return NOT_REPRODUCED
    return range_verdict(effect.spread.low, effect.spread.high, low, high,
                         wrong_way=wrong_sign * effect.value > 0)


def _combine(*verdicts: str) -> str:
    """A claim of several halves: contradicted by any, not measurable if any is, reproduced only by all."""
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if NOT_MEASURABLE in verdicts:
        return NOT_MEASURABLE
    return REPRODUCED if set(verdicts) == {REPRODUCED} else NOT_REPRODUCED


def _tally(hits: int, misses: int, opposed: int) -> str:
    """Per-model claims: reproduced on every model, contradicted where it is opposed on every one."""
    total = hits + misses + opposed
    return REPRODUCED if hits == total else CONTRADICTED if opposed == total else NOT_REPRODUCED


def _energy_unmeasured(records: Iterable[CellRecord]) -> str:
    """Why energy cannot answer a paper's measured energy here (``""`` when every record read a meter)."""
    sources = sorted({str(meter_field(r, "energy", "source") or "none") for r in records})
    if all(source in _MEASURED_ENERGY for source in sources):
        return ""
    return (f"the energy here is {' / '.join(sources)} (an estimate is CPU time × a fixed power per logical CPU), "
            "not a meter reading like the paper's")


def _changes(tops: Sequence[CellRecord], bottoms: Sequence[CellRecord], match: Callable[[CellRecord], Hashable],
             metric: str | Metric, change: Callable[[float, float], float]) -> dict[str, dict[int, float]]:
    """Per cell of ``tops``, per seed: ``change(top, bottom)`` of ``metric`` against the cell of ``bottoms`` it
    matches (``match``: what the two share), on the seeds both ended ok with the metric measured."""
    references: dict[Hashable, list[CellRecord]] = {}
    for record in bottoms:
        references.setdefault(match(record), []).append(record)
    cells: dict[str, list[CellRecord]] = {}
    for record in tops:
        cells.setdefault(record.cell, []).append(record)
    result = {}
    for cell, group in cells.items():
        top, bottom = seed_values(group, metric), seed_values(references.get(match(group[0]), ()), metric)
        values = {s: change(top[s], bottom[s]) for s in sorted(set(top) & set(bottom)) if bottom[s] != 0}
        if values:
            result[cell] = values
    return result


def _strategies(records: Sequence[CellRecord], numerator: str, metric: str | Metric,
                change: Callable[[float, float], float]) -> dict[str, dict[int, float]]:
    """``numerator`` cells against the ``standard`` cell of the same model, optimizer, method and dataset."""
    return _changes([r for r in records if r.strategy == numerator], [r for r in records if r.strategy == "standard"],
                    _axes, metric, change)


def _percent_change(top: float, bottom: float) -> float:
    return 100 * (top / bottom - 1)


def _axes(record: CellRecord) -> tuple:
    return record.model, record.optimizer, record.method, record.dataset


# --- PEFT study -----------------------------------------------------------------------------------------

def _fine_tuned(records: Sequence[CellRecord]) -> list[CellRecord]:
    return [r for r in records if r.grid == "peft"]


def _cheap_methods(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """QLoRA and BitFit against full fine-tuning: energy cut (%) and accuracy cost (points), standard strategy."""
    tuned = [r for r in _fine_tuned(records) if r.strategy == "standard"]
    cheap = [r for r in tuned if r.method in ("qlora", "bitfit")]
    full = [r for r in tuned if r.method == "full"]

    def backbone(record: CellRecord) -> tuple:
        return record.model, record.dataset

    cuts = _changes(cheap, full, backbone, "energy", lambda top, bottom: 100 * (1 - top / bottom))
    costs = _changes(cheap, full, backbone, "heldout_accuracy", lambda top, bottom: bottom - top)
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
    cuts = _changes(budgets, standard, _axes, "peak", lambda top, bottom: 100 * (1 - top / bottom))
    overheads = _changes(budgets, standard, _axes, "energy", _percent_change)
    pool = budgets + [r for r in standard if _axes(r) in {_axes(b) for b in budgets}]
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


CLAIMS: tuple[Claim, ...] = (
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


# --- Main study ------------------------------------------------------------------------------------------

# A claim's effect measured on one seed: a draw, not an interval.
SINGLE_DRAW = "single draw"
_ADAPTIVE = ("adam", "adamw", "adagrad", "adadelta")


def _by_model(records: Sequence[CellRecord]) -> dict[str, dict[str, CellRuns]]:
    models: dict[str, list[CellRecord]] = {}
    for record in records:
        models.setdefault(record.model, []).append(record)
    return {model: by_cell(group) for model, group in models.items()}


def _ranking(runs: Mapping[str, CellRuns], metric: Metric) -> Ranking[str] | None:
    return rank({cell: r.values(metric) for cell, r in runs.items()}, goal=metric.goal, resolution=metric.resolution,
                fingerprints={cell: r.fingerprint() for cell, r in runs.items()})


def _winner_axis(runs: Mapping[str, CellRuns], ranking: Ranking[str] | None, axis: str) -> str | None:
    """The axis value (optimizer) of an outright first place: its members share it and nothing ties with it.

    ``None`` where the first place is shared (equivalent cells, or an open question: neither is a win) or there is
    no ranking.
    """
    if ranking is None or ranking.outcome not in (WINNER, IDENTICAL):
        return None
    values = {getattr(runs[cell].first, axis) for cell in ranking.identical}
    return values.pop() if len(values) == 1 else None


def _place_text(runs: Mapping[str, CellRuns], ranking: Ranking[str] | None) -> str:
    if ranking is None:
        return "n/a"
    groups = [ranking.identical, *ranking.equivalent, *ranking.open]
    names = " ; ".join(" ≡ ".join(runs[c].cell for c in group) for group in groups)
    return f"{ranking.outcome}: {names}" if ranking.outcome in (EQUIVALENT, OPEN) else names


def _seeds_of(runs: Iterable[Mapping[str, CellRuns]]) -> int:
    counts = [len(r.ok) for group in runs for r in group.values() if r.ok]
    return min(counts) if counts else 0


def _accum_lowest_loss(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """Per model, the best accumulation cell against the best cell on the quality metric: tied or within 5 %."""
    parts, hits, misses = [], 0, 0
    models = _by_model(records)
    for model, runs in models.items():
        metric = quality_metric(r for cell_runs in runs.values() for r in cell_runs.runs)
        ranking = _ranking(runs, metric)
        accum = {c: r for c, r in runs.items() if r.first.strategy == "accum" and r.mean(metric) is not None}
        if ranking is None or not accum:
            continue
        best_accum = _ranking(accum, metric).best
        best, value = runs[ranking.best].mean(metric), accum[best_accum].mean(metric)
        gap = 100 * (value / best - 1) * (1 if metric.goal == "min" else -1) if best else math.inf
        near = best_accum in ranking.members or gap <= 5
        hits, misses = hits + near, misses + (not near)
        parts.append(f"{model}: best accum {best_accum} {gap:+.1f} % from the best ({metric.label.lower()})"
                     + (", tied with it" if best_accum in ranking.members else ""))
    if not parts:
        return "n/a", NOT_MEASURABLE, "needs ok accum and other cells of a model", 0
    verdict = REPRODUCED if not misses else CONTRADICTED if not hits else NOT_REPRODUCED
    return "; ".join(parts), verdict, ("near-lowest = tied with the model's best cell over seeds, or within 5 % of "
                                       "its quality metric (test loss; test top-1 for classifiers)"), \
        _seeds_of(models.values())


def _time_change(records: Sequence[CellRecord], numerator: str, **only) -> dict:
    kept = [r for r in records if all(getattr(r, axis) in values for axis, values in only.items())]
    return _strategies(kept, numerator, "epoch_seconds", _percent_change)


def _accum_time(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """accum/standard time per epoch: ViT with adaptive optimizers −23 %, ModernBERT −11…−20 %."""
    parts, verdicts, seeds = [], [], []
    for name, changes, low, high in (
            ("ViT (adaptive)", _time_change(records, "accum", model=("vit",), optimizer=_ADAPTIVE), -23, -23),
            ("ModernBERT", _time_change(records, "accum", model=("modernbert",)), -20, -11)):
        effect = effect_of(changes)
        if effect is not None:
            parts.append(f"{name}: time {effect.text()}")
            verdicts.append(effect_verdict(effect, low, high, wrong_sign=1))
            seeds.append(effect.n)
    if not parts:
        return "n/a", NOT_MEASURABLE, "needs ok accum and standard cells of vit or modernbert", 0
    verdict = CONTRADICTED if CONTRADICTED in verdicts else REPRODUCED if set(verdicts) == {REPRODUCED} \
        else NOT_REPRODUCED
    return "; ".join(parts), verdict, ("time per epoch, the paper's quantity, seed by seed; each against the "
                                       "paper's range; accumulation slower beyond the seed spread contradicts"), \
        min(seeds)


def _checkpoint_time(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """checkpoint/standard time per epoch: +20…60 % overall (LLM +45…58 %)."""
    effect = effect_of(_time_change(records, "checkpoint"))
    if effect is None:
        return "n/a", NOT_MEASURABLE, "needs ok checkpoint and standard cells", 0
    llm = effect_of(_time_change(records, "checkpoint", model=("llm",)))
    measured = f"time {effect.text()}" + (f"; llm {llm.text()}" if llm is not None else "")
    return measured, effect_verdict(effect, 20, 60, wrong_sign=-1), \
        "time per epoch, the paper's quantity, seed by seed: median over pairs against 20–60 %", effect.n


def _checkpoint_loss(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    """checkpoint vs standard on the quality metric: the paper saw large changes; checkpointing cannot make any."""
    pairs, identical, changes = 0, 0, {}
    for model, runs in _by_model(records).items():
        metric = quality_metric(r for cell_runs in runs.values() for r in cell_runs.runs)
        sides: dict[str, dict[str, CellRuns]] = {}
        for cell_runs in runs.values():
            if cell_runs.first.strategy in ("checkpoint", "standard"):
                sides.setdefault(cell_runs.first.optimizer, {})[cell_runs.first.strategy] = cell_runs
        for optimizer, pair in sides.items():
            if len(pair) < 2:
                continue
            top, bottom = pair["checkpoint"].values(metric), pair["standard"].values(metric)
            seeds = sorted(set(top) & set(bottom))
            if not seeds:
                continue
            pairs += 1
            same = all(top[s] == bottom[s] for s in seeds) and \
                pair["checkpoint"].fingerprint() == pair["standard"].fingerprint()
            identical += same
            changes[(model, optimizer)] = {s: _percent_change(top[s], bottom[s]) for s in seeds if bottom[s]}
    if not pairs:
        return "n/a", NOT_MEASURABLE, "needs ok checkpoint and standard cells", 0
    effect = effect_of({k: {s: abs(v) for s, v in values.items()} for k, values in changes.items()})
    measured = f"identical in {identical} of {pairs} optimizer pairs (the same numbers on every seed)"
    if identical == pairs:
        return measured, CONTRADICTED, ("checkpointing recomputes the same activations (bit-identical gradients, "
                                        "tests/strategies/test_laws.py): every pair is identical, it cannot change "
                                        "the loss"), effect.n if effect else 0
    measured += f"; largest change {effect.text()}" if effect is not None else ""
    verdict = REPRODUCED if effect is not None and not effect.within_spread and effect.value > 0.01 else NOT_REPRODUCED
    return measured, verdict, "a change of the quality metric beyond the seed spread", effect.n if effect else 0


def _optimizer_places(records: Sequence[CellRecord], metric_of: Callable[[Sequence[CellRecord]], Metric | None]
                      ) -> dict[str, tuple[dict[str, CellRuns], Ranking[str] | None]]:
    result = {}
    for model, runs in _by_model(records).items():
        metric = metric_of([r for cell_runs in runs.values() for r in cell_runs.runs])
        result[model] = (runs, _ranking(runs, metric) if metric is not None else None)
    return result


def _members_axis(runs: Mapping[str, CellRuns], ranking: Ranking[str] | None) -> set[str]:
    return set() if ranking is None else {runs[c].first.optimizer for c in ranking.members}


def _sole_optimizer_claim(records: Sequence[CellRecord], metric_of, claimed: Mapping[str, str] | str,
                          rule: str) -> tuple[str, str, str, int]:
    places = _optimizer_places(records, metric_of)
    parts, hits, misses, opposed = [], 0, 0, 0
    for model, (runs, ranking) in places.items():
        wanted = claimed if isinstance(claimed, str) else claimed.get(model)
        if wanted is None or ranking is None:
            continue
        winner = _winner_axis(runs, ranking, "optimizer")
        parts.append(f"{model}: {_place_text(runs, ranking)}" + ("" if isinstance(claimed, str) else
                                                                 f" (paper: {wanted})"))
        if winner == wanted:
            hits += 1
        elif wanted in _members_axis(runs, ranking):
            misses += 1  # sharing the first place: never a win
        else:
            opposed += 1
    if not parts:
        return "n/a", NOT_MEASURABLE, "needs ok cells of the models", 0
    return "; ".join(parts), _tally(hits, misses, opposed), rule, _seeds_of(r for r, _ in places.values())


def _sgd_fastest(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    return _sole_optimizer_claim(records, lambda _: METRICS["epoch_seconds"], "sgd",
                                 "time per epoch, the paper's quantity: an SGD cell must win outright on every "
                                 "model (a shared first place is not a win; paired over seeds, Holm, 5 %)")


def _best_loss_optimizers(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    claimed = {"modernbert": "adadelta", "llm": "adadelta", "vit": "adagrad", "vlm": "adam"}
    return _sole_optimizer_claim(records, quality_metric, claimed,
                                 "the paper's optimizer wins the quality metric (test loss; test top-1 on ViT) "
                                 "outright; sharing the first place is not a win, absent from the first place "
                                 "contradicts")


def _cg_never_best(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    llm_cg = [r for r in records if r.model == "llm" and r.optimizer == "cgd"]
    if not llm_cg:
        return "n/a", NOT_MEASURABLE, "needs cgd cells", 0
    wins = []
    for name, metric_of in (("quality", quality_metric), ("time per epoch", lambda _: METRICS["epoch_seconds"]),
                            ("memory", memory_metric)):
        for model, (runs, ranking) in _optimizer_places(records, metric_of).items():
            if _winner_axis(runs, ranking, "optimizer") == "cgd":
                wins.append(f"{model} {name}")
    diverged = sorted({r.cell for r in llm_cg if r.status == "diverged"})
    measured = f"CG wins outright: {', '.join(wins) or 'nowhere'}; llm cgd diverged: {', '.join(diverged) or 'none'}"
    verdict = REPRODUCED if not wins and diverged else CONTRADICTED if wins and not diverged else NOT_REPRODUCED
    return measured, verdict, ("both halves: never an outright winner (quality, time per epoch, live-tensor peak; "
                               "a shared first place is not a win), and diverging on the LLM"), \
        _seeds_of(runs for runs, _ in _optimizer_places(records, quality_metric).values())


def _adam_most_ram(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    llm = [r for r in records if r.model == "llm" and r.status == "ok"]
    if not llm or not all(is_isolated(r) for r in llm):
        return "n/a", NOT_MEASURABLE, ("host RAM is comparable only per process: run with --gradeff-isolate (in one "
                                       "pytest process a model's first cell pays for every import)"), 0
    runs = by_cell(llm)
    ram = METRICS["ram_peak"]
    ranking = rank({cell: r.values(ram) for cell, r in runs.items()}, goal="max", resolution=ram.resolution,
                   fingerprints={cell: r.fingerprint() for cell, r in runs.items()})
    winner = _winner_axis(runs, ranking, "optimizer")
    measured = f"most RSS: {_place_text(runs, ranking)}"
    verdict = REPRODUCED if winner == "adam" else NOT_REPRODUCED
    return measured, verdict, (f"the llm cell with the highest process RSS peak must be an Adam cell outright; gaps "
                               f"under {ram.resolution / 2**20:.0f} MiB are no difference"), _seeds_of([runs])


def _llm_gpu_util(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    runs = by_cell(r for r in records if r.model == "llm")
    per_pair = {cell: values for cell, r in runs.items() if (values := r.values("gpu_util"))}
    effect = effect_of(per_pair)
    if effect is None:
        return "n/a", NOT_MEASURABLE, "GPU utilisation needs cells run on a GPU", 0
    return f"llm GPU utilisation {effect.text()}", effect_verdict(effect, 8, 15, wrong_sign=0), \
        "median over cells against 8–15 %", effect.n


# The accumulation-as-a-regulariser claim compares cells that fit their training data equally well: final training
# losses within this share of each other. A smaller generalisation gap from a higher training loss is under-training,
# not regularisation (accumulation takes k times fewer steps in the same epochs).
EQUAL_TRAINING_LOSS = 0.02


def _accum_regularises(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    ok = [r for r in records if r.status == "ok"]
    training = _strategies(ok, "accum", "final_loss", lambda top, bottom: top / bottom - 1)
    test = _strategies(ok, "accum", "test_loss", lambda top, bottom: top - bottom)
    pairs = sum(1 for cell, by_seed in training.items() for seed in by_seed if seed in test.get(cell, {}))
    matched = {cell: {seed: test[cell][seed] for seed, change in by_seed.items()
                      if seed in test.get(cell, {}) and abs(change) <= EQUAL_TRAINING_LOSS}
               for cell, by_seed in training.items()}
    matched = {cell: by_seed for cell, by_seed in matched.items() if by_seed}
    if not pairs:
        return "n/a", NOT_MEASURABLE, "needs test and training losses of accum and standard cells", 0
    within = sum(len(by_seed) for by_seed in matched.values())
    equal = (f"at equal training loss (within {EQUAL_TRAINING_LOSS * 100:.0f} %: {within} of {pairs} cell pairs over "
             "seeds)")
    if not matched:
        return (f"training loss differs in every pair: {equal}", NOT_MEASURABLE,
                "accumulation and standard end at different training losses, and a smaller gap from a higher "
                "training loss is under-training, not regularisation", 0)
    effect = effect_of(matched)
    verdict = NOT_REPRODUCED if effect.within_spread or effect.value == 0 else \
        REPRODUCED if effect.value < 0 else CONTRADICTED
    return (f"test loss, accum minus standard, {equal}: {effect.text('')}", verdict,
            "a lower test loss under accumulation at the same training loss (below 0 beyond the seed spread)",
            effect.n)


def _accum_memory(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    changes = _strategies(records, "accum", "activation", _percent_change)
    effect = effect_of(changes)
    if effect is None:
        return "n/a", NOT_MEASURABLE, "needs the memory breakdown of accum and standard cells", 0
    largest = max(v for values in changes.values() for v in values.values())
    return (f"activation memory accum vs standard: {effect.text()}, largest {largest:+.1f} %",
            REPRODUCED if largest <= 0 else NOT_REPRODUCED,
            "a k× larger effective batch with at most the standard micro-batch's activations", effect.n)


def _llm_loss_scale(records: Sequence[CellRecord]) -> tuple[str, str, str, int]:
    llm = [r for r in records if r.model == "llm" and r.epochs]
    if not llm:
        return "n/a", NOT_MEASURABLE, "needs llm cells", 0
    vocab = max(int(record_field(r, "hparams", "num_states") or 0) + 4 for r in llm)
    highest = max((e.loss for r in llm for e in r.epochs if math.isfinite(e.loss)), default=math.nan)
    measured = (f"highest llm loss {highest:.3f} (mean cross-entropy per target token; uniform over the "
                f"{vocab}-token vocabulary: ln V = {math.log(vocab):.3f})")
    return measured, NOT_MEASURABLE, (f"a per-token loss scales with the vocabulary: {vocab} tokens here against "
                                      "Llama-3.2's 128,256 (ln V = 11.8), so the paper's 60–1000 cannot be held "
                                      "against these losses; its values exceed ln V, which a per-token mean of a "
                                      "run that has not diverged does not"), 0


CLAIMS = CLAIMS + tuple(Claim(study="main", grids=("main",), key=key, claim=claim, check=check)
                        for key, claim, check in (
    ("accum_lowest_loss", "gradient accumulation gives the lowest or near-lowest loss on every model",
     _accum_lowest_loss),
    ("accum_time", "accumulation reduces time (ViT −23 % for adaptive optimizers, ModernBERT −11…−20 %)", _accum_time),
    ("checkpoint_time", "checkpointing adds 20–60 % time (LLM +45…58 %)", _checkpoint_time),
    ("checkpoint_loss", "checkpointing changes the loss (ViT lower, ModernBERT 7–16× worse, LLM Adam −38 %, "
     "CG −76 %)", _checkpoint_loss),
    ("sgd_fastest", "SGD is the fastest configuration on every model", _sgd_fastest),
    ("best_loss_optimizers", "Adadelta has the best loss on ModernBERT and the LLM, Adagrad on ViT, Adam on the VLM",
     _best_loss_optimizers),
    ("cg_never_best", "CG is never best for any (model, metric) and diverges on the LLM", _cg_never_best),
    ("adam_most_ram", "Adam uses the most host RAM on the LLM", _adam_most_ram),
    ("llm_gpu_util", "LLM GPU utilisation is 8–15 %", _llm_gpu_util),
    ("accum_regularises", "accumulation is an implicit regulariser (less overfitting)", _accum_regularises),
    ("accum_memory", "accumulation gives a larger batch without more memory", _accum_memory),
    ("llm_loss_scale", "the LLM's losses of 60–1000 (main paper, Tables 4–7)", _llm_loss_scale),
))


def _seeds_text(seeds: int) -> str:
    return "" if seeds < 1 else SINGLE_DRAW if seeds == 1 else f"{seeds} seeds"


def evaluate_claims(records: Iterable[CellRecord], *, study: str | None = None,
                    keys: Collection[str] | None = None) -> list[ClaimResult]:
    """Every claim (of one study, or with one of the given keys) checked against the records of its own grids.

    Args:
        records: records of any studies, any number of seeds, in any order.
        study: only this study's claims.
        keys: only the claims with these keys.

    Returns:
        One result per claim, in the order of :data:`CLAIMS`.
    """
    records, _ = canonical(records)
    results = []
    for claim in CLAIMS:
        if (study is not None and claim.study != study) or (keys is not None and claim.key not in keys):
            continue
        own = [r for r in records if r.grid in claim.grids]
        measured, verdict, why, seeds = claim.check(own)
        profiles = {r.profile for r in own}
        scale = "" if verdict == NOT_MEASURABLE or (profiles and profiles <= set(_GPU_PROFILES)) else \
            f"measured at the {', '.join(sorted(profiles)) or 'n/a'} profile: tiny models on synthetic data, not " \
            "the paper's scale"
        results.append(ClaimResult(study=claim.study, key=claim.key, claim=claim.claim, grids=claim.grids,
                                   measured=measured, verdict=verdict, why=why, seeds=_seeds_text(seeds),
                                   scale=scale))
    return results

