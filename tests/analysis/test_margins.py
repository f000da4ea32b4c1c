"""Practical-equivalence margins: the defaults per question and unit, and --gradeff-margin's forms."""

import pytest

from gradeff.analysis.margins import DEFAULT_MARGINS, Margin, margin_for, parse_margins


def test_defaults_follow_the_metrics_unit():
    """A loss moves relatively (1 %), an accuracy in points (1 pt); time 5 %, memory 2 %."""
    assert margin_for("quality", "loss").size(3.0) == pytest.approx(0.03)
    assert margin_for("quality", "percent").size(87.0) == 1.0
    assert margin_for("speed", "seconds").size(10.0) == pytest.approx(0.5)
    assert margin_for("memory", "bytes").size(100.0) == pytest.approx(2.0)
    assert DEFAULT_MARGINS["energy"].relative == 0.05


def test_what_the_user_sets_holds_whatever_the_unit():
    given = parse_margins(["quality=0.5%", "memory=1MiB"])
    assert margin_for("quality", "percent", given).size(80.0) == pytest.approx(0.4)
    assert margin_for("memory", "bytes", given).size(1e9) == 2**20
    assert margin_for("speed", "seconds", given) == DEFAULT_MARGINS["speed"]


@pytest.mark.parametrize(("text", "relative", "absolute"), [
    ("quality=1%", 0.01, None), ("quality=0.02", None, 0.02), ("quality=2pt", None, 2.0),
    ("memory=4KiB", None, 4096.0), ("speed=250ms", None, 0.25), ("energy=3j", None, 3.0),
])
def test_each_form_of_a_margin(text, relative, absolute):
    (margin,) = parse_margins([text]).values()
    assert (margin.relative, margin.absolute) == (relative, absolute)


@pytest.mark.parametrize("text", ["quality", "quality=", "loss=1%", "quality=-1%", "quality=1 furlong", "=1%"])
def test_a_bad_margin_is_refused_naming_the_valid_forms(text):
    with pytest.raises(ValueError, match="QUESTION=VALUE|percentage|size"):
        parse_margins([text])


def test_comma_separated_and_repeated_forms_add_up_and_the_last_wins():
    found = parse_margins(["quality=1%,memory=2%", "quality=3%"])
    assert found["quality"].relative == 0.03 and found["memory"].relative == 0.02


def test_a_margin_is_either_relative_or_absolute_and_never_negative():
    with pytest.raises(ValueError):
        Margin()
    with pytest.raises(ValueError):
        Margin(relative=0.1, absolute=1.0)
    with pytest.raises(ValueError):
        Margin(relative=-0.1)
