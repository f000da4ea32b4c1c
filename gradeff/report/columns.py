"""Columns nothing on this run measured are left out of the page, and each table's note says which and why.

A CPU run has no GPU utilization or GPU memory: a column of ``n/a`` from top to bottom tells the reader nothing
but takes the width a measured column needs. :func:`hide_unmeasured` drops such a column from one table;
:func:`hide_unmeasured_everywhere` does it for every table of a view model, so no section can forget it.
A column is *unmeasured* when every row's cell in it reads ``n/a``; a column with one measured value, a status
(``oom``, ``diverged``), "not reached" or an ``n/a: reason`` written out (the Answer's "not measurable here",
which is itself an answer) stays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gradeff.records.formatting import NA
from gradeff.report.view import Cell, Table

__all__ = ["HIDDEN_PREFIX", "hide_unmeasured", "hide_unmeasured_everywhere", "is_unmeasured"]

HIDDEN_PREFIX = "Hidden: "


def is_unmeasured(cell: Cell) -> bool:
    """The cell says ``n/a`` and nothing else: not a value, a status, "not reached" or a reason in words."""
    return cell.text == NA


def _reasons(cells: Sequence[Cell]) -> list[str]:
    # The cells' own words for why (their tooltip, or the text after "n/a: "), most common first.
    found: dict[str, int] = {}
    for cell in cells:
        reason = cell.title
        if reason:
            found[reason] = found.get(reason, 0) + 1
    return sorted(found, key=lambda reason: -found[reason])


def hide_unmeasured(table: Table) -> Table:
    """``table`` without the data columns whose every row is ``n/a``; its note names them and says why.

    The row-label column always stays, and a table where every data column is unmeasured keeps them all (an
    empty grid of labels would say less than the ``n/a`` cells do).
    """
    if not table.rows:
        return table
    columns = len(table.rows[0].cells)
    if any(len(row.cells) != columns for row in table.rows) or len(table.header) != columns + 1:
        return table  # ragged or unlabelled: no column to name in a note
    # A column with nothing written in any row (the Answer's notes when no line has one) goes without a word.
    blank = {c for c in range(columns) if all(not row.cells[c].text and not row.cells[c].sub for row in table.rows)}
    hidden = [c for c in range(columns) if c not in blank and all(is_unmeasured(row.cells[c]) for row in table.rows)]
    if len(hidden) + len(blank) == columns:
        return table
    if not hidden:
        return _without(table, blank) if blank else table
    reasons = _reasons([row.cells[c] for row in table.rows for c in hidden])
    why = f" ({'; '.join(reasons[:2])})" if reasons else ""
    names = ", ".join(table.header[c + 1] or f"column {c + 1}" for c in hidden)
    gpu = " A run without a GPU has no GPU meters." if "GPU" in names else ""
    note = (f"{HIDDEN_PREFIX}{names}: n/a in every row on this run{why}.{gpu} The CSV export keeps every "
            "column.")
    return dataclasses.replace(_without(table, blank | set(hidden)),
                               note=f"{table.note} {note}" if table.note else note)


def _without(table: Table, columns: set[int]) -> Table:
    kept = [c for c in range(len(table.header) - 1) if c not in columns]
    return dataclasses.replace(
        table, header=(table.header[0], *(table.header[c + 1] for c in kept)),
        rows=tuple(dataclasses.replace(row, cells=tuple(row.cells[c] for c in kept)) for row in table.rows))


def hide_unmeasured_everywhere(value):
    """Every :class:`Table` inside ``value`` (a view dataclass, tuple or list, nested) through
    :func:`hide_unmeasured`; anything else as it is."""
    if isinstance(value, Table):
        return hide_unmeasured(value)
    if isinstance(value, tuple):
        return tuple(hide_unmeasured_everywhere(item) for item in value)
    if isinstance(value, list):
        return [hide_unmeasured_everywhere(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for field in dataclasses.fields(value):
            old = getattr(value, field.name)
            new = hide_unmeasured_everywhere(old)
            if new is not old:
                changes[field.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value
