"""The gate's per-metric rules: each fires on a crafted regression and stays quiet within its noise."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.compare_rules import (
    DEFAULT_RULES, MIB, StatusRule, TimeRule, ToleranceRule, override_rules,
)
from gradeff.results import CellRecord, EpochRecord, Summary

MEMORY = {"parameter_bytes": 400 * MIB, "trainable_parameter_bytes": 400 * MIB, "gradient_bytes": 400 * MIB,
          "optimizer_state_bytes": 800 * MIB, "activation_bytes": 1000 * MIB}


def record(*, status="ok", seconds=(1.0, 1.0, 1.0), losses=None, meters=None, detail="", **overrides) -> CellRecord:
    """A record of ``llm-adam-standard`` with the given epoch times, losses and meters."""
    losses = losses or [2.0 - 0.25 * i for i in range(len(seconds))]
    epochs = tuple(EpochRecord(epoch=i, loss=loss, seconds=s, optimizer_steps=8, closure_calls=8, samples=64,
                               targets=64) for i, (loss, s) in enumerate(zip(losses, seconds)))
    values = dict(cell="llm-adam-standard", model="llm", optimizer="adam", strategy="standard", profile="tiny",
                  seed=0, device="cpu", status=status, detail=detail, epochs=epochs,
                  summary=Summary.of(list(epochs), 5.0), meters=meters or {})
    return CellRecord(**(values | overrides))


def rule(metric: str):
    """The default rule of ``metric``."""
    return next(r for r in DEFAULT_RULES if r.metric == metric)


def time_verdict(before, after, **settings):
    """Verdict of the time rule on two epoch-time series."""
    return TimeRule(**settings).compare(record(seconds=before), record(seconds=after)).verdict


# --- time per epoch ---------------------------------------------------------------------------------------------

def test_time_jitter_within_noise_is_ok():
    """[1.0, 1.1, 0.9] → [1.05, 0.95, 1.1] is jitter: ok, and not shown by default."""
    row = TimeRule().compare(record(seconds=[1.0, 1.1, 0.9]), record(seconds=[1.05, 0.95, 1.1]))
    assert row.verdict == "ok" and not row.noteworthy


def test_time_doubling_without_spread_is_a_regression():
    """[1, 1, 1] → [2, 2, 2] is a regression (×2, no noise); the reverse is an improvement."""
    row = TimeRule().compare(record(seconds=[1, 1, 1]), record(seconds=[2, 2, 2]))
    assert (row.verdict, row.change, row.ratio) == ("regression", "×2", 2.0)
    assert time_verdict([2, 2, 2], [1, 1, 1]) == "improvement"


def test_time_slowdown_within_the_baselines_noise_is_ok_but_shown():
    """Baseline epochs [0.9, 1.0, 1.7] (spread 0.36): threshold ×1.73; a best epoch ×1.6 the baseline's median
    (×1.78 its best, under max_ratio ×1.9) is ok, and shown."""
    rule = TimeRule()
    assert rule.threshold([0.9, 1.0, 1.7]) == pytest.approx(1 + 2 * 0.3633, abs=1e-3)
    row = rule.compare(record(seconds=[0.9, 1.0, 1.7]), record(seconds=[1.6, 1.7, 1.7]))
    assert row.ratio == pytest.approx(1.6) and row.verdict == "ok" and row.noteworthy
    assert "threshold ×1.73" in row.note


def test_the_current_runs_own_noise_never_excuses_a_slowdown():
    """A ×28 slowdown with wild epochs (the bug of a pooled spread) is a regression; so is any doubling of the
    best epoch, however noisy the baseline (the allowance stops at max_ratio ×1.9)."""
    assert time_verdict([0.0588, 0.06, 0.059], [1.68, 9.0, 0.5 * 28.5 * 0.0588 * 2]) == "regression"
    assert TimeRule().threshold([0.1, 1.0, 3.0]) == 1.9
    assert time_verdict([0.1, 1.0, 3.0], [0.2, 2.0, 6.0]) == "regression"


def test_time_small_slowdown_below_the_ratio_is_ok_even_without_noise():
    """×1.4 with zero spread stays under the 1.5 floor: ok; --time-ratio 1.1 makes it a regression."""
    assert time_verdict([1, 1, 1], [1.4, 1.4, 1.4]) == "ok"
    assert time_verdict([1, 1, 1], [1.2, 1.2, 1.2], ratio=1.1) == "regression"


def test_time_judges_the_best_epoch():
    """Load can only add time: one slow epoch on either side moves nothing; a slower best epoch does."""
    assert time_verdict([1, 1, 1], [1, 5, 5]) == "ok"
    assert time_verdict([1, 5, 5], [1, 1, 1]) == "ok"
    assert time_verdict([1, 1.02, 1.01], [2, 2, 2.1]) == "regression"


def test_a_lucky_fast_baseline_epoch_is_not_the_yardstick():
    """Measured on an unchanged rerun: a baseline [0.041, 0.061, 0.060] against [0.072, 0.072, 0.074] is ×1.78
    best to best, but its fastest current epoch is ×1.19 the baseline's median: ok. A real doubling still fails."""
    assert time_verdict([0.0406, 0.0606, 0.0603], [0.0721, 0.0724, 0.0738]) == "ok"
    assert time_verdict([0.0406, 0.0606, 0.0603], [0.121, 0.124, 0.13]) == "regression"


def test_epoch_zero_is_dropped_from_four_epochs_only():
    """With ≥ 4 epochs the first one's time is left out; with 3 every epoch counts."""
    assert TimeRule().samples(record(seconds=[9.0, 1.0, 2.0, 3.0])) == [1.0, 2.0, 3.0]
    assert TimeRule().samples(record(seconds=[9.0, 1.0, 2.0])) == [9.0, 1.0, 2.0]
    # A slow first epoch (compilation, allocator growth) then does not read as a 2× regression.
    assert time_verdict([1, 1, 1, 1], [4, 1, 1, 1]) == "ok"


@given(st.lists(st.floats(0.01, 100), min_size=1, max_size=8), st.lists(st.floats(0.01, 100), min_size=1, max_size=8))
def test_time_rule_is_antisymmetric_at_a_fixed_threshold(before, after):
    """With the threshold fixed (no noise allowance), swapping baseline and current swaps regression and
    improvement, and keeps ok; with it, only the baseline's spread counts, so a swap may change the threshold."""
    swap = {"ok": "ok", "regression": "improvement", "improvement": "regression"}
    assert time_verdict(after, before, noise_sigmas=0) == swap[time_verdict(before, after, noise_sigmas=0)]


# --- status -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("before", "after", "verdict", "noteworthy"), [
    ("ok", "diverged", "regression", True),
    ("ok", "oom", "regression", True),
    ("ok", "error", "regression", True),
    ("diverged", "ok", "improvement", True),
    ("ok", "skipped", "ok", True),
    ("skipped", "ok", "ok", True),
    ("diverged", "oom", "ok", True),
    ("ok", "ok", "ok", False),
])
def test_status_transitions(before, after, verdict, noteworthy):
    """ok → failed regresses, failed → ok improves, skipped is neutral; any change is shown."""
    row = StatusRule().compare(record(status=before), record(status=after, detail="why\ntraceback"))
    assert (row.verdict, row.noteworthy) == (verdict, noteworthy)
    if verdict == "regression":
        assert row.note == "why" and row.change == f"ok → {after}"


def test_metrics_of_a_failed_cell_are_not_compared():
    """ok → diverged: the loss is 'not compared (status: current diverged)', not a second regression."""
    row = rule("final_loss").compare(record(), record(status="diverged", losses=[9.0, 9.0, 9.0]))
    assert row.verdict == "not compared" and row.note == "status: current diverged" and not row.noteworthy


# --- loss -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("delta", "verdict"), [(1e-6, "ok"), (-1e-6, "ok"), (0.01, "regression"),
                                                (-0.01, "improvement")])
def test_final_loss_tolerance(delta, verdict):
    """Final loss 1.5: +1e-6 is ok (deterministic CPU rerun), ±1 % regresses / improves."""
    row = rule("final_loss").compare(record(losses=[2.0, 1.75, 1.5]), record(losses=[2.0, 1.75, 1.5 * (1 + delta)]))
    assert row.verdict == verdict


def test_mean_loss_tolerance():
    """Mean loss: +1 % of every epoch regresses, +1e-6 does not."""
    base = record(losses=[2.0, 1.75, 1.5])
    assert rule("mean_loss").compare(base, record(losses=[x * 1.01 for x in (2.0, 1.75, 1.5)])).verdict == "regression"
    assert rule("mean_loss").compare(base, record(losses=[x + 1e-6 for x in (2.0, 1.75, 1.5)])).verdict == "ok"


def test_loose_loss_tolerance_accepts_gpu_drift():
    """rtol 0.05 (--loose) accepts a 1 % loss drift that the CPU default flags."""
    loose = override_rules(DEFAULT_RULES, "*_loss", "rtol", "0.05")
    final = next(r for r in loose if r.metric == "final_loss")
    row = final.compare(record(losses=[2.0, 1.5]), record(losses=[2.0, 1.515]))
    assert row.verdict == "ok" and final.rtol == 0.05
    assert rule("final_loss").compare(record(losses=[2.0, 1.5]), record(losses=[2.0, 1.515])).verdict == "regression"


# --- memory -----------------------------------------------------------------------------------------------------

def with_memory(**changes) -> CellRecord:
    """A record whose memory breakdown is ``MEMORY`` updated with ``changes``."""
    return record(meters={"memory": MEMORY | changes})


def test_activation_bytes_are_exact_ish():
    """Activation bytes +5 % or +4 KiB regress, one KiB (within 1e-6 of 1000 MiB) does not; shown in % and MiB."""
    base = with_memory()
    row = rule("activation_bytes").compare(base, with_memory(activation_bytes=1050 * MIB))
    assert (row.verdict, row.before, row.after, row.change) == ("regression", "1000.0 MiB", "1050.0 MiB", "+5%")
    assert rule("activation_bytes").compare(base, with_memory(activation_bytes=1000 * MIB + 1024)).verdict == "ok"
    assert rule("activation_bytes").compare(base, with_memory(activation_bytes=1000 * MIB + 4096)).verdict \
        == "regression"
    assert rule("optimizer_state_bytes").compare(base, with_memory(optimizer_state_bytes=400 * MIB)).verdict \
        == "improvement"


@pytest.mark.parametrize(("before", "after", "verdict"), [
    (1000 * MIB, 1100 * MIB, "ok"),          # +10 %: sampling jitter
    (1000 * MIB, 1500 * MIB, "regression"),  # +50 %
    (40 * MIB, 70 * MIB, "ok"),              # +75 % but 30 MiB: under 32 MiB + 25 % (42 MiB)
    (40 * MIB, 90 * MIB, "regression"),      # 50 MiB > 42 MiB
])
def test_peak_rss_is_tolerant(before, after, verdict):
    """Peak RSS: 25 % plus a 32 MiB absolute floor."""
    row = rule("peak_rss_bytes").compare(record(meters={"ram": {"peak_rss_bytes": before}}),
                                         record(meters={"ram": {"peak_rss_bytes": after}}))
    assert row.verdict == verdict


def test_missing_meters_are_not_compared():
    """Absent on one side: 'not compared', shown; absent on both or None: not compared, hidden."""
    row = rule("activation_bytes").compare(record(meters={}), with_memory())
    assert (row.verdict, row.note, row.noteworthy) == ("not compared", "absent in baseline", True)
    row = rule("peak_rss_bytes").compare(record(meters={"ram": {"peak_rss_bytes": None}}), record())
    assert (row.verdict, row.note, row.noteworthy) == ("not compared", "absent in baseline and current", False)
    assert rule("alloc_peak_bytes").compare(record(), record()).verdict == "not compared"


# --- overrides --------------------------------------------------------------------------------------------------

def test_override_rules_changes_matching_rules_only():
    """A pattern changes every matching rule, keeps order and the others; bad input is refused."""
    rules = override_rules(DEFAULT_RULES, "*_bytes", "rtol", "0.5")
    assert [r.metric for r in rules] == [r.metric for r in DEFAULT_RULES]
    assert all(r.rtol == 0.5 for r in rules if r.metric.endswith("_bytes"))
    assert next(r for r in rules if r.metric == "final_loss").rtol == 1e-6
    with pytest.raises(ValueError, match="no metric matches 'speed'"):
        override_rules(DEFAULT_RULES, "speed", "rtol", "1")
    with pytest.raises(ValueError, match="has no setting 'rtol'"):
        override_rules(DEFAULT_RULES, "time_per_epoch", "rtol", "1")
    with pytest.raises(ValueError, match="must be >= 0"):
        override_rules(DEFAULT_RULES, "final_loss", "atol", "-1")
    with pytest.raises(ValueError, match="ratio must be >= 1"):
        override_rules(DEFAULT_RULES, "time_per_epoch", "ratio", "0.5")


def test_rule_validation():
    """Negative tolerances, unknown units and a one-sample spread are refused at construction."""
    with pytest.raises(ValueError, match="unknown unit"):
        ToleranceRule(metric="x", source="summary.final_loss", rtol=0.1, unit="furlongs")
    with pytest.raises(ValueError, match="max_ratio must be >= ratio"):
        TimeRule(ratio=2.0)
