"""Exact on the baseline's numerics environment, within a measured band elsewhere (gradeff.gate.portability)."""

import math
from dataclasses import replace

import pytest

from gradeff.gate.compare import main
from gradeff.gate.compare_table import format_table, rules_line
from gradeff.gate.comparison import compare_records
from gradeff.gate.portability import (
    NUMERICS_KEYS,
    PERTURBATIONS,
    PROBE_KEYS,
    Band,
    Sensitivity,
    deviation,
    memory_deviation,
    numerics,
    numerics_differences,
    perturbations,
    perturbed_path,
    same_numerics,
    sensitivities,
)
from gradeff.records.results import EpochRecord, Summary
from gradeff.records.store import append_record
from tests.gate.test_compare_cli import record

HERE = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_id": "GenuineIntel family 6 model 207 stepping 2",
        "cpu_capability": "AVX512", "kernel_env": None, "torch_threads": 1, "cpu_count": 2, "device": "cpu",
        "device_name": "Intel(R) Xeon(R) Processor", "torch": "2.13.0+cpu", "transformers": "5.24.0"}
THERE = HERE | {"cpu": "AMD EPYC 9R14", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1",
                "device_name": "AMD EPYC 9R14"}
TWO_THREADS = HERE | {"torch_threads": 2}
AVX2 = HERE | {"cpu_capability": "AVX2", "kernel_env": "ATEN_CPU_CAPABILITY=avx2"}


def run(cell="llm-cgd-standard", environment=HERE, scale=1.0, **overrides):
    """A record of ``cell`` whose losses are the reference ones times ``scale``."""
    losses = [2.0 * scale, 1.75 * scale, 1.5 * scale]
    epochs = tuple(EpochRecord(epoch=i, loss=loss, seconds=1.0, optimizer_steps=8, closure_calls=8, samples=64,
                               targets=64, heldout_loss=loss + 0.1, heldout_accuracy=0.5)
                   for i, loss in enumerate(losses))
    return record(cell, **({"environment": environment, "epochs": epochs, "summary": Summary.of(list(epochs), 5.0),
                            "code_version": "0.1+abc"} | overrides))


# --- the numerics environment -------------------------------------------------------------------------------

def test_numerics_reads_every_key_and_only_the_device_kind():
    """Every NUMERICS_KEYS value, None where absent; cuda:0 and cuda:1 are one device kind."""
    assert numerics(run()) == ("cpu", *(HERE[key] for key in NUMERICS_KEYS))
    assert numerics(run(environment={})) == ("cpu", *(None,) * len(NUMERICS_KEYS))
    assert numerics(run(environment=HERE | {"device": "cuda:1"}))[1 + NUMERICS_KEYS.index("device")] == "cuda"
    on_gpu = [numerics(run(environment=HERE | {"device": device})) for device in ("cuda:0", "cuda:1")]
    assert on_gpu[0] == on_gpu[1]
    assert numerics(run(environment=HERE | {"cpu_count": 64})) == numerics(run())  # cores: not a numerics key


PROBE, OTHER_PROBE = "v1:45962c56ddf95e04e1f61dba", "v1:80be77a6cc7caaaca172c2ba"


def test_with_a_probe_the_probe_decides_whatever_the_cpu_is_called():
    """Two CPUs of other names and instruction sets whose probes agree are one numerics environment; one CPU whose
    probe changed (another MKL, another kernel path) is not. A GPU's name stays a key (the probe runs on the CPU)."""
    here, there = run(environment=HERE | {"numerics_probe": PROBE}), run(environment=THERE | {"numerics_probe": PROBE})
    assert numerics(here) == ("probe", *(HERE[key] if key != "numerics_probe" else PROBE for key in PROBE_KEYS))
    assert same_numerics(here, there) and numerics_differences(here, there) == {}
    changed = run(environment=HERE | {"numerics_probe": OTHER_PROBE})
    assert not same_numerics(here, changed)
    assert numerics_differences(here, changed) == {"numerics_probe": (PROBE, OTHER_PROBE)}
    assert not same_numerics(here, run(environment=THERE | {"numerics_probe": PROBE, "torch_threads": 2}))
    gpus = [run(environment=HERE | {"numerics_probe": PROBE, "device": "cuda:0", "device_name": name})
            for name in ("NVIDIA H100", "NVIDIA L4")]
    assert not same_numerics(*gpus)


def test_a_record_without_a_probe_falls_back_to_the_cpu_keys():
    """A baseline recorded before probes meets a current run with one: the CPU's keys decide, as before."""
    old, probed = run(), run(environment=HERE | {"numerics_probe": PROBE})
    assert same_numerics(old, probed)
    assert not same_numerics(old, run(environment=THERE | {"numerics_probe": PROBE}))
    assert numerics_differences(old, run(environment=AVX2 | {"numerics_probe": PROBE})) == {
        "cpu_capability": ("AVX512", "AVX2"), "kernel_env": (None, "ATEN_CPU_CAPABILITY=avx2")}


def test_numerics_differences_name_each_key():
    assert numerics_differences(run(), run(environment=AVX2)) == {
        "cpu_capability": ("AVX512", "AVX2"), "kernel_env": (None, "ATEN_CPU_CAPABILITY=avx2")}
    assert numerics_differences(run(), run()) == {}


@pytest.mark.parametrize(("baseline", "perturbed"), [
    ("baselines/tiny-cpu.jsonl", "baselines/tiny-cpu.perturbed.jsonl"),
    ("b.json", "b.json.perturbed.jsonl"),
])
def test_perturbed_path_is_beside_the_baseline(baseline, perturbed):
    assert str(perturbed_path(baseline)) == perturbed


def test_perturbations_keep_the_last_run_of_each_environment():
    """Grouped by cell and seed; one environment recorded twice keeps its last record, in first-seen order."""
    first, again, other = run(environment=TWO_THREADS), run(environment=TWO_THREADS, scale=1.1), run(environment=AVX2)
    grouped = perturbations([first, other, again, run("llm-cgd-accum"), run(seed=1)])
    assert grouped[("llm-cgd-standard", 0)] == [again, other]
    assert list(grouped) == [("llm-cgd-standard", 0), ("llm-cgd-accum", 0), ("llm-cgd-standard", 1)]


# --- sensitivity ----------------------------------------------------------------------------------------------

def lora(record):
    """The record as its cell's LoRA variant (another method: other dynamics)."""
    return replace(record, cell=f"{record.cell}-lora", method="lora")


def test_deviation_is_the_largest_relative_change_of_any_loss():
    """Final, mean, held-out and every epoch's losses count; a failed run or a zero figure gives nothing to measure."""
    assert deviation(run(), run()) == 0.0
    assert deviation(run(), run(scale=1.02)) == pytest.approx(0.02)
    assert deviation(run(), run(scale=0.97)) == pytest.approx(0.03)
    moved = replace(run(), epochs=(replace(run().epochs[0], heldout_loss=2.1 * 1.5), *run().epochs[1:]))
    assert deviation(run(), moved) == pytest.approx(0.5)  # epoch 0's held-out loss alone
    assert deviation(run(), run(status="diverged")) is None and deviation(run(status="oom"), run()) is None
    empty = replace(run(), epochs=(), summary=Summary.of([], 1.0))
    assert deviation(empty, empty) is None
    zero = replace(run(), epochs=(), summary=replace(Summary.of([], 1.0), final_loss=0.0, mean_loss=2.0))
    assert deviation(zero, replace(zero, summary=replace(zero.summary, final_loss=1.0, mean_loss=2.5))) == 0.25


def test_memory_deviation_measures_only_figures_both_ok_runs_counted():
    """The largest relative change of a counted figure; a failed run, a figure absent on either side or zero in the
    reference (an SGD cell's optimizer state), and a record without meters give nothing to measure, never a crash."""
    def counted(**figures):
        return {"memory": figures}

    reference = run(meters=counted(peak_bytes=1000, activation_bytes=400, optimizer_state_bytes=0))
    assert memory_deviation(reference, run(meters=counted(peak_bytes=950, activation_bytes=440,
                                                          optimizer_state_bytes=0))) == pytest.approx(0.1)
    assert memory_deviation(reference, run(meters=counted(peak_bytes=1000, optimizer_state_bytes=64))) == 0.0
    assert memory_deviation(run(meters=counted(optimizer_state_bytes=0)),
                            run(meters=counted(optimizer_state_bytes=64))) is None
    assert memory_deviation(run(meters=counted(peak_bytes=None)), run(meters=counted(peak_bytes=1000))) is None
    assert memory_deviation(reference, run(status="diverged", meters=counted(peak_bytes=2000))) is None
    assert memory_deviation(run(status="oom", meters=counted(peak_bytes=2000)), reference) is None
    for meters in (None, [], {"memory": None}):  # a results file someone else wrote
        assert memory_deviation(run(meters=meters), reference) is None


def test_sensitivity_is_pooled_over_the_optimizers_cells():
    """A cell a perturbation did not reach takes the largest change the perturbation runs made to any cell of its
    optimizer (other strategies, other models); another optimizer, method or seed is pooled apart."""
    baseline = [run("llm-cgd-standard"), run("llm-cgd-accum"), run("llm-adam-standard"), run("vit-cgd-standard"),
                run("llm-cgd-standard", seed=1), lora(run("vit-cgd-standard")),
                run("vit-cgd-accum", seed=2)]
    perturbed = [run("llm-cgd-standard", TWO_THREADS, scale=1.03), run("llm-cgd-standard", AVX2, scale=0.99),
                 run("llm-cgd-accum", TWO_THREADS), run("llm-adam-standard", TWO_THREADS, scale=1 + 1e-7),
                 run("vit-cgd-standard", TWO_THREADS, status="diverged"), run("llm-cgd-standard", AVX2, seed=1),
                 lora(run("vit-cgd-standard", TWO_THREADS, scale=1.5)),
                 run("vit-cgd-accum", TWO_THREADS, seed=2, scale=1.2)]
    measured = sensitivities(baseline, perturbed)
    assert measured[("llm-cgd-accum", 0)] == Sensitivity(pytest.approx(0.03), 3)
    assert measured[("llm-cgd-standard", 0)] == measured[("vit-cgd-standard", 0)] == measured[("llm-cgd-accum", 0)]
    assert measured[("llm-adam-standard", 0)] == Sensitivity(pytest.approx(1e-7), 1)
    assert measured[("llm-cgd-standard", 1)] == Sensitivity(0.0, 1)
    assert measured[("vit-cgd-accum", 2)] == Sensitivity(pytest.approx(0.2), 1)
    assert measured[("vit-cgd-standard-lora", 0)] == Sensitivity(pytest.approx(0.5), 1)


def test_a_failed_perturbation_run_measures_nothing():
    """A cell whose only perturbation runs failed, with no other cell of its optimizer measured, has no sensitivity."""
    measured = sensitivities([run("vit-cgd-standard")], [run("vit-cgd-standard", TWO_THREADS, status="diverged")])
    assert measured == {}


# --- the band -------------------------------------------------------------------------------------------------

def test_band_defaults_and_arithmetic():
    band = Band()
    assert (band.factor, band.floor, band.accuracy_floor) == (3.0, 1e-5, 1e-3)
    assert band.loss_rtol(0.0) == 1e-5 and band.loss_rtol(3e-6) == 1e-5 and band.loss_rtol(0.01) == 0.03
    assert band.accuracy_atol(0.0) == 1e-3 and band.accuracy_atol(0.01) == 0.03
    assert Band(factor=2, floor=0.1).loss_rtol(0.04) == 0.1
    assert Band(factor=2, accuracy_floor=0.1).accuracy_atol(0.04) == 0.1
    assert band.memory_rtol(0.0) == 0.0 and band.memory_rtol(0.05) == pytest.approx(0.15)
    assert band.rule() == ("relative tolerance max(1e-05, 3 × the largest relative change the perturbation runs made "
                           "to the losses of a cell of the same optimizer); held-out accuracy max(0.001, the same "
                           "number) absolute; counted memory 3 × the largest relative change those runs made to it "
                           "(exact where they never moved it)")


@pytest.mark.parametrize("setting", ["factor", "floor", "accuracy_floor"])
@pytest.mark.parametrize("value", [-1e-9, math.inf, math.nan])
def test_band_refuses_negative_or_non_finite_settings(setting, value):
    with pytest.raises(ValueError, match=f"band {setting} must be a finite number >= 0"):
        Band(**{setting: value})
    Band(**{setting: 0.0})


def test_perturbations_recorded_beside_a_baseline():
    """Two threads, and ATen's AVX2 and scalar kernels with MKL's and oneDNN's older paths: one thread each but
    the first."""
    assert [(p.name, p.threads) for p in PERTURBATIONS] == [("two threads", 2), ("AVX2 kernels", 1),
                                                          ("scalar kernels", 1)]
    assert dict(PERTURBATIONS[2].env) == {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                                          "ONEDNN_MAX_CPU_ISA": "SSE41"}


# --- the gate with perturbation runs ---------------------------------------------------------------------------

def verdicts(comparison, metric="final_loss"):
    return {row.cell: row.verdict for row in comparison.rows if row.metric == metric}


def test_the_same_environment_is_exact():
    """Same CPU, threads and versions: a 1e-5 change is a regression, however wide the band would be elsewhere."""
    perturbed = [run(environment=TWO_THREADS, scale=1.05)]
    comparison = compare_records([run()], [run(scale=1 + 1e-5)], perturbed=perturbed)
    assert verdicts(comparison) == {"llm-cgd-standard": "regression"} and comparison.numerics == ()


def test_the_environment_of_a_perturbation_run_is_compared_with_it_exactly():
    """A current run with two threads is judged against the two-thread perturbation run, to the last bit; its time
    is advisory (perturbation runs are recorded two cells at a time)."""
    perturbed = [run(environment=TWO_THREADS, scale=1.01)]
    same = compare_records([run()], [run(environment=TWO_THREADS, scale=1.01)], perturbed=perturbed)
    assert verdicts(same) == {"llm-cgd-standard": "ok"} and same.numerics == ()
    assert same.environment == ("the current run's numerics are a perturbation run's: compared with it exactly, its "
                                "time recorded under pytest -n 2 (1 cell: llm-cgd-standard)",)
    slow = [replace(run(environment=TWO_THREADS, scale=1.01), epochs=tuple(
        replace(e, seconds=3.0) for e in run().epochs))]
    assert verdicts(compare_records([run()], slow, perturbed=perturbed), "time_per_epoch") == \
        {"llm-cgd-standard": "advisory"}
    off = compare_records([run()], [run(environment=TWO_THREADS, scale=1.01 * (1 + 1e-5))], perturbed=perturbed)
    assert verdicts(off) == {"llm-cgd-standard": "regression"}


def test_a_foreign_cpu_is_judged_within_the_band():
    """Another CPU model: a CG cell whose perturbation runs moved it 1 % may move 2 % (band 3 %) but not 5 %; an
    Adam cell they did not move at all keeps the 1e-5 floor, which a 1e-4 change (a learning rate 1 % off) fails."""
    baseline = [run("llm-cgd-standard"), run("llm-adam-standard")]
    perturbed = [run("llm-cgd-standard", TWO_THREADS, scale=1.01), run("llm-adam-standard", TWO_THREADS)]
    current = [run("llm-cgd-standard", THERE, scale=1.02), run("llm-adam-standard", THERE, scale=1 + 1e-4)]
    comparison = compare_records(baseline, current, perturbed=perturbed)
    assert verdicts(comparison) == {"llm-cgd-standard": "ok", "llm-adam-standard": "regression"}
    assert verdicts(comparison, "heldout_accuracy") == {"llm-cgd-standard": "ok", "llm-adam-standard": "ok"}
    (line,) = comparison.numerics
    assert line.startswith("numerics environment differs (cpu Intel(R) Xeon(R) Processor (baseline) vs AMD EPYC 9R14 "
                           "(current), cpu_id ")
    assert line.endswith(f"losses judged within a band measured by the baseline's perturbation runs: {Band().rule()} "
                         "(2 cells: llm-cgd-standard, llm-adam-standard)")
    notes = {row.cell: row.note for row in comparison.rows if row.metric == "final_loss"}
    assert notes["llm-cgd-standard"] == "tolerance ±0.045 (band: 3 × 0.01, the largest change of 1 perturbation run)"
    assert notes["llm-adam-standard"] == "tolerance ±1.51e-05 (band: 3 × 0, the largest change of 1 perturbation run)"
    worse = compare_records(baseline, [run("llm-cgd-standard", THERE, scale=1.05)], perturbed=perturbed)
    assert verdicts(worse) == {"llm-cgd-standard": "regression"}
    better = compare_records(baseline, [run("llm-cgd-standard", THERE, scale=0.95)], perturbed=perturbed)
    assert verdicts(better) == {"llm-cgd-standard": "regression"}  # golden on both sides, in a band too


def test_memory_and_status_stay_exact_on_a_foreign_cpu():
    """Counted memory the perturbation runs did not move, and the status, stay exact on every machine."""
    memory = {"memory": {"activation_bytes": 1000}}
    baseline = [run(meters=memory)]
    perturbed = [run(environment=TWO_THREADS, scale=1.05, meters=memory)]
    moved = compare_records(baseline, [run(environment=THERE, meters={"memory": {"activation_bytes": 1001}})],
                            perturbed=perturbed)
    assert verdicts(moved, "activation_bytes") == {"llm-cgd-standard": "regression"}
    skipped = compare_records(baseline, [run(environment=THERE, status="skipped")], perturbed=perturbed)
    assert verdicts(skipped, "status") == {"llm-cgd-standard": "regression"}


def test_memory_a_perturbation_moved_is_judged_within_its_band():
    """A line search's peak follows the summation order: where the perturbation runs moved a CG cell's peak by
    5 %, its optimizer's cells may move 15 % on a foreign CPU (not 20 %); an Adam cell whose memory they never
    moved stays exact, and so does every memory figure on the baseline's own CPU."""
    def peak(value):
        return {"memory": {"peak_bytes": value, "activation_bytes": 1000}}

    baseline = [run("llm-cgd-accum", meters=peak(1000)), run("vit-cgd-standard", meters=peak(1000)),
                run("llm-adam-standard", meters=peak(1000))]
    perturbed = [run("llm-cgd-accum", TWO_THREADS, meters=peak(950)), run("vit-cgd-standard", TWO_THREADS,
                                                                        meters=peak(1000)),
                 run("llm-adam-standard", TWO_THREADS, meters=peak(1000))]
    assert sensitivities(baseline, perturbed)[("vit-cgd-standard", 0)].memory_change == pytest.approx(0.05)
    assert sensitivities(baseline, perturbed)[("llm-adam-standard", 0)].memory_change == 0.0
    current = [run("llm-cgd-accum", THERE, meters=peak(880)), run("vit-cgd-standard", THERE, meters=peak(1140)),
               run("llm-adam-standard", THERE, meters=peak(1001))]
    comparison = compare_records(baseline, current, perturbed=perturbed)
    assert verdicts(comparison, "peak_bytes") == {"llm-cgd-accum": "ok", "vit-cgd-standard": "ok",
                                                  "llm-adam-standard": "regression"}
    notes = {row.cell: row.note for row in comparison.rows if row.metric == "peak_bytes"}
    assert "band: 3 × 0.05, the largest memory change of 2 perturbation runs" in notes["llm-cgd-accum"]
    beyond = compare_records(baseline, [run("llm-cgd-accum", THERE, meters=peak(800))], perturbed=perturbed)
    assert verdicts(beyond, "peak_bytes") == {"llm-cgd-accum": "regression"}
    here = compare_records(baseline, [run("llm-cgd-accum", meters=peak(999))], perturbed=perturbed)
    assert verdicts(here, "peak_bytes") == {"llm-cgd-accum": "regression"}


def test_a_wider_rule_is_never_narrowed_by_the_band():
    """--rule *_loss:rtol=0.2 on a foreign CPU: the band (0.03) does not tighten it."""
    from gradeff.gate.rules import DEFAULT_RULES, override_rules

    rules = override_rules(DEFAULT_RULES, "*_loss", "rtol", "0.2")
    comparison = compare_records([run()], [run(environment=THERE, scale=1.1)], rules,
                                 perturbed=[run(environment=TWO_THREADS, scale=1.01)])
    assert verdicts(comparison) == {"llm-cgd-standard": "ok"}


def test_without_perturbation_runs_a_foreign_cpu_falls_back_to_loose():
    comparison = compare_records([run()], [run(environment=THERE, scale=1.04)])
    assert verdicts(comparison) == {"llm-cgd-standard": "ok"}
    assert "no perturbation run of these cells: losses compared at --loose tolerance (rtol 0.05)" \
        in comparison.numerics[0]
    beyond = compare_records([run()], [run(environment=THERE, scale=1.06)])
    assert verdicts(beyond) == {"llm-cgd-standard": "regression"}


def files(tmp_path, **sides):
    """Write each side's records to ``<name>.jsonl``; return the paths as text."""
    paths = {}
    for name, records in sides.items():
        path = tmp_path / f"{name.replace('_', '.')}.jsonl"
        for r in records:
            append_record(path, r)
        paths[name] = str(path)
    return paths


def test_the_gate_reads_the_perturbation_runs_beside_the_baseline(tmp_path, capsys):
    """tiny.jsonl's perturbation runs are tiny.perturbed.jsonl: found without an option; --perturbed names
    another file; the band's rule is printed before the table."""
    paths = files(tmp_path, tiny=[run()], tiny_perturbed=[run(environment=TWO_THREADS, scale=1.01)],
                  current=[run(environment=THERE, scale=1.02)], other=[run(environment=TWO_THREADS)])
    assert main([paths["tiny"], paths["current"]]) == 0
    out = capsys.readouterr().out
    assert out.index("losses judged within a band") < out.index("no change beyond tolerance")
    assert main([paths["tiny"], paths["current"], "--perturbed", paths["other"]]) == 1  # a band of the floor
    assert main([paths["tiny"], paths["current"], "--band-factor", "1"]) == 1  # 1 × 1 % < 2 %
    assert main([paths["tiny"], paths["current"], "--band-factor", "-1"]) == 2
    assert "band factor must be a finite number >= 0" in capsys.readouterr().err


def test_perturbation_runs_of_other_code_are_refused(tmp_path, capsys):
    """A baseline refreshed without its perturbation runs: their band would measure a code change, not last-bit
    noise; exit 2, naming the record script."""
    paths = files(tmp_path, tiny=[run()], tiny_perturbed=[run(environment=TWO_THREADS, code_version="0.1+old")],
                  current=[run(environment=THERE)])
    assert main([paths["tiny"], paths["current"]]) == 2
    err = capsys.readouterr().err
    assert "code_version differs: 0.1+abc (baseline) vs 0.1+old (perturbation run) (1 cell: llm-cgd-standard)" in err
    assert "scripts/record_baseline.py" in err


def test_an_unreadable_perturbation_line_fails_under_strict(tmp_path, capsys):
    paths = files(tmp_path, tiny=[run()], tiny_perturbed=[run(environment=TWO_THREADS)], current=[run()])
    with open(paths["tiny_perturbed"], "a") as handle:
        handle.write("{torn\n")
    assert main([paths["tiny"], paths["current"]]) == 0
    assert "skipped 1 unreadable line" in capsys.readouterr().out
    assert main([paths["tiny"], paths["current"], "--strict"]) == 2


def test_equal_probes_are_judged_exactly_on_a_cpu_of_another_name_and_the_gate_says_why():
    """A CPU of another vendor whose probe equals the baseline's repeats the baseline's bits: a 1e-5 change (inside
    any band) is a regression there, and the gate's rules line says exact, because the probes are equal."""
    baseline = [run(environment=HERE | {"numerics_probe": PROBE})]
    perturbed = [run(environment=TWO_THREADS | {"numerics_probe": OTHER_PROBE}, scale=1.05)]
    comparison = compare_records(baseline, [run(environment=THERE | {"numerics_probe": PROBE}, scale=1 + 1e-5)],
                                 perturbed=perturbed)
    assert verdicts(comparison) == {"llm-cgd-standard": "regression"} and comparison.numerics == ()
    assert comparison.judged_by == (
        f"exact (1e-6): the numerics probe {PROBE} equals the baseline's, whatever the CPU's name (Intel(R) Xeon(R) "
        "Processor baseline, AMD EPYC 9R14 current) (1 cell: llm-cgd-standard)",)
    assert rules_line(comparison).startswith("rules: exact (1e-6): the numerics probe ")
    assert rules_line(comparison) in format_table(comparison).splitlines()


def test_another_probe_on_the_same_cpu_gets_the_band_and_the_gate_says_why():
    baseline = [run(environment=HERE | {"numerics_probe": PROBE})]
    perturbed = [run(environment=TWO_THREADS | {"numerics_probe": OTHER_PROBE}, scale=1.01)]
    comparison = compare_records(baseline, [run(environment=HERE | {"numerics_probe": "v1:0"}, scale=1.02)],
                                 perturbed=perturbed)
    assert verdicts(comparison) == {"llm-cgd-standard": "ok"}
    assert comparison.judged_by == (f"band: the numerics probe differs ({PROBE} baseline vs v1:0 current) (1 cell: "
                                    "llm-cgd-standard)",)


def test_a_baseline_without_probes_keeps_todays_rule_and_says_so():
    """The committed baseline predates probes: a run with one is judged on the CPU's keys (foreign: the band)."""
    perturbed = [run(environment=TWO_THREADS, scale=1.01)]
    comparison = compare_records([run()], [run(environment=THERE | {"numerics_probe": PROBE}, scale=1.02)],
                                 perturbed=perturbed)
    assert verdicts(comparison) == {"llm-cgd-standard": "ok"}
    (why,) = comparison.judged_by
    assert why.startswith("band: the baseline has no numerics probe (recorded before probes), so the CPU model, "
                          "threads and kernel settings decide, as before probes, and they differ (cpu Intel(R) Xeon(R) "
                          "Processor (baseline) vs AMD EPYC 9R14 (current)")
    same_cpu = compare_records([run()], [run(environment=HERE | {"numerics_probe": PROBE}, scale=1 + 1e-5)],
                               perturbed=perturbed)
    assert verdicts(same_cpu) == {"llm-cgd-standard": "regression"}
    assert same_cpu.judged_by[0].startswith("exact (1e-6): the baseline has no numerics probe")
