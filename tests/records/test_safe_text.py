"""Text from records shown safely: one line in a terminal or markdown table, no formula in a spreadsheet."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.records.safe_text import BIDI_CONTROLS, FORMULA_PREFIXES, csv_safe, one_line


@pytest.mark.parametrize(("text", "shown"), [
    ("llm-adam-accum", "llm-adam-accum"),
    ("llm-\u202eccua-mada", "llm-[U+202E]ccua-mada"),            # right-to-left override made visible
    ("boom\nfake row | regression", "boom fake row | regression"),  # a line break stays on its line
    ("a\r\nb\tc", "a  b c"),
    ("\x1b[31mred\x1b[0m", "[U+001B][31mred[U+001B][0m"),         # an ANSI escape cannot colour the terminal
    ("caf\u00e9 \u00a0x", "caf\u00e9 \u00a0x"),                    # printable non-ASCII is left alone
    (3.5, "3.5"),
])
def test_one_line(text, shown):
    assert one_line(text) == shown


@given(st.text())
def test_one_line_leaves_no_line_break_nor_control(text):
    """Whatever the input: one line, and no control or bidirectional character survives."""
    shown = one_line(text)
    assert shown.splitlines() in ([shown], [])
    assert not any(c in BIDI_CONTROLS or (ord(c) < 32 or 0x7f <= ord(c) < 0xa0) for c in shown)


@pytest.mark.parametrize("first", FORMULA_PREFIXES)
def test_formula_prefixes_are_quoted(first):
    assert csv_safe(f"{first}HYPERLINK(1)") == f"'{first}HYPERLINK(1)"


@given(st.text())
def test_csv_safe_only_prefixes(text):
    """csv_safe adds one quote to what begins like a formula, and changes nothing else."""
    safe = csv_safe(text)
    assert safe == (f"'{text}" if text[:1] in FORMULA_PREFIXES and text else text)
    assert not safe.startswith(FORMULA_PREFIXES)
