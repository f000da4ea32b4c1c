"""The papers' claims, checked against the records: each with its measured figures and a verdict.

A claim is a sentence of a paper and a function from records to a :class:`ClaimResult`: the figures
measured here, in words, a verdict (``reproduced``, ``not reproduced``, ``contradicted``, ``not
measurable here``) and why. The rules are stated with each claim; they compare the median of the
measured cases with the paper's range, widened by a tolerance, because a claim about "20–30 %" is
about a typical case, not every one. A verdict from a CPU profile says so (``scale``): tiny models
on synthetic data can disagree with a GPU study for reasons of scale alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gradeff import analysis
from gradeff.analysis import memory as memory_analysis
from gradeff.analysis import peft as peft_analysis
from gradeff.results import CellRecord

__all__ = ["CLAIMS", "VERDICTS", "Claim", "ClaimResult", "evaluate_claims", "range_verdict"]

VERDICTS = ("reproduced", "not reproduced", "contradicted", "not measurable here")
REPRODUCED, NOT_REPRODUCED, CONTRADICTED, NOT_MEASURABLE = VERDICTS
_GPU_PROFILES = ("paper",)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimResult:
    """One claim as measured.

    Attributes:
        study: ``peft`` or ``main``.
        key: the claim's identifier.
        claim: the paper's statement.
        measured: the figures measured here, in words (``n/a`` parts say why).
        verdict: one of :data:`VERDICTS`.
        why: the rule that gave the verdict, or why it could not be measured.
        scale: a caveat when the figures come from a CPU profile (``""`` at the paper's scale).
    """

    study: str
    key: str
    claim: str
    measured: str
    verdict: str
    why: str
    scale: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A claim of a paper and how to check it."""

    study: str
    key: str
    claim: str
    check: Callable[[Sequence[CellRecord]], tuple[str, str, str]]  # → (measured, verdict, why)


def range_verdict(value: float, low: float, high: float, tolerance: float, *, wrong_way: bool) -> str:
    """``reproduced`` if ``value`` lies in ``[low − tolerance, high + tolerance]``; ``contradicted`` if the
    effect goes the wrong way (``wrong_way``); ``not reproduced`` otherwise."""
    if wrong_way:
        return CONTRADICTED
    return REPRODUCED if low - tolerance <= value <= high + tolerance else NOT_REPRODUCED


def _pct(value: float) -> str:
    return f"{value:+.0f} %"


def _span(values: Sequence[float], unit: str = "%") -> str:
    return f"median {statistics.median(values):+.1f} {unit} (range {min(values):+.1f} to {max(values):+.1f}, n={len(values)})"


def _energy_note(records: Iterable[CellRecord]) -> str:
    sources = sorted({analysis.meter_section(r, "energy").get("source") or "none" for r in records})
    return f"; energy source: {', '.join(sources)}" if sources else ""


# --- PEFT study ---------------------------------------------------------------------------------

def _cheap_methods(records: Sequence[CellRecord]) -> tuple[str, str, str]:
    """QLoRA and BitFit against full fine-tuning: energy cut (%) and accuracy cost (points), standard strategy."""
    cases = [v for key, group in peft_analysis.group_by_backbone(records).items()
             for v in peft_analysis.versus_full(group, None)
             if v.record.method in ("qlora", "bitfit") and v.record.strategy == "standard"
             and v.energy is not None and v.accuracy_points is not None]
    if not cases:
        return ("n/a", NOT_MEASURABLE, "needs QLoRA or BitFit cells and full fine-tuning of the same backbone and "
                                       "dataset, standard strategy, ended ok with energy and held-out accuracy")
    cuts = [100 * (1 - v.energy) for v in cases]
    costs = [-v.accuracy_points for v in cases]
    energy = range_verdict(statistics.median(cuts), 20, 30, 10, wrong_way=statistics.median(cuts) < 0)
    accuracy = range_verdict(statistics.median(costs), 1, 2, 2, wrong_way=False)
    verdict = CONTRADICTED if CONTRADICTED in (energy, accuracy) else \
        REPRODUCED if energy == accuracy == REPRODUCED else NOT_REPRODUCED
    measured = f"energy cut {_span(cuts)}; accuracy cost {_span(costs, 'points')}" + _energy_note(
        v.record for v in cases)
    why = (f"energy: {energy} (20–30 % ± 10 points; more energy contradicts); accuracy cost: {accuracy} "
           f"(1–2 points ± 2)")
    return measured, verdict, why


def _adaptive_memory(records: Sequence[CellRecord]) -> tuple[str, str, str]:
    """Adaptive checkpointing against standard: peak memory cut and energy overhead, where it checkpointed."""
    changes = [c for group in memory_analysis.peft_budget_changes(records).values() for c in group
               if c.memory is not None and c.energy is not None
               and memory_analysis.plan_number(c.record, "checkpointed_layers")]
    if not changes:
        return ("n/a", NOT_MEASURABLE, "needs PEFT budget cells that checkpointed at least one block, and their "
                                       "standard cells, ended ok with memory and energy")
    cuts = [100 * (1 - c.memory) for c in changes]
    overheads = [100 * (c.energy - 1) for c in changes]
    memory = range_verdict(statistics.median(cuts), 43, 79, 10, wrong_way=statistics.median(cuts) <= 0)
    energy = range_verdict(statistics.median(overheads), 9, 30, 10, wrong_way=False)
    verdict = CONTRADICTED if memory == CONTRADICTED else \
        REPRODUCED if memory == energy == REPRODUCED else NOT_REPRODUCED
    measured = f"peak cut {_span(cuts)}; energy overhead {_span(overheads)}" + _energy_note(c.record for c in changes)
    return measured, verdict, (f"peak: {memory} (43–79 % ± 10; no cut contradicts); energy: {energy} (9–30 % ± 10); "
                               "cells that fit without checkpointing are left out")


def _best_fine_tuned(records: Sequence[CellRecord], dataset: str) -> CellRecord | None:
    tuned = [r for r in records if r.grid == "peft" and r.dataset == dataset]
    return analysis.best_cell(tuned, "heldout_accuracy")


def _dinov2(records: Sequence[CellRecord]) -> tuple[str, str, str]:
    """DINOv2 with a linear probe against the best fine-tuned cell on CIFAR-100: accuracy, and energy."""
    probe = next((r for r in records if r.model == "dinov2" and r.dataset == "cifar100" and analysis.comparable(r)),
                 None)
    best = _best_fine_tuned(records, "cifar100")
    if probe is None or best is None:
        return ("n/a", NOT_MEASURABLE, "needs an ok dinov2 cell and fine-tuned cells on cifar100")
    if probe.weights.get("source") == "random":
        return ("n/a", NOT_MEASURABLE, "DINOv2 ran from random weights")
    a_probe, a_best = (analysis.metric_value(r, "heldout_accuracy") for r in (probe, best))
    energy = peft_analysis.ratio(probe, best, "energy")
    measured = (f"DINOv2 probe {a_probe:.1f} % vs best fine-tuned {a_best:.1f} % ({best.cell}); energy "
                f"{'n/a' if energy is None else f'{energy:.2f}×'} of it" + _energy_note([probe, best]))
    source = "the suite's own pretraining on a synthetic source task, not DINOv2's self-supervised weights" \
        if probe.weights.get("source") == "pretrained" else "weights from a local folder"
    if a_probe < a_best:
        return measured, CONTRADICTED, f"the probe does not surpass fine-tuning; DINOv2 started from {source}"
    verdict = REPRODUCED if energy is not None and energy < 1 else NOT_REPRODUCED
    return measured, verdict, f"surpasses in accuracy; energy must be lower too; DINOv2 started from {source}"


def _prompted_vlms(records: Sequence[CellRecord]) -> tuple[str, str, str]:
    """Prompted autoregressive VLMs against the best fine-tuned cell: more than 10 points below is uncompetitive."""
    prompted = [r for r in records if r.model in ("smolvlm", "vlm_prompt") and analysis.comparable(r)]
    if not prompted:
        return ("n/a", NOT_MEASURABLE, "needs ok smolvlm or vlm_prompt cells")
    if all(r.weights.get("source") == "random" for r in prompted):
        return ("n/a", NOT_MEASURABLE, "the prompted VLMs ran from random weights: they score at chance by "
                                       "construction; give real weights with --gradeff-weights")
    gaps = []
    for record in prompted:
        best = _best_fine_tuned(records, record.dataset)
        if best is not None and record.weights.get("source") != "random":
            gaps.append(analysis.metric_value(best, "heldout_accuracy") - analysis.metric_value(record,
                                                                                              "heldout_accuracy"))
    if not gaps:
        return ("n/a", NOT_MEASURABLE, "no fine-tuned cell on the prompted VLMs' datasets")
    verdict = REPRODUCED if min(gaps) > 10 else CONTRADICTED if max(gaps) < 0 else NOT_REPRODUCED
    return (f"best fine-tuned minus prompted VLM: {_span(gaps, 'points')}", verdict,
            "uncompetitive = every prompted VLM more than 10 points below the best fine-tuned cell of its dataset")


CLAIMS: tuple[Claim, ...] = (
    Claim(study="peft", key="cheap_methods", claim="QLoRA and BitFit cut energy 20–30 % at a 1–2 % accuracy cost",
          check=_cheap_methods),
    Claim(study="peft", key="adaptive_memory",
          claim="the adaptive algorithm reduces peak memory 43–79 % with 9–30 % energy overhead",
          check=_adaptive_memory),
    Claim(study="peft", key="dinov2",
          claim="DINOv2 surpasses fine-tuned models on CIFAR-100 (0.917 vs. 0.897) at a fraction of the energy",
          check=_dinov2),
    Claim(study="peft", key="prompted_vlms", claim="small autoregressive VLMs remain uncompetitive",
          check=_prompted_vlms),
)


def evaluate_claims(records: Iterable[CellRecord], *, study: str | None = None) -> list[ClaimResult]:
    """Every claim (of one study, if given) checked against ``records`` (one record per cell).

    Returns:
        One result per claim, in the order of :data:`CLAIMS`.
    """
    records = list(records)
    profiles = {r.profile for r in records}
    scale = "" if profiles and profiles <= set(_GPU_PROFILES) else \
        f"measured at the {', '.join(sorted(profiles)) or 'n/a'} profile: tiny models on synthetic data, not the " \
        "paper's scale"
    results = []
    for claim in CLAIMS:
        if study is not None and claim.study != study:
            continue
        measured, verdict, why = claim.check(records)
        results.append(ClaimResult(study=claim.study, key=claim.key, claim=claim.claim, measured=measured,
                                   verdict=verdict, why=why, scale=scale if verdict != NOT_MEASURABLE else ""))
    return results
