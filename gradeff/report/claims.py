"""The claims section: the papers' claims as measured here, one table per study (:class:`ClaimsView`).

Each row is a :class:`~gradeff.analysis.claims.ClaimResult` of
:func:`~gradeff.analysis.claims.evaluate_claims`: the claim, the figures measured here, the verdict
(styled per verdict), the rule that gave it, and the scale caveat of a verdict reached on a CPU
profile. Every study that has claims gets its own group, titled and ordered as the study registry
(:data:`gradeff.studies.study.STUDIES`) has them; a study without records in the report (of its own, or of the
grids its claims read) gets one line instead of a table of claims that cannot be measured.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gradeff.analysis import naming, scope
from gradeff.analysis.claim_rules import VERDICTS
from gradeff.analysis.claims import ClaimResult, evaluate_claims
from gradeff.records.formatting import NA
from gradeff.records.results import CellRecord
from gradeff.report.view import Cell, ClaimGroupView, ClaimsView, Row, Table
from gradeff.studies.study import STUDIES

__all__ = ["CLAIM_RULES", "VERDICT_MEANINGS", "build_claims_view", "claims_table", "claims_title", "verdict_css"]

VERDICT_MEANINGS = {
    "reproduced": "the measured figures fall in the paper's range, widened by the claim's tolerance",
    "not reproduced": "the effect goes the paper's way but falls outside its range",
    "contradicted": "the measured effect goes against the claim",
    "not measurable here": "these records lack the cells or measurements the claim needs, or what they measure is "
                           "not the paper's quantity (the reason is given)",
}
CLAIM_RULES = (
    "A claim reads the cells of its own study's grids only (named in each table's caption), on seeds that ended "
    "ok. Its effect is computed seed by seed from cells that shared their start and data, then summarised over "
    "seeds (mean and 95 % interval); where the paper gives a range, it is reproduced where that interval meets "
    "the range (with one seed: the value lies in it), widened by nothing else, no fixed tolerance. An effect must "
    "exceed the seed spread: "
    "with several seeds an interval that holds 0 is no effect, so a claimed change is not reproduced and nothing "
    "is contradicted by noise; with one seed the verdict is a single draw. 'X is best' holds only where X wins "
    "outright: a shared first place (equivalent, or open) is never a win, and identical cells (the same numbers "
    "on every seed) are one entry. Quality "
    "claims read the study's quality metric (the test loss, or test top-1 for classifiers); time claims the "
    "paper's own quantity, time per epoch. Not measurable here: the measured quantity is not the paper's (a "
    "stand-in for a named foundation model, an energy estimate against a measured energy, a loss whose scale "
    "depends on the vocabulary). A verdict reached on a CPU profile says so: tiny models on synthetic data can "
    "disagree with a GPU study for reasons of scale alone.")


def claims_title(study: str) -> str:
    """The title of a study's claims (its registered one; a study the registry lacks by its key)."""
    spec = STUDIES.get(study)
    return (spec.claims_title or spec.title) if spec is not None else study


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
        Cell(text=r.verdict, sub=r.seeds, css=verdict_css(r.verdict), title=VERDICT_MEANINGS.get(r.verdict, "")),
        _text(r.why), _scale(r))) for r in results)
    grids = ", ".join(dict.fromkeys(grid for r in results for grid in r.grids))
    return Table(id=f"claims-{study}", caption=f"{caption} (grids read: {grids})" if grids else caption,
                 header=("claim", "measured here", "verdict", "why", "scale"), rows=rows,
                 note=f"{_counts(results)}." if results else "")


def _counts(results: Sequence[ClaimResult]) -> str:
    # "1 reproduced, 3 not measurable here": verdicts in the order of VERDICTS, then any other.
    order = [*VERDICTS, *dict.fromkeys(r.verdict for r in results if r.verdict not in VERDICTS)]
    return ", ".join(f"{n} {verdict}" for verdict in order if (n := sum(r.verdict == verdict for r in results)))


def build_claims_view(records: Sequence[CellRecord]) -> ClaimsView:
    """The claims section from every record of the report (one per cell, each study's claims read its own).

    Returns:
        One group per study that has claims, in the study registry's order, then any other in the order
        :data:`gradeff.analysis.claims.CLAIMS` lists them. The summary counts the claims of studies with records.
    """
    results = evaluate_claims(records)
    studies = scope.split(records)
    by_study: dict[str, list[ClaimResult]] = {study: [] for study in STUDIES}
    for result in results:
        by_study.setdefault(result.study, []).append(result)
    recorded = {record.grid for record in records}
    # Present: records of the study itself, or of a grid its claims read.
    present = {study: bool(studies.get(study)) or any(grid in recorded for r in group for grid in r.grids)
               for study, group in by_study.items()}
    shown = [r for r in results if present[r.study]]
    return ClaimsView(
        summary=_counts(shown),
        groups=tuple(ClaimGroupView(id=f"claims-{study}-group", title=claims_title(study),
                                    table=claims_table(study, group, present=present[study]),
                                    scale_note=naming.scale_note(studies.get(study, ())))
                     for study, group in by_study.items() if group),
        rules=CLAIM_RULES,
        verdicts=tuple((verdict, verdict_css(verdict), VERDICT_MEANINGS.get(verdict, "")) for verdict in VERDICTS))
