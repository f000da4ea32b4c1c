"""The gate's per-metric rules: each fires on a crafted regression and stays quiet within its noise."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradeff.gate.rules import (
    DEFAULT_RULES,
    LOOSE_ACCURACY_ATOL,
    LOOSE_LOSS_RTOL,
    MIB,
    Row,
    StatusRule,
    TimeRule,
    ToleranceRule,
    override_rules,
)
from gradeff.records.results import CellRecord, EpochRecord, Summary

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
    ("ok", "skipped", "regression", True),      # a broken capability check, a missing optional dependency
    ("ok", "interrupted", "regression", True),
    ("diverged", "ok", "regression", True),     # changed: better, until the baseline is refreshed
    ("skipped", "ok", "regression", True),
    ("diverged", "oom", "regression", True),
    ("skipped", "error", "regression", True),
    ("ok", "ok", "ok", False),
    ("skipped", "skipped", "ok", False),
    ("diverged", "diverged", "ok", False),
])
def test_status_transitions(before, after, verdict, noteworthy):
    """Golden: any change of status regresses, shown with the current run's reason (or "changed: better" into
    ok); an unchanged status is ok and not shown."""
    row = StatusRule().compare(record(status=before), record(status=after, detail="why\ntraceback"))
    assert (row.verdict, row.noteworthy) == (verdict, noteworthy)
    if verdict == "regression":
        assert row.note == ("changed: better" if after == "ok" else "why")
        assert row.change == f"{before} → {after}"


def test_metrics_of_a_failed_cell_are_not_compared():
    """ok → diverged: the loss is 'not compared (status: current diverged)', not a second regression."""
    row = rule("final_loss").compare(record(), record(status="diverged", losses=[9.0, 9.0, 9.0]))
    assert row.verdict == "not compared" and row.note == "status: current diverged" and not row.noteworthy


# --- loss -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("delta", "verdict", "note"), [
    (1e-6, "ok", "tolerance ±1.6e-06"), (-1e-6, "ok", "tolerance ±1.6e-06"),
    (0.01, "regression", "tolerance ±1.6e-06"), (-0.01, "regression", "changed: better; tolerance ±1.6e-06")])
def test_final_loss_tolerance(delta, verdict, note):
    """Final loss 1.5: +1e-6 is ok (deterministic CPU rerun); a 1 % change either way regresses (golden: a lower
    loss is the code's behaviour changing too, noted "changed: better")."""
    row = rule("final_loss").compare(record(losses=[2.0, 1.75, 1.5]), record(losses=[2.0, 1.75, 1.5 * (1 + delta)]))
    assert (row.verdict, row.note) == (verdict, note)


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
    # Counted from tensors: golden, so less memory is a change of the code's behaviour too.
    assert rule("optimizer_state_bytes").compare(base, with_memory(optimizer_state_bytes=400 * MIB)).verdict \
        == "regression"


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
    """A pattern changes every matching rule, keeps order and the others; bad input is refused, listing what is
    valid (``none`` for the status rule, which has no setting)."""
    rules = override_rules(DEFAULT_RULES, "*_bytes", "rtol", "0.5")
    assert [r.metric for r in rules] == [r.metric for r in DEFAULT_RULES]
    assert all(r.rtol == 0.5 for r in rules if r.metric.endswith("_bytes"))
    assert next(r for r in rules if r.metric == "final_loss").rtol == 1e-6
    with pytest.raises(ValueError, match="no metric matches 'speed'; metrics: status, final_loss, mean_loss, "
                                         "heldout_loss, heldout_accuracy, time_per_epoch, parameter_bytes"):
        override_rules(DEFAULT_RULES, "speed", "rtol", "1")
    with pytest.raises(ValueError, match="has no setting 'rtol'; settings: ratio, noise_sigmas, max_ratio, "
                                         "drop_first_from$"):
        override_rules(DEFAULT_RULES, "time_per_epoch", "rtol", "1")
    with pytest.raises(ValueError, match="status has no setting 'rtol'; settings: none$"):
        override_rules(DEFAULT_RULES, "status", "rtol", "1")
    with pytest.raises(ValueError, match="must be >= 0"):
        override_rules(DEFAULT_RULES, "final_loss", "atol", "-1")
    with pytest.raises(ValueError, match="ratio must be >= 1"):
        override_rules(DEFAULT_RULES, "time_per_epoch", "ratio", "0.5")


def test_rule_validation():
    """Negative tolerances, unknown units and a one-sample spread are refused at construction."""
    with pytest.raises(ValueError, match="unknown unit 'furlongs'; valid units: loss, bytes$"):
        ToleranceRule(metric="x", source="summary.final_loss", rtol=0.1, unit="furlongs")
    with pytest.raises(ValueError, match="max_ratio must be >= ratio"):
        TimeRule(ratio=2.0)


# --- boundaries, defaults and whole rows -------------------------------------------------------------------------
# Each tolerance and limit is pinned from both sides, and each kind of row is checked whole: a rule that names the
# wrong cell or metric, or drops a value, misleads the table as surely as a wrong verdict.

def bytes_verdict(metric: str, before: float, after: float) -> str:
    """Verdict of the default rule of a memory ``metric`` on two byte counts (read from its own meter)."""
    source = rule(metric).source.split(".")
    meter = {source[1]: {source[2]: before}}, {source[1]: {source[2]: after}}
    return rule(metric).compare(record(meters=meter[0]), record(meters=meter[1])).verdict


def with_summary(**figures) -> CellRecord:
    """A record whose summary has ``figures`` replaced."""
    base = record()
    return record(summary=replace(base.summary, **figures))


@pytest.mark.parametrize(("metric", "before", "after", "verdict"), [
    ("alloc_peak_bytes", 4 * MIB, 5 * MIB, "ok"),                        # +25 % exactly: inside
    ("alloc_peak_bytes", 4 * MIB, 5 * MIB + 1, "regression"),            # a byte beyond
    ("alloc_peak_bytes", 4 * MIB, 3 * MIB - 1, "improvement"),
    ("alloc_peak_bytes", 40 * MIB, 70 * MIB, "regression"),              # no absolute floor
    ("mem_used_peak_bytes", 40 * MIB, 82 * MIB, "ok"),                   # 32 MiB + 25 % of 40 MiB
    ("mem_used_peak_bytes", 40 * MIB, 82 * MIB + 1, "regression"),
    ("peak_rss_bytes", 40 * MIB, 82 * MIB, "ok"),
    ("peak_rss_bytes", 40 * MIB, 82 * MIB + 1, "regression"),
    ("peak_rss_bytes", 40 * MIB, 0, "ok"),                               # 40 MiB less: under 42 MiB
    ("peak_bytes", 2**30, 2**30 + 1073, "ok"),                           # 1e-6 of 1 GiB is 1073.7 bytes
    ("peak_bytes", 2**30, 2**30 + 1074, "regression"),
    ("gradient_bytes", 2**30, 2**30 - 1074, "regression"),              # golden: either way
    ("trainable_parameter_bytes", 2**30, 2**30 + 1074, "regression"),
    ("parameter_bytes", 2**30, 2**30 + 1074, "regression"),
    ("optimizer_state_bytes", 0, 0, "ok"),                               # SGD's empty state, unchanged
    ("optimizer_state_bytes", 0, 1, "regression"),                       # zero tolerance at zero bytes
])
def test_memory_tolerances_on_both_sides(metric, before, after, verdict):
    """Each memory rule's tolerance, from its own meter: the GPU rules 25 % (NVML's with the 32 MiB floor, the
    allocator's without), the counted figures 1e-6 — a difference equal to the tolerance is still ok."""
    assert bytes_verdict(metric, before, after) == verdict


@pytest.mark.parametrize(("before", "after", "verdict"), [
    (0.0, 0.9e-7, "ok"), (0.0, 1.1e-7, "regression"), (0.0, -1.1e-7, "regression"),    # atol 1e-7
    (1.0, 1 + 1.05e-6, "ok"), (1.0, 1 + 1.15e-6, "regression"),                        # + rtol 1e-6
    (1.0, 1 - 1.05e-6, "ok"), (1.0, 1 - 1.15e-6, "regression"), (1.0, 1.0, "ok"),
])
def test_loss_tolerance_is_atol_plus_rtol(before, after, verdict):
    """The loss rules allow 1e-7 plus 1e-6 of the baseline: both constants pinned from both sides, on every
    loss metric."""
    for metric, field in (("final_loss", "final_loss"), ("mean_loss", "mean_loss"),
                          ("heldout_loss", "final_heldout_loss")):
        row = rule(metric).compare(with_summary(**{field: before}), with_summary(**{field: after}))
        assert row.verdict == verdict, metric


def test_loose_tolerances_are_five_percent_and_two_points():
    """``--loose`` (the gate's GPU setting): a loss 4.9 % off passes and 5.1 % fails; held-out accuracy may move
    1.9 points but not 2.1, where the default flags a single sample (1/256)."""
    loose = override_rules(override_rules(DEFAULT_RULES, "*_loss", "rtol", str(LOOSE_LOSS_RTOL)),
                           "heldout_accuracy", "atol", str(LOOSE_ACCURACY_ATOL))

    def verdict(rules, metric, field, before, after):
        ruled = next(r for r in rules if r.metric == metric)
        return ruled.compare(with_summary(**{field: before}), with_summary(**{field: after})).verdict

    assert verdict(loose, "final_loss", "final_loss", 1.5, 1.5 * 1.049) == "ok"
    assert verdict(loose, "final_loss", "final_loss", 1.5, 1.5 * 1.051) == "regression"
    assert verdict(loose, "heldout_accuracy", "final_heldout_accuracy", 0.5, 0.481) == "ok"
    assert verdict(loose, "heldout_accuracy", "final_heldout_accuracy", 0.5, 0.479) == "regression"
    assert verdict(DEFAULT_RULES, "heldout_accuracy", "final_heldout_accuracy", 0.5, 0.5 - 1 / 256) == "regression"
    # The default: 1e-4 absolute, nothing relative.
    assert verdict(DEFAULT_RULES, "heldout_accuracy", "final_heldout_accuracy", 0.5, 0.5 - 0.9e-4) == "ok"
    assert verdict(DEFAULT_RULES, "heldout_accuracy", "final_heldout_accuracy", 0.5, 0.5 - 1.1e-4) == "regression"
    assert verdict(DEFAULT_RULES, "heldout_accuracy", "final_heldout_accuracy", 1.0, 1.0 - 1.005e-4) == "regression"


@pytest.mark.parametrize(("before", "after", "note"), [
    (0.5, 0.75, "changed: better; tolerance ±0.0001"), (0.5, 0.25, "tolerance ±0.0001"),
    (0.0, 1.0, "changed: better; tolerance ±0.0001"),
])
def test_higher_accuracy_is_the_better_change(before, after, note):
    """Held-out accuracy is the one metric where up is better: a rise is noted "changed: better", and is still a
    regression of a deterministic figure."""
    row = rule("heldout_accuracy").compare(with_summary(final_heldout_accuracy=before),
                                           with_summary(final_heldout_accuracy=after))
    assert (row.verdict, row.note) == ("regression", note)


def test_one_sided_figures_still_improve():
    """Sampled figures stay one-sided: a lower RSS peak beyond the tolerance is an improvement, not a regression."""
    row = rule("peak_rss_bytes").compare(record(meters={"ram": {"peak_rss_bytes": 1000 * MIB}}),
                                         record(meters={"ram": {"peak_rss_bytes": 500 * MIB}}))
    assert (row.verdict, row.note) == ("improvement", "tolerance ±282.0 MiB")
    assert not rule("peak_rss_bytes").two_sided and rule("final_loss").two_sided


def test_a_tolerance_basis_is_named_in_the_note():
    """A rule given a basis (a band) names it after the tolerance."""
    banded = replace(rule("final_loss"), rtol=0.1, basis="band: 4 × 0.025")
    row = banded.compare(with_summary(final_loss=1.0), with_summary(final_loss=1.2))
    assert (row.verdict, row.note) == ("regression", "tolerance ±0.1 (band: 4 × 0.025)")
    assert banded.compare(with_summary(final_loss=1.0), with_summary(final_loss=0.95)).verdict == "ok"


def test_tolerance_row_whole():
    """A tolerance row: both values in their units, the change in %, the ratio, the tolerance it was judged by;
    shown when not ok. A zero baseline has no ratio, and its change is absolute."""
    row = rule("activation_bytes").compare(with_memory(activation_bytes=4 * MIB), with_memory(activation_bytes=5 * MIB))
    assert row == Row(cell="llm-adam-standard", metric="activation_bytes", before="4.0 MiB", after="5.0 MiB",
                      change="+25%", verdict="regression", note="tolerance ±4 B", ratio=1.25, noteworthy=True)
    row = rule("peak_rss_bytes").compare(record(meters={"ram": {"peak_rss_bytes": 40 * MIB}}),
                                         record(meters={"ram": {"peak_rss_bytes": 41 * MIB}}))
    assert row == Row(cell="llm-adam-standard", metric="peak_rss_bytes", before="40.0 MiB", after="41.0 MiB",
                      change="+2.5%", verdict="ok", note="tolerance ±42.0 MiB", ratio=41 / 40, noteworthy=False)
    row = rule("optimizer_state_bytes").compare(with_memory(optimizer_state_bytes=0),
                                                with_memory(optimizer_state_bytes=1024))
    assert row == Row(cell="llm-adam-standard", metric="optimizer_state_bytes", before="0 B", after="1.0 KiB",
                      change="+1.02e+03", verdict="regression", note="tolerance ±0 B", ratio=None, noteworthy=True)
    row = rule("final_loss").compare(with_summary(final_loss=1.234568), with_summary(final_loss=1.234568 / 2))
    assert row == Row(cell="llm-adam-standard", metric="final_loss", before="1.23457", after="0.617284",
                      change="-50%", verdict="regression", note="changed: better; tolerance ±1.33e-06", ratio=0.5,
                      noteworthy=True)
    # A rule without atol is purely relative: rtol 0 flags any change.
    exact = ToleranceRule(metric="x", source="summary.final_loss", rtol=0.0)
    assert exact.compare(with_summary(final_loss=1.0), with_summary(final_loss=1.0 + 1e-12)).verdict == "regression"


@pytest.mark.parametrize(("n", "shown"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (MIB - 1, "1024.0 KiB"),
                                          (MIB, "1.0 MiB"), (3 * 2**30, "3072.0 MiB"), (-1024, "-1.0 KiB")])
def test_bytes_are_shown_in_the_largest_unit_up_to_mib(n, shown):
    """Byte counts: MiB from 1 MiB on (also for GiB figures), KiB from 1 KiB, else bytes."""
    assert rule("peak_bytes").compare(with_memory(peak_bytes=n), with_memory(peak_bytes=n)).before == shown


def test_a_figure_the_record_does_not_have_reads_as_absent():
    """A source naming a summary field or meter figure that is not there, or a meter that is not a mapping, reads
    as absent rather than failing."""
    odd = ToleranceRule(metric="x", source="summary.no_such_figure", rtol=0.1)
    assert odd.compare(record(), record()).note == "absent in baseline and current"
    row = rule("peak_rss_bytes").compare(record(meters={"ram": 5}), record(meters={"ram": {"peak_rss_bytes": MIB}}))
    assert (row.verdict, row.before, row.after, row.note) == ("not compared", "", "1.0 MiB", "absent in baseline")


def test_absent_and_failed_rows_whole():
    """Rows that compare nothing still name their cell and metric, show what is there and say why."""
    row = rule("activation_bytes").compare(with_memory(), record(meters={}))
    assert row == Row(cell="llm-adam-standard", metric="activation_bytes", before="1000.0 MiB", after="",
                      change="", verdict="not compared", note="absent in current", ratio=None, noteworthy=True)
    for metric in ("final_loss", "time_per_epoch"):
        row = rule(metric).compare(record(status="oom"), record(status="error"))
        assert row == Row(cell="llm-adam-standard", metric=metric, before="", after="", change="",
                          verdict="not compared", note="status: baseline oom, current error", ratio=None,
                          noteworthy=False)
        assert rule(metric).compare(record(status="skipped"), record()).note == "status: baseline skipped"


def test_time_of_a_cell_without_epochs_is_absent():
    """A cell with no completed epoch on one side has no time to compare: not compared, shown, with the other
    side's epochs summarised."""
    row = TimeRule().compare(record(seconds=()), record(seconds=[1.0, 1.5]))
    assert row == Row(cell="llm-adam-standard", metric="time_per_epoch", before="", after="1.25 s ±0.35 (n=2)",
                      change="", verdict="not compared", note="absent in baseline", noteworthy=True)
    row = TimeRule().compare(record(seconds=[2.0]), record(seconds=()))
    assert (row.before, row.after, row.note) == ("2 s (n=1)", "", "absent in current")


def test_a_baseline_whose_clock_did_not_tick_is_not_compared():
    """A baseline epoch of 0 s gives no ratio: not compared (not a division by zero), and shown."""
    row = TimeRule().compare(record(seconds=[0.0, 1.0, 1.0]), record(seconds=[1.0, 1.0, 1.0]))
    assert row == Row(cell="llm-adam-standard", metric="time_per_epoch", before="0.667 s ±0.58 (n=3)",
                      after="1 s ±0 (n=3)", change="", verdict="not compared", note="baseline epochs took 0 s",
                      noteworthy=True)


def test_a_current_run_whose_clock_did_not_tick_is_an_improvement():
    """Current epochs of 0 s are infinitely faster: an improvement, never a division by zero."""
    row = TimeRule().compare(record(seconds=[1.0, 1.0, 1.0]), record(seconds=[0.0, 0.0, 0.0]))
    assert (row.verdict, row.ratio, row.change) == ("improvement", 0.0, "×0")


def test_time_rows_whole():
    """A slowdown row and a speed-up row, each with the statistic it was judged by."""
    row = TimeRule().compare(record(seconds=[1.0, 1.0, 1.0]), record(seconds=[2.0, 3.0, 3.0]))
    assert row == Row(cell="llm-adam-standard", metric="time_per_epoch", before="1 s ±0 (n=3)",
                      after="2.67 s ±0.58 (n=3)", change="×2", verdict="regression", ratio=2.0, noteworthy=True,
                      note="best epoch 2 s vs the baseline's median 1 s, threshold ×1.5")
    # A speed-up is shown as the current median over the baseline's best (×0.5), its mirror image; the ratio stays
    # best over median (1/3).
    row = TimeRule().compare(record(seconds=[2.0, 3.0, 3.0]), record(seconds=[1.0, 1.0, 1.0]))
    assert row == Row(cell="llm-adam-standard", metric="time_per_epoch", before="2.67 s ±0.58 (n=3)",
                      after="1 s ±0 (n=3)", change="×0.5", verdict="improvement", ratio=1 / 3, noteworthy=True,
                      note="baseline's best epoch 2 s vs median 1 s now, threshold ×1.5")


@pytest.mark.parametrize(("before", "after", "verdict"), [
    ([1, 1, 1], [1.5, 1.5, 1.5], "ok"),              # best / median exactly the 1.5 floor
    ([1.5, 1.5, 1.5], [1, 1, 1], "ok"),              # the mirror image
    ([1, 2, 2], [1.9, 1.9, 1.9], "ok"),              # best / best exactly max_ratio 1.9
    ([1, 2, 2], [1.91, 1.91, 1.91], "regression"),   # beyond it
    ([1.9, 1.9, 1.9], [1, 2, 2], "ok"),              # the mirror image
    ([1.91, 1.91, 1.91], [1, 2, 2], "improvement"),
    ([2, 2, 2], [1.2, 1.3, 1.3], "improvement"),     # baseline's best / current median 1.54: beyond the floor
])
def test_time_thresholds_on_both_sides(before, after, verdict):
    """A ratio equal to a threshold is not beyond it, in either direction."""
    assert time_verdict(before, after) == verdict


@pytest.mark.parametrize(("before", "threshold"), [
    ([1.0], 1.5),                                     # one epoch: no spread
    ([0.0, 0.0], 1.5),                                # no time at all: no spread
    ([1.0, 1.5], 1 + 2 * (0.5 / 2**0.5) / 1.25),      # two epochs already give one
    ([0.5, 0.9, 0.7], 1 + 2 * 0.2 / 0.7),             # spread is relative: sub-second epochs too
    ([1.0, 1.2, 1.4], 1.5),                           # 1 + 2 × 0.167 is under the floor
])
def test_threshold_grows_with_the_baselines_spread(before, threshold):
    """threshold = min(max(1.5, 1 + 2 × stdev / mean), 1.9), the spread of the baseline's epochs."""
    assert TimeRule().threshold(before) == pytest.approx(threshold)


def test_threshold_counts_noise_sigmas_of_spread():
    """Spread 0.286: one sigma (1.29) stays under the floor, two give ×1.57, three ×1.86, four stop at ×1.9."""
    spread = 0.2 / 0.7
    assert [TimeRule(noise_sigmas=k).threshold([0.5, 0.9, 0.7]) for k in (1, 2, 3, 4)] == \
        pytest.approx([1.5, 1 + 2 * spread, 1 + 3 * spread, 1.9])


@pytest.mark.parametrize(("scale"), [1.0, 0.5])
def test_a_slowdown_or_speedup_within_noise_is_shown_from_the_floor_on(scale):
    """Inside a noisy baseline's allowance, a change beyond the 1.5 floor is shown; one at the floor is not.
    Baseline [0.9, 1.0, 1.7] (threshold ×1.73, median 1): best epochs of 1.5 and 1.6 are ok, the second shown;
    baseline [1.6, 2, 3] (threshold ×1.66) against a current median of 1.06 (×1.51) and 1.0667 (×1.4999…)."""
    def row(before, after):
        return TimeRule().compare(record(seconds=[s * scale for s in before]),
                                  record(seconds=[s * scale for s in after]))

    assert (row([0.9, 1.0, 1.7], [1.5, 1.5, 1.5]).verdict, row([0.9, 1.0, 1.7], [1.5, 1.5, 1.5]).noteworthy) \
        == ("ok", False)
    assert row([0.9, 1.0, 1.7], [1.6, 1.6, 1.6]).noteworthy
    assert (row([1.6, 2.0, 3.0], [1.06, 1.06, 1.06]).verdict, row([1.6, 2.0, 3.0], [1.06, 1.06, 1.06]).noteworthy) \
        == ("ok", True)
    assert not row([1.6, 2.0, 3.0], [1.0667, 1.0667, 1.0667]).noteworthy


def test_a_speedup_exactly_at_the_floor_is_not_shown():
    """Baseline [1.5, 3, 3.5] (threshold ×1.76) against a current median of 1: ×1.5 exactly, ok and hidden."""
    row = TimeRule().compare(record(seconds=[1.5, 3.0, 3.5]), record(seconds=[1.0, 1.0, 1.0]))
    assert (row.verdict, row.noteworthy) == ("ok", False)


@pytest.mark.parametrize(("settings", "valid"), [
    ({"ratio": 1.0}, True), ({"ratio": 0.99}, False),
    ({"ratio": 1.5, "max_ratio": 1.5}, True), ({"ratio": 1.5, "max_ratio": 1.49}, False),
    ({"noise_sigmas": 0.0}, True), ({"noise_sigmas": -0.1}, False),
])
def test_time_rule_limits_on_both_sides(settings, valid):
    """ratio ≥ 1, max_ratio ≥ ratio and noise_sigmas ≥ 0 are accepted at the limit and refused beyond it."""
    if valid:
        assert TimeRule(**settings).ratio == settings["ratio"] if "ratio" in settings else TimeRule(**settings)
    else:
        with pytest.raises(ValueError, match=f"{next(iter(settings)) if len(settings) == 1 else 'max_ratio'} must be"):
            TimeRule(**settings)


@pytest.mark.parametrize(("key", "value", "valid"), [
    ("rtol", "0", True), ("atol", "0", True), ("rtol", "-1e-9", False), ("atol", "-1e-9", False),
])
def test_tolerance_limits_on_both_sides(key, value, valid):
    """A tolerance of zero is valid (an exact match: ``--rule final_loss:rtol=0``); a negative one is refused."""
    if valid:
        (final,) = [r for r in override_rules(DEFAULT_RULES, "final_loss", key, value) if r.metric == "final_loss"]
        assert getattr(final, key) == 0.0
        assert ToleranceRule(metric="x", source="summary.final_loss", **{"rtol": 0.0, key: 0.0}).compare(
            record(), record()).verdict == "ok"
    else:
        with pytest.raises(ValueError, match="final_loss:.*rtol and atol must be >= 0"):
            override_rules(DEFAULT_RULES, "final_loss", key, value)


def test_integer_settings_take_integers():
    """``--rule time_per_epoch:drop_first_from=3`` sets an int (epoch 0 then dropped from three epochs); a
    fractional value for it is refused, naming the setting."""
    (time,) = [r for r in override_rules(DEFAULT_RULES, "time_per_epoch", "drop_first_from", "3")
               if r.metric == "time_per_epoch"]
    assert time.drop_first_from == 3 and isinstance(time.drop_first_from, int)
    assert time.samples(record(seconds=[9.0, 1.0, 2.0])) == [1.0, 2.0]
    with pytest.raises(ValueError, match="time_per_epoch:drop_first_from=3.5"):
        override_rules(DEFAULT_RULES, "time_per_epoch", "drop_first_from", "3.5")


@pytest.mark.parametrize(("before", "after", "change", "note"), [
    ("ok", "skipped", "ok → skipped", "needs a GPU"),      # the reason of a new skip is shown
    ("skipped", "skipped", "", ""),                        # an old one is not
    ("ok", "ok", "", ""),
    ("ok", "interrupted", "ok → interrupted", "needs a GPU"),
    ("error", "ok", "error → ok", "changed: better"),
    ("ok", "oom", "ok → oom", "needs a GPU"),
])
def test_status_rows_whole(before, after, change, note):
    """The status row names the cell, shows both statuses and the change, and the first line of the reason for a
    new failure or skip."""
    row = StatusRule().compare(record(status=before, detail="old reason"),
                               record(status=after, detail="needs a GPU\nmore" if after != "ok" else ""))
    assert (row.cell, row.metric, row.before, row.after, row.change, row.note) == \
        ("llm-adam-standard", "status", before, after, change, note)


def test_a_long_reason_is_cut_at_100_characters():
    """The note keeps the first 100 characters of the reason's first line."""
    row = StatusRule().compare(record(), record(status="error", detail="x" * 150 + "\nTraceback"))
    assert row.note == "x" * 100
