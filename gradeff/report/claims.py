"""The claims section: the papers' claims as measured here, one table per study (:class:`ClaimsView`).

Each row is a :class:`~gradeff.analysis.claims.ClaimResult` of
:func:`~gradeff.analysis.claims.evaluate_claims`: the claim, the figures measured here, the verdict
(styled per verdict), the rule that gave it, and the scale caveat of a verdict reached on a CPU
profile. Every study that has claims gets its own group, in the order of the page's sections (the main
study, then the PEFT study, then any other); a study without records in the report gets one line
instead of a table of claims that cannot be measured.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gradeff.analysis import memory as memory_analysis
from gradeff.analysis.claims import VERDICTS, ClaimResult, evaluate_claims
from gradeff.formatting import NA
from gradeff.report.view import Cell, ClaimGroupView, ClaimsView, Row, Table
from gradeff.results import CellRecord

__all__ = ["CLAIM_RULES", "STUDY_TITLES", "VERDICT_MEANINGS", "build_claims_view", "claims_table", "verdict_css"]

STUDY_TITLES = {
    "main": "Main study: optimizers × memory strategies",
    "peft": "PEFT study: fine-tuning methods, memory strategies and foundation-model baselines",
}
VERDICT_MEANINGS = {
    "reproduced": "the measured figures fall in the paper's range, widened by the claim's tolerance",
    "not reproduced": "the effect goes the paper's way but falls outside its range",
    "contradicted": "the measured effect goes against the claim",
    "not measurable here": "these records lack the cells or measurements the claim needs (the reason is given)",
}
CLAIM_RULES = (
    "A claim is checked on cells that ended ok. Where the paper gives a range, the median of the measured "
    "cases is held against that range widened by a tolerance (a claim about '20–30 %' is about a typical "
    "case, not every one); each rule is stated in its row's 'why'. A verdict reached on a CPU profile says so: "
    "tiny models on synthetic data can disagree with a GPU study for reasons of scale alone. Energy figures "
    "carry their source; an 'estimate' source is a model of CPU time, not a meter reading.")


def verdict_css(verdict: str) -> str:
    """The CSS classes of a verdict's cell: ``verdict not-reproduced``."""
    return "verdict " + (re.sub(r"[^a-z0-9]+", "-", verdict.lower()).strip("-") or "unknown")


def _text(value: str) -> Cell:
    return Cell(text=value, css="text") if value and value != NA else Cell(text=NA, css="na text")


def _scale(result: ClaimResult) -> Cell:
    if result.scale:
        return Cell(text=result.scale, css="text")
    if result.verdict == "not measurable here":
        return Cell(text=NA, css="na text", title="nothing was measured")
    return Cell(text="the paper's scale", css="text")


def claims_table(study: str, results: Sequence[ClaimResult], *, present: bool = True) -> Table:
    """One study's claims: claim, measured figures, verdict, why and scale caveat per row.

    Args:
        study: the study's key.
        results: its claims as measured.
        present: whether the report has records of the study; without, the table is a one-line note.
    """
    caption = "Each claim, the figures measured here, and the verdict"
    if not present:
        return Table(id=f"claims-{study}", caption=caption, header=(), rows=(),
                     note=f"n/a: no records of this study in these results, so its {len(results)} claim"
                          f"{'' if len(results) == 1 else 's'} cannot be measured.")
    rows = tuple(Row(label=r.claim, cells=(
        _text(r.measured),
        Cell(text=r.verdict, css=verdict_css(r.verdict), title=VERDICT_MEANINGS.get(r.verdict, "")),
        _text(r.why), _scale(r))) for r in results)
    return Table(id=f"claims-{study}", caption=caption,
                 header=("claim", "measured here", "verdict", "why", "scale"), rows=rows,
                 note=f"{_counts(results)}." if results else "")


def _counts(results: Sequence[ClaimResult]) -> str:
    # "1 reproduced, 3 not measurable here": verdicts in the order of VERDICTS, then any other.
    order = [*VERDICTS, *dict.fromkeys(r.verdict for r in results if r.verdict not in VERDICTS)]
    return ", ".join(f"{n} {verdict}" for verdict in order if (n := sum(r.verdict == verdict for r in results)))


def build_claims_view(records: Sequence[CellRecord]) -> ClaimsView:
    """The claims section from every record of the report (one per cell, each study's claims read its own).

    Returns:
        One group per study that has claims: the main study, the PEFT study, then any other in the order
        :data:`gradeff.analysis.claims.CLAIMS` lists them. The summary counts the claims of studies with records.
    """
    results = evaluate_claims(records)
    studies = memory_analysis.split_studies(records)
    present = {"main": bool(studies.main), "peft": bool(studies.peft)}
    by_study: dict[str, list[ClaimResult]] = {study: [] for study in STUDY_TITLES}
    for result in results:
        by_study.setdefault(result.study, []).append(result)
    shown = [r for r in results if present.get(r.study, True)]
    return ClaimsView(
        summary=_counts(shown),
        groups=tuple(ClaimGroupView(id=f"claims-{study}-group", title=STUDY_TITLES.get(study, study),
                                    table=claims_table(study, group, present=present.get(study, True)))
                     for study, group in by_study.items() if group),
        rules=CLAIM_RULES,
        verdicts=tuple((verdict, verdict_css(verdict), VERDICT_MEANINGS.get(verdict, "")) for verdict in VERDICTS))
