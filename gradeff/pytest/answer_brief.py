"""The Answer as the terminal prints it: a one-line key, then at most three lines per model.

The words are :mod:`gradeff.analysis.answer_brief`'s (the report's Answer opens with the same), fitted here to the
terminal: the cell to use and why on the first line, then which questions are decided and which are still open.
A list of cells is named in full, then by its first names, then counted, whichever first fits its lines; a model
whose text still runs past three lines is cut with an ellipsis (every verdict in full is in the report).
"""

from __future__ import annotations

from gradeff.analysis.answer import AnswerLine
from gradeff.analysis.answer_brief import state_phrase, use_phrase
from gradeff.pytest.fitting import wrap

__all__ = ["MAX_LINES", "brief_lines"]

# The most lines one model's Answer takes on the terminal.
MAX_LINES = 3
# How many cells a list names, tried in turn until the text fits its lines (None: all; the rest are counted).
_NAMED = (None, 3, 1)
_INDENT = "  "


def _cut(lines: list[str], most: int, width: int) -> list[str]:
    if len(lines) <= most:
        return lines
    last = lines[most - 1]
    return [*lines[:most - 1], (last if len(last) < width else last[:width - 1].rstrip()) + "…"]


def brief_lines(line: AnswerLine, width: int) -> list[str]:
    """One model's Answer in at most :data:`MAX_LINES` lines of at most ``width`` characters: the cell to use,
    then the decided and open questions.

    Args:
        line: the model's verdicts (:func:`gradeff.analysis.answer.answer`).
        width: the terminal's width.
    """
    use = _fitting([wrap(f"{line.subject}: {use_phrase(line, named)}", width, indent=_INDENT) for named in _NAMED], 1)
    use = _cut(use, MAX_LINES - 1, width)
    state = _fitting([wrap(_INDENT + state_phrase(line, named), width, indent=_INDENT) for named in _NAMED],
                     MAX_LINES - len(use))
    return use + _cut(state, MAX_LINES - len(use), width)


def _fitting(versions: list[list[str]], most: int) -> list[str]:
    """The first version (fullest first) that takes at most ``most`` lines, else the shortest."""
    return next((lines for lines in versions if len(lines) <= most), min(versions, key=len))
