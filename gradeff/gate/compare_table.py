"""The gate's comparison as text: the table (aligned, or markdown for CI logs and PR comments) with the environment
and the rules that judged it before it, the cells of one side only and the warnings after it, and the total line.

Every field comes from a results file someone else wrote, so each is printed as one line with control characters made
visible (:func:`gradeff.records.safe_text.one_line`).
"""

from __future__ import annotations

from gradeff.gate.comparison import Comparison
from gradeff.gate.rules import CHANGED_BETTER
from gradeff.records.formatting import plural
from gradeff.records.safe_text import one_line

__all__ = ["format_table", "rules_line", "summary_line"]


def summary_line(comparison: Comparison) -> str:
    """``3 regressions in 2 cells, 1 improvement, 70 cells compared`` (+ cells of one side only).

    A deterministic figure that moved the good way is a regression noted ``changed: better`` (it must repeat until
    the baseline is refreshed), never an improvement: the line counts those among the regressions and says so.
    """
    regressions = comparison.regressions
    better = sum(r.note.startswith(CHANGED_BETTER) for r in regressions)
    parts = [f"{plural(len(regressions), 'regression')} in {plural(len({r.cell for r in regressions}), 'cell')}"
             + (f" ({better} of them {CHANGED_BETTER}: a deterministic figure must repeat until the baseline is "
                "refreshed)" if better else ""),
             plural(len(comparison.improvements), "improvement"),
             f"{plural(comparison.cells_compared, 'cell')} compared"]
    if comparison.missing:
        parts.append(f"{len(comparison.missing)} missing")
    if comparison.only_in_baseline:
        parts.append(f"{len(comparison.only_in_baseline)} only in baseline")
    if comparison.only_in_current:
        parts.append(f"{len(comparison.only_in_current)} only in current")
    return ", ".join(parts)


def rules_line(comparison: Comparison) -> str:
    """``rules: exact (1e-6): the numerics probe v1:… equals the baseline's (24 cells: …)``: which rule judged the
    compared cells' losses and why, on one line (empty without a compared cell)."""
    return one_line("rules: " + "; ".join(comparison.judged_by)) if comparison.judged_by else ""


def _md(text: str) -> str:
    # A pipe inside a cell would end it early.
    return text.replace("|", "\\|")


_COLUMNS = ("cell", "metric", "before", "after", "change", "verdict", "note")


def format_table(comparison: Comparison, markdown: bool = False, all_rows: bool = False) -> str:
    """The comparison as a table, then cells of one side only, warnings and the total line.

    Args:
        comparison: from ``compare_records``.
        markdown: a GitHub-flavoured markdown table (CI logs, PR comments) instead of aligned text.
        all_rows: every row; by default only noteworthy ones (see ``Row.noteworthy``).

    Returns:
        The text, ending with a newline.
    """
    rows = [r for r in comparison.rows if all_rows or r.noteworthy]
    # Every field comes from a results file someone else wrote: one line each, control characters made visible.
    cells = [[one_line(getattr(r, column)) for column in _COLUMNS] for r in rows]
    bullet = "- " if markdown else ""
    # First, before any verdict: numbers from two machines are read differently.
    lines = [f"{bullet}environment differs: {one_line(line)}" for line in comparison.environment]
    if comparison.environment:
        lines += [f"{bullet}time rows are advisory: time measured in another environment is not a regression"]
    if comparison.judged_by:
        lines.append(f"{bullet}{rules_line(comparison)}")
    lines += [f"{bullet}{one_line(line)}" for line in comparison.numerics]
    if comparison.environment or comparison.numerics or comparison.judged_by:
        lines.append("")
    if not rows:
        lines.append("no change beyond tolerance")
    elif markdown:
        lines.append("| " + " | ".join(_COLUMNS) + " |")
        lines.append("|" + "---|" * len(_COLUMNS))
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in cells]
    else:
        widths = [max(len(c) for c in column) for column in zip(_COLUMNS, *cells)]
        for row in (_COLUMNS, *cells):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    extra = [f"only in baseline: {', '.join(comparison.only_in_baseline)}"] if comparison.only_in_baseline else []
    extra += [f"only in current: {', '.join(comparison.only_in_current)}"] if comparison.only_in_current else []
    extra += [f"warning: {w}" for w in comparison.warnings]
    extra = [one_line(line) for line in extra]
    lines += ([""] + [bullet + line for line in extra]) if extra else []
    lines += ["", f"**{summary_line(comparison)}**" if markdown else summary_line(comparison)]
    return "\n".join(lines) + "\n"
