"""Lines that fit the terminal: tables whose columns give way in a stated order, prose wrapped to the width.

A terminal wraps a line longer than itself onto the next, which breaks a table's columns apart; so every line
the session prints is laid out for the terminal's width (pytest's terminal writer; :data:`DEFAULT_WIDTH` when
no terminal tells it: a pipe, a log file, CI). A table too wide drops whole columns, least useful first, and
says which (the full table stays in the report and its CSV); a cell id too long for what is left is cut with an
ellipsis; a number is never cut.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_WIDTH", "ID_WIDTH", "FittedTable", "fit_table", "terminal_width", "wrap"]

# The width when no terminal says its own (COLUMNS unset, output to a pipe or a file).
DEFAULT_WIDTH = 120
# A cell id longer than this is cut with an ellipsis (the full id is in the results file and the report).
ID_WIDTH = 44
# The narrowest a cut cell id gets before the table gives up fitting (an id needs its model and an axis to read).
_MIN_ID_WIDTH = 16
# rich's padding=(0, 1) without edge padding: two spaces between columns.
_GAP = 2


def terminal_width(writer) -> int:
    """The width to lay lines out for: the terminal's (or ``COLUMNS``) where one is known, else
    :data:`DEFAULT_WIDTH` (pytest's own fallback, 80, would cut a log's tables for no terminal at all).

    Args:
        writer: pytest's terminal writer (``config.get_terminal_writer()``), whose ``fullwidth`` is the terminal's.
    """
    if os.environ.get("COLUMNS"):
        return writer.fullwidth
    try:
        os.get_terminal_size(sys.__stdout__.fileno())
    except (AttributeError, ValueError, OSError):
        return DEFAULT_WIDTH
    return writer.fullwidth


def wrap(text: str, width: int, *, indent: str = "  ") -> list[str]:
    """``text`` as lines of at most ``width`` characters, the continuation lines indented by ``indent``; a line
    that fits is returned as it is (its own leading spaces kept)."""
    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_on_hyphens=False) or [text[:width]]


@dataclass(frozen=True, slots=True)
class FittedTable:
    """A table laid out for a width.

    Attributes:
        lines: the header, then one line per row (row ``i`` is line ``i + 1``).
        left_out: the titles of the columns dropped to fit, in the table's order.
    """

    lines: tuple[str, ...]
    left_out: tuple[str, ...]


def _natural(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    widths = [max([len(title), *(len(row[index]) for row in rows)]) for index, title in enumerate(header)]
    widths[0] = min(widths[0], ID_WIDTH)
    return widths


def fit_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, width: int,
              drop: Sequence[str] = ()) -> FittedTable:
    """``rows`` as a table of at most ``width`` columns, laid out by rich as plain lines.

    The first column (the cell id) is left-aligned and cut with an ellipsis past :data:`ID_WIDTH` characters, the
    second left-aligned, the others right-aligned and never cut; no cell wraps onto a second line. While the table
    is wider than ``width``, the columns named in ``drop`` are left out in that order; if it is still too wide, the
    cell ids are cut further (down to 16 characters).

    Args:
        header: column titles.
        rows: the cells' texts, one list per row.
        width: the terminal's width.
        drop: titles of the columns that may be left out, the first to go first.

    Returns:
        The lines and the titles left out.
    """
    from rich.console import Console
    from rich.table import Table

    widths = _natural(header, rows)
    kept = list(range(len(header)))

    def total() -> int:
        return sum(widths[i] for i in kept) + _GAP * (len(kept) - 1)

    for title in drop:
        if total() <= width:
            break
        if title in header:
            kept.remove(header.index(title))
    id_width = max(_MIN_ID_WIDTH, widths[0] - max(0, total() - width))
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 1), header_style="", highlight=False)
    for index in kept:
        if index == 0:
            table.add_column(header[0], no_wrap=True, overflow="ellipsis", max_width=min(widths[0], id_width))
        else:
            table.add_column(header[index], no_wrap=True, min_width=widths[index],
                             justify="left" if index == 1 else "right")
    for row in rows:
        table.add_row(*(row[index] for index in kept))
    console = Console(file=io.StringIO(), width=max(width, total()), color_system=None, force_terminal=False,
                      highlight=False, legacy_windows=False, emoji=False, markup=False)
    console.print(table)
    lines = tuple(line.rstrip() for line in console.file.getvalue().splitlines())
    return FittedTable(lines=lines, left_out=tuple(title for i, title in enumerate(header) if i not in kept))
