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

The verdict rules every claim shares are in :mod:`gradeff.analysis.claim_rules`; each study's checks are its own module
(:mod:`gradeff.analysis.peft_claims`, :mod:`gradeff.analysis.main_claims`); this module holds them together and
evaluates them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gradeff.analysis.claim_rules import (
    NOT_MEASURABLE,
    SINGLE_DRAW,
    Claim,
)
from gradeff.analysis.main_claims import MAIN_CLAIMS
from gradeff.analysis.peft_claims import PEFT_CLAIMS
from gradeff.analysis.runs import canonical
from gradeff.records.results import CellRecord

__all__ = ["CLAIMS", "ClaimResult", "evaluate_claims"]

_GPU_PROFILES = ("paper",)


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


CLAIMS: tuple[Claim, ...] = PEFT_CLAIMS + MAIN_CLAIMS


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

