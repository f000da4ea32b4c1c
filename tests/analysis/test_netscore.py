"""The NetScore family: published and hand-computed values, measured inputs only, the estimate flag, monotonicity."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gradeff.analysis.netscore import (
    LABELS,
    MIB,
    Score,
    netscore,
    netscore_family,
    ns_e,
    ns_m,
    ns_sharp,
)

PROPERTY = settings(max_examples=60, deadline=None, database=None)

# The PEFT study's known row: A = 89.7 %, t = 21.3 s, P = 144.2 W, r = 1084 MiB.
ROW = {"accuracy_pct": 89.7, "seconds": 21.3, "power_w": 144.2, "memory_mib": 1084.0}
ROW_SCORES = {"ns_e": 69.39, "ns_m": 70.52, "ns_sharp": 61.81}

# A complete, measured set of the family's inputs (raw units), to knock single inputs out of.
INPUTS = {"accuracy": 0.5, "parameters": 2_000_000, "macs": 100_000_000, "inference_seconds": 21.3,
          "mean_power_w": 144.2, "peak_memory_bytes": 1084 * MIB, "energy_source": "nvml"}
# Which inputs each score reads.
USES = {
    "netscore": {"accuracy", "parameters", "macs"},
    "ns_e": {"accuracy", "inference_seconds", "mean_power_w"},
    "ns_m": {"accuracy", "peak_memory_bytes"},
    "ns_sharp": {"accuracy", "inference_seconds", "mean_power_w", "peak_memory_bytes"},
}


def family(**changes) -> dict[str, Score]:
    return netscore_family(**(INPUTS | changes))


# -- known values ---------------------------------------------------------------------------


def test_the_peft_studys_known_row():
    """NS-E 69.39, NS-M 70.52, NS# 61.81 for A = 89.7 %, t = 21.3 s, P = 144.2 W, r = 1084 MiB."""
    scores = {
        "ns_e": ns_e(ROW["accuracy_pct"], ROW["seconds"], ROW["power_w"]),
        "ns_m": ns_m(ROW["accuracy_pct"], ROW["memory_mib"]),
        "ns_sharp": ns_sharp(ROW["accuracy_pct"], ROW["memory_mib"], ROW["seconds"], ROW["power_w"]),
    }
    for key, expected in ROW_SCORES.items():
        assert scores[key].value == pytest.approx(expected, abs=0.005), key
        assert scores[key] == Score(scores[key].value, False, ())


def test_the_known_row_from_raw_units():
    """The family converts a fraction, bytes and counts into %, MiB and millions itself."""
    scores = netscore_family(0.897, 1, 1, 21.3, 144.2, 1084 * MIB, "rapl")
    for key, expected in ROW_SCORES.items():
        assert scores[key].value == pytest.approx(expected, abs=0.005), key
        assert not scores[key].estimated


@pytest.mark.parametrize(("a", "p", "m", "expected"), [
    # 20·(2·log10 50 - 0.5·log10 2 - 0.5·log10 100) = 20·(3.397940 - 0.150515 - 1)
    (50.0, 2.0, 100.0, 44.948500),
    (100.0, 1.0, 1.0, 80.0),  # 20·log10(100²)
    (10.0, 100.0, 100.0, 0.0),  # 20·(2 - 1 - 1)
    # A model under a million parameters and MACs: the cost terms change sign and add 20·(1 + 1).
    (10.0, 0.01, 0.01, 80.0),
])
def test_netscore_hand_computed(a, p, m, expected):
    assert netscore(a, p, m).value == pytest.approx(expected, abs=1e-6)


def test_netscore_in_the_papers_units_from_raw_counts():
    """2 M parameters and 100 M MACs at 50 %: the same 44.9485 dB from counts and a fraction."""
    assert family()["netscore"].value == pytest.approx(44.948500, abs=1e-6)


def test_netscore_exponents_are_parameters():
    """α, β, γ default to the paper's 2, 0.5, 0.5 and can be changed."""
    assert netscore(10.0, 10.0, 10.0, alpha=1.0, beta=1.0, gamma=0.0).value == pytest.approx(0.0)


def test_ns_sharp_is_ns_e_plus_ns_m_less_the_accuracy_term():
    scores = family()
    accuracy_term = 20 * math.log10(50.0**2)
    assert scores["ns_sharp"].value == pytest.approx(scores["ns_e"].value + scores["ns_m"].value - accuracy_term)


def test_changing_a_unit_shifts_every_score_alike():
    """Scores of two models differ by the same amount in MiB or in GiB: only absolute values move."""
    small, large = 300.0, 5000.0  # MiB
    in_mib = ns_m(80.0, small).value - ns_m(80.0, large).value
    in_gib = ns_m(80.0, small / 1024).value - ns_m(80.0, large / 1024).value
    assert in_mib == pytest.approx(in_gib)


# -- measured inputs only -------------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, 0, -1.0, math.nan, math.inf])
@pytest.mark.parametrize("name", sorted(set().union(*USES.values())))
def test_an_unmeasured_input_gives_none_and_is_named(name, bad):
    """None, 0, a negative or a non-finite input: every score that reads it is None, naming it; the rest stand."""
    scores = family(**{name: bad})
    for key, used in USES.items():
        score = scores[key]
        if name in used:
            assert score == Score(None, False, (name,)), key
        else:
            assert score.value is not None and score.missing == (), key


def test_every_missing_input_is_named():
    scores = netscore_family(None, 0, None, None, None, None, None)
    assert scores["netscore"].missing == ("accuracy", "parameters", "macs")
    assert scores["ns_sharp"].missing == ("accuracy", "peak_memory_bytes", "inference_seconds", "mean_power_w")


def test_low_level_scores_name_their_own_arguments():
    assert netscore(50.0, 0.0, None).missing == ("params_millions", "macs_millions")
    assert ns_e(None, 1.0, -2.0).missing == ("accuracy_pct", "power_w")
    assert ns_m(50.0, 0.0).missing == ("memory_mib",)
    assert ns_sharp(50.0, 1.0, 1.0, None).missing == ("power_w",)


def test_a_power_without_an_energy_source_is_not_measured():
    """Source "none" (or None) means no meter: a power passed anyway counts as missing."""
    for source in ("none", None):
        scores = family(energy_source=source)
        assert scores["ns_e"] == Score(None, False, ("mean_power_w",))
        assert scores["ns_sharp"] == Score(None, False, ("mean_power_w",))
        assert scores["ns_m"].value is not None and scores["netscore"].value is not None


def test_out_of_range_inputs_are_errors_not_scores():
    with pytest.raises(ValueError, match="fraction"):
        family(accuracy=89.7)  # a percentage where a fraction is recorded
    with pytest.raises(ValueError, match="percentage"):
        netscore(150.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="energy_source"):
        family(energy_source="wattmeter")


# -- the estimate flag ----------------------------------------------------------------------


@pytest.mark.parametrize("source", ["nvml", "rapl", "estimate"])
def test_estimated_iff_the_power_is_an_estimate(source):
    """Only NS-E and NS# read the power, and only an "estimate" source flags them."""
    scores = family(energy_source=source)
    estimated = source == "estimate"
    assert scores["ns_e"].estimated is estimated
    assert scores["ns_sharp"].estimated is estimated
    assert not scores["netscore"].estimated and not scores["ns_m"].estimated
    assert all(s.value is not None for s in scores.values())


def test_no_value_no_estimate_flag():
    scores = family(energy_source="estimate", inference_seconds=None)
    assert scores["ns_e"] == Score(None, False, ("inference_seconds",))


def test_low_level_estimate_flag():
    assert ns_e(50.0, 1.0, 1.0, power_estimated=True).estimated
    assert ns_sharp(50.0, 1.0, 1.0, 1.0, power_estimated=True).estimated
    assert not ns_e(50.0, 1.0, 1.0).estimated


# -- stored as JSON -------------------------------------------------------------------------


def test_the_family_round_trips_through_json():
    scores = family(energy_source="estimate", macs=None)
    stored = json.loads(json.dumps({key: score.as_dict() for key, score in scores.items()}))
    assert stored["netscore"] == {"value": None, "estimated": False, "missing": ["macs"]}
    assert stored["ns_e"]["estimated"] is True
    assert {key: Score.from_dict(value) for key, value in stored.items()} == scores
    assert set(scores) == set(LABELS) == set(USES)


def test_score_is_frozen():
    with pytest.raises(AttributeError):
        Score(1.0).value = 2.0  # type: ignore[misc]


# -- monotonicity ---------------------------------------------------------------------------

positive = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False, allow_infinity=False)
factor = st.floats(min_value=1.001, max_value=1e3)
fraction = st.floats(min_value=1e-4, max_value=1.0)


@PROPERTY
@given(low=fraction, high=fraction)
def test_higher_accuracy_scores_higher(low, high):
    assume(high > low * (1 + 1e-9))
    below, above = family(accuracy=low), family(accuracy=high)
    for key in USES:
        assert above[key].value > below[key].value, key


@PROPERTY
@given(name=st.sampled_from(["parameters", "macs", "inference_seconds", "mean_power_w", "peak_memory_bytes"]),
       value=positive, k=factor)
def test_a_larger_cost_scores_lower_and_leaves_the_others(name, value, k):
    """More parameters, MACs, time, power or memory lowers every score that reads it and no other."""
    cheap, dear = family(**{name: value}), family(**{name: value * k})
    for key, used in USES.items():
        if name in used:
            assert dear[key].value < cheap[key].value, key
        else:
            assert dear[key].value == cheap[key].value, key


@PROPERTY
@given(a=st.floats(min_value=0.01, max_value=100.0), t=positive, p=positive, r=positive, k=factor)
def test_low_level_scores_are_monotone(a, t, p, r, k):
    assert ns_e(a, t * k, p).value < ns_e(a, t, p).value
    assert ns_e(a, t, p * k).value < ns_e(a, t, p).value
    assert ns_m(a, r * k).value < ns_m(a, r).value
    assert ns_sharp(a, r * k, t, p).value < ns_sharp(a, r, t, p).value
    assert netscore(a, t * k, p).value < netscore(a, t, p).value
    assert netscore(a, t, p * k).value < netscore(a, t, p).value
    assert netscore(min(a * k, 100.0), t, p).value >= netscore(a, t, p).value
