"""Text from records made safe to show: in a terminal, a markdown table, a spreadsheet.

A record's strings (a cell id, a failure's message, a CPU's name, a path) come from whoever wrote the results
file. Printed raw, a newline starts a fake table row, an ANSI escape rewrites the terminal, a bidirectional
control makes ``llm-adam-accum`` display other characters, and a spreadsheet runs a CSV cell that begins with
``=`` as a formula. The HTML report already shows each bidirectional control as a visible mark
(:func:`gradeff.report.render.neutralise_bidi`); these functions do the same for the other outputs.
"""

from __future__ import annotations

import unicodedata

__all__ = ["BIDI_CONTROLS", "FORMULA_PREFIXES", "csv_safe", "one_line"]

# LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI, ALM, LRM, RLM.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c\u200e\u200f"
# What a spreadsheet reads as the start of a formula (OWASP's list: = + - @ and the tab and carriage return
# that some strip first; a line feed, which some strip too). A first character is compared in its compatibility form
# (NFKC), so a fullwidth ＝ or a small ﹦, which a spreadsheet may take for "=", is guarded as well.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\n")
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _shown(character: str) -> str:
    if character in _LINE_BREAKS or character == "\t":
        return " "  # as HTML renders white space: the text stays on its line
    if character in BIDI_CONTROLS or unicodedata.category(character) == "Cc":
        return f"[U+{ord(character):04X}]"
    return character


def one_line(text: object) -> str:
    """``text`` on one line: line breaks and tabs as spaces, bidirectional and other control characters (an ANSI
    escape's ESC) as visible ``[U+202E]`` marks."""
    text = str(text)
    if text.isprintable():  # the common case, and str.isprintable is False for every character replaced below
        return text
    return "".join(map(_shown, text))


def csv_safe(text: str) -> str:
    """A CSV cell a spreadsheet shows as text: one that begins like a formula (in any compatibility form of its first
    character: ``＝`` is ``=``) gets a leading ``'``."""
    return f"'{text}" if unicodedata.normalize("NFKC", text[:1]).startswith(FORMULA_PREFIXES) else text
