"""What the gate prints and refuses, to the word: its help, its table, its messages, its options' effects."""

from pathlib import Path

import pytest

from gradeff.gate.compare import arguments, load_results, main, parse_compare_args, read_cells, run
from gradeff.gate.compare_table import format_table
from gradeff.gate.comparison import Comparison, MismatchError, UnusableInput, _environment_differences, compare_records
from gradeff.gate.judgement import loosened, widened
from gradeff.gate.portability import numerics
from gradeff.gate.rules import DEFAULT_RULES, Row
from gradeff.records.store import append_record
from tests.gate.test_compare_cli import record

HELP = Path(__file__).with_name("compare_help.txt")


def test_help_documents_every_option(monkeypatch, capsys):
    """`gradeff compare --help` (exit 0) is the documentation of the gate's options: pinned, so an option's meaning
    or default cannot change unnoticed. After an intended change: COLUMNS=120 python -m gradeff.gate.compare --help >
    tests/gate/compare_help.txt."""
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["--help"]) == 0
    assert capsys.readouterr().out == HELP.read_text(encoding="utf-8")


def write(path, *records) -> str:
    for r in records:
        append_record(path, r)
    return str(path)


# --- the table ------------------------------------------------------------------------------------------------

ROW = Row(cell="llm-adam-standard", metric="final_loss", before="1.5", after="1.6", change="+6.67%",
          verdict="regression", note="tolerance ±1.6e-06", noteworthy=True)
QUIET = Row(cell="llm-adam-standard", metric="mean_loss", before="1.75", after="1.75", change="+0%", verdict="ok")


def test_the_text_table_whole():
    """Columns padded to their widest cell, environment and numerics lines first with a blank line after them, cells
    of one side and warnings after a blank line, the total last."""
    comparison = Comparison(rows=(ROW, QUIET), only_in_baseline=("a", "b"), only_in_current=("c", "d"),
                            warnings=("w1",), environment=("cpu differs: X (baseline) vs Y (current)",),
                            numerics=("numerics line",), cells_compared=1)
    assert format_table(comparison) == (
        "environment differs: cpu differs: X (baseline) vs Y (current)\n"
        "time rows are advisory: time measured in another environment is not a regression\n"
        "numerics line\n"
        "\n"
        "cell               metric      before  after  change  verdict     note\n"
        "llm-adam-standard  final_loss  1.5     1.6    +6.67%  regression  tolerance ±1.6e-06\n"
        "\n"
        "only in baseline: a, b\n"
        "only in current: c, d\n"
        "warning: w1\n"
        "\n"
        "1 regression in 1 cell, 0 improvements, 1 cell compared, 2 only in baseline, 2 only in current\n")


def test_the_markdown_table_whole():
    """Bullets for the lines around the table, escaped pipes, a bold total."""
    row = Row(cell="x|y", metric="status", before="ok", after="error", change="ok → error", verdict="regression",
              note="a | b", noteworthy=True)
    comparison = Comparison(rows=(row,), numerics=("numerics line",), warnings=("w",), cells_compared=1)
    assert format_table(comparison, markdown=True) == (
        "- numerics line\n"
        "\n"
        "| cell | metric | before | after | change | verdict | note |\n"
        "|---|---|---|---|---|---|---|\n"
        "| x\\|y | status | ok | error | ok → error | regression | a \\| b |\n"
        "\n"
        "- warning: w\n"
        "\n"
        "**1 regression in 1 cell, 0 improvements, 1 cell compared**\n")


def test_a_quiet_comparison_says_so():
    """No noteworthy row and nothing else to say: one line, then the total; --all shows the ok rows."""
    comparison = Comparison(rows=(QUIET,), cells_compared=1)
    assert format_table(comparison) == "no change beyond tolerance\n\n0 regressions in 0 cells, 0 improvements, " \
                                       "1 cell compared\n"
    assert format_table(comparison, all_rows=True).splitlines()[1] == \
        "llm-adam-standard  mean_loss  1.75    1.75   +0%     ok"


def test_groups_show_three_cells_then_an_ellipsis(files):
    """A difference shared by many cells names the first three, then "…"; three or fewer are all named."""
    cells = ["llm-adam-standard", "llm-sgd-standard", "vit-adam-standard", "vit-sgd-standard"]
    comparison = compare_records([record(cell) for cell in cells], [record(cell, device="cuda:0") for cell in cells])
    assert comparison.warnings == ("device differs: cpu (baseline) vs cuda (current); time and memory are not "
                                   "comparable (4 cells: llm-adam-standard, llm-sgd-standard, vit-adam-standard, …)",)
    three = compare_records([record(cell) for cell in cells[:3]], [record(cell, device="cuda:0") for cell in cells[:3]])
    assert three.warnings[0].endswith("(3 cells: llm-adam-standard, llm-sgd-standard, vit-adam-standard)")


@pytest.fixture
def files(tmp_path):
    return lambda before, after: (write(tmp_path / "b.jsonl", *before), write(tmp_path / "c.jsonl", *after))


def test_another_gpu_of_the_same_kind_is_no_warning():
    """cuda:0 in the baseline, cuda:1 now: one kind of device, so no warning on either side's index."""
    assert compare_records([record(device="cuda:0")], [record(device="cuda:1")]).warnings == ()
    assert compare_records([record(device="cuda:1")], [record(device="cuda")]).warnings == ()


# --- environments and tolerances -------------------------------------------------------------------------------

@pytest.mark.parametrize(("before", "after", "message"), [
    ({"device": "cuda:0"}, {"device": "cuda:1"}, None),
    ({"device": "cpu"}, {"device": "cuda:1"}, "device differs: cpu (baseline) vs cuda (current)"),
    ({}, {"device": "cuda:1"}, "device differs: None (baseline) vs cuda (current)"),
    ({"torch_threads": 1}, {"torch_threads": 2}, "torch_threads differs: 1 (baseline) vs 2 (current)"),
    ({"cpu_id": "A"}, {}, "cpu_id differs: A (baseline) vs None (current)"),
])
def test_environment_differences_name_the_key_and_both_values(before, after, message):
    """One message per differing key; a GPU's index is not a difference, its kind is."""
    found = _environment_differences(record(environment=before), record(environment=after))
    key = message.split()[0] if message else None
    assert found == ({key: message} if message else {})


def test_widened_raises_loss_and_accuracy_tolerances_only():
    """Loss rules get at least the relative tolerance, held-out accuracy the absolute one, both with the basis;
    nothing is narrowed and no other rule changes."""
    rules = widened(DEFAULT_RULES, 0.03, 0.05, "band: b")
    by_metric = {rule.metric: rule for rule in rules}
    for metric in ("final_loss", "mean_loss", "heldout_loss"):
        assert (by_metric[metric].rtol, by_metric[metric].basis) == (0.03, "band: b")
    assert (by_metric["heldout_accuracy"].atol, by_metric["heldout_accuracy"].rtol,
            by_metric["heldout_accuracy"].basis) == (0.05, 0.0, "band: b")
    untouched = {rule.metric: rule for rule in DEFAULT_RULES}
    assert all(by_metric[m] == untouched[m] for m in untouched if m not in (
        "final_loss", "mean_loss", "heldout_loss", "heldout_accuracy"))
    narrow = {rule.metric: rule for rule in widened(rules, 0.001, 0.001)}
    assert narrow["final_loss"].rtol == 0.03 and narrow["heldout_accuracy"].atol == 0.05
    loose = {rule.metric: rule for rule in loosened(DEFAULT_RULES)}
    assert (loose["final_loss"].rtol, loose["heldout_accuracy"].atol, loose["final_loss"].basis) == (
        0.05, 0.02, "--loose: no perturbation run of this cell")


def test_advisory_time_rows_are_shown():
    """A time row from another environment is advisory and still shown without --all."""
    here = {"cpu": "A"}
    comparison = compare_records([record(environment=here)],
                                 [record(environment={"cpu": "B"}, seconds=(3, 3, 3))], (DEFAULT_RULES[5],))
    (row,) = comparison.rows
    assert (row.verdict, row.noteworthy) == ("advisory", True)
    assert row.note.startswith("would be regression (environment differs): best epoch 3 s")


# --- refusals and their messages -------------------------------------------------------------------------------

def test_compare_records_refuses_another_experiment_by_default():
    with pytest.raises(MismatchError) as caught:
        compare_records([record(), record("vit-sgd-accum")], [record(profile="small"), record("vit-sgd-accum",
                                                                                             profile="small")])
    assert str(caught.value) == ("refusing to compare: profile differs: tiny (baseline) vs small (current) (2 cells: "
                                 "llm-adam-standard, vit-sgd-accum) (pass --allow-mismatch to compare anyway)")
    with pytest.raises(MismatchError) as caught:
        compare_records([record()], [record(profile="small", hparams={"precision": "bf16"})])
    assert str(caught.value) == ("refusing to compare: profile differs: tiny (baseline) vs small (current) (1 cell: "
                                 "llm-adam-standard); precision differs: fp32 (baseline) vs bf16 (current) (1 cell: "
                                 "llm-adam-standard) (pass --allow-mismatch to compare anyway)")
    with pytest.raises(MismatchError) as caught:
        compare_records([record(environment={"cpu": "A", "torch": "1"})], [record(environment={"cpu": "B",
                                                                                                "torch": "2"})],
                        strict_environment=True)
    assert str(caught.value) == ("refusing to compare under --strict-environment: cpu differs: A (baseline) vs B "
                                 "(current) (1 cell: llm-adam-standard); torch differs: 1 (baseline) vs 2 (current) "
                                 "(1 cell: llm-adam-standard)")


def test_perturbation_runs_of_another_profile_or_code_are_named_together():
    """(A perturbation run of another seed is another run's: it is paired with that seed's baseline record.)"""
    baseline = [record(code_version="a")]
    perturbed = [record(profile="small", code_version="b", environment={"torch_threads": 2})]
    with pytest.raises(UnusableInput) as caught:
        compare_records(baseline, [record()], perturbed=perturbed)
    assert str(caught.value) == ("perturbation runs of another experiment: profile differs: tiny (baseline) vs small "
                                 "(perturbation run) "
                                 "(1 cell: llm-adam-standard); code_version differs: a (baseline) vs b (perturbation "
                                 "run) (1 cell: llm-adam-standard); record the baseline and its perturbation runs "
                                 "together (scripts/record_baseline.py)")


def test_a_perturbation_run_on_another_device_is_not_refused():
    """Only what makes another experiment refuses a perturbation run; another device is a warning's matter."""
    comparison = compare_records([record()], [record()], perturbed=[record(device="cuda:0",
                                                                           environment={"torch_threads": 2})])
    assert comparison.cells_compared == 1


def test_missing_rows_say_why_and_whether_allowed():
    rows = {r.cell: r for r in compare_records([record(), record("vit-sgd-accum")], [record()]).rows
            if r.metric == "presence"}
    assert (rows["vit-sgd-accum"].verdict, rows["vit-sgd-accum"].note) == ("regression", "only in baseline")
    rows = {r.cell: r for r in compare_records([record(), record("vit-sgd-accum")], [record()],
                                               allow_missing=True).rows if r.metric == "presence"}
    assert (rows["vit-sgd-accum"].verdict, rows["vit-sgd-accum"].note) == ("not compared",
                                                                          "only in baseline (--allow-missing)")


# --- reading ---------------------------------------------------------------------------------------------------

def test_load_results_messages(tmp_path):
    good = write(tmp_path / "good.jsonl", record())
    records, warnings = load_results(good)
    assert len(records) == 1 and warnings == []
    mixed = write(tmp_path / "mixed.jsonl", record())
    with open(mixed, "a") as handle:
        handle.write("{bad\n[1]\n")
    records, warnings = load_results(mixed)
    assert len(records) == 1 and len(warnings) == 1
    assert warnings[0].startswith(f"{mixed}: skipped 2 unreadable lines: {mixed}:2: ")
    assert f"; {mixed}:3: " in warnings[0]
    with pytest.raises(UnusableInput) as caught:
        load_results(mixed, strict=True)
    assert str(caught.value).startswith(f"{mixed}: unreadable line under --strict: {mixed}:2: ")
    assert f"; {mixed}:3: " in str(caught.value)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("{bad\n")
    with pytest.raises(UnusableInput, match=f"^{garbage}: no readable record: {garbage}:1: "):
        load_results(garbage)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(UnusableInput, match=f"^{empty}: no records \\(empty file\\)$"):
        load_results(empty)
    with pytest.raises(UnusableInput, match=f"^cannot read results file {tmp_path}: "):
        load_results(tmp_path)


def test_read_cells_skips_blank_lines_and_indented_comments(tmp_path):
    cells = tmp_path / "cells.txt"
    cells.write_text("llm-adam-standard\n\n   # a comment\n  vit-sgd-accum  \n#x\n", encoding="utf-8")
    assert read_cells(cells) == ["llm-adam-standard", "vit-sgd-accum"]
    with pytest.raises(UnusableInput, match=f"^cannot read --cells file {tmp_path}: "):
        read_cells(tmp_path)


# --- options ---------------------------------------------------------------------------------------------------

def test_parse_compare_args_returns_the_rules_the_options_select():
    rules = {rule.metric: rule for rule in parse_compare_args("--loose --time-ratio 3 --rule final_loss:rtol=0.2")}
    assert rules["final_loss"].rtol == 0.2 and rules["mean_loss"].rtol == 0.05
    assert rules["heldout_accuracy"].atol == 0.02
    assert (rules["time_per_epoch"].ratio, rules["time_per_epoch"].max_ratio) == (3.0, 3.0)
    assert "time_per_epoch" not in {rule.metric for rule in parse_compare_args("--ignore time_per_epoch")}
    with pytest.raises(ValueError, match="^unrecognized arguments: --bogus$"):
        parse_compare_args("--bogus")


@pytest.mark.parametrize(("spec", "message"), [
    ("final_loss:=1", "--rule 'final_loss:=1': expected METRIC:KEY=VALUE"),
    ("final_loss:rtol", "--rule 'final_loss:rtol': expected METRIC:KEY=VALUE"),
    (":rtol=1", "--rule ':rtol=1': expected METRIC:KEY=VALUE"),
    ("final_loss:rtol=1=2", "final_loss:rtol=1=2: could not convert string to float: '1=2'"),
    ("a:b:rtol=1", "no metric matches 'a'; metrics: status, final_loss"),
])
def test_bad_rule_specs_name_the_spec(spec, message):
    with pytest.raises(ValueError) as caught:
        parse_compare_args(f"--rule {spec}")
    assert str(caught.value).startswith(message)


def test_an_unknown_ignored_metric_names_the_valid_ones():
    with pytest.raises(ValueError) as caught:
        parse_compare_args("--ignore speed --ignore final_loss")
    assert str(caught.value) == ("--ignore: unknown metric ['speed']; metrics: " +
                                 ", ".join(rule.metric for rule in DEFAULT_RULES))


def test_band_options_reach_the_band(files, capsys):
    """--band-floor sets the floor an Adam cell is judged by on a foreign CPU."""
    here, there = {"cpu": "A"}, {"cpu": "B"}
    base, cur = files([record(environment=here)], [record(environment=there, final_loss=1.5 * (1 + 5e-5))])
    perturbed = Path(base).with_name("b.perturbed.jsonl")
    write(perturbed, record(environment=here | {"torch_threads": 2}))
    assert main([base, cur]) == 1
    assert main([base, cur, "--band-floor", "1e-4"]) == 0
    assert main([base, cur, "--band-floor", "nan"]) == 2
    assert "band floor must be a finite number >= 0" in capsys.readouterr().err


# --- main ------------------------------------------------------------------------------------------------------

def test_run_judges_records_given_in_memory_and_prints_nothing(tmp_path, capsys):
    """The pytest plugin's path: current records and the selection given, the CURRENT file only names them; the
    verdict comes back as a value, nothing is printed."""
    base = write(tmp_path / "b.jsonl", record(), record("vit-sgd-accum"))
    absent = str(tmp_path / "never-written.jsonl")
    same = run(arguments(base, absent), current_records=[record()], selected_cells=["llm-adam-standard"])
    assert (same.code, same.error) == (0, None) and same.comparison.cells_compared == 1
    assert same.text == ("rules: exact (1e-6): neither run has a numerics probe (recorded before probes), so the CPU "
                         "model, threads and kernel settings decide, as before probes, and they match (1 cell: "
                         "llm-adam-standard)\n\nno change beyond tolerance\n\n0 regressions in 0 cells, "
                         "0 improvements, 1 cell compared\n")
    worse = run(arguments(base, absent, "--markdown"), current_records=[record(final_loss=2.0)])
    assert worse.code == 1 and worse.comparison.regressions and worse.text.startswith("- rules: exact (1e-6): ")
    assert worse.text.splitlines()[2].startswith("|")
    unusable = run(arguments(base, base))
    assert unusable.code == 2 and unusable.comparison is None and "compared with itself" in unusable.error
    assert capsys.readouterr() == ("", "")
    with pytest.raises(ValueError, match="unrecognized arguments: --no-such-option"):
        arguments(base, absent, "--no-such-option")


def test_strict_applies_to_the_current_file(tmp_path, capsys):
    base = write(tmp_path / "b.jsonl", record())
    cur = write(tmp_path / "c.jsonl", record())
    with open(cur, "a") as handle:
        handle.write("{torn\n")
    assert main([base, cur]) == 0
    assert main([base, cur, "--strict"]) == 2
    assert f"gradeff compare: error: {cur}: unreadable line under --strict" in capsys.readouterr().err


def test_a_missing_current_file_is_unusable_even_with_cells(tmp_path, capsys):
    """Only an empty current file means "the slice recorded nothing"; a missing one is the wrong path (exit 2)."""
    base = write(tmp_path / "b.jsonl", record())
    cells = tmp_path / "cells.txt"
    cells.write_text("llm-adam-standard\n")
    assert main([base, str(tmp_path / "absent.jsonl"), "--cells", str(cells)]) == 2
    assert "results file not found" in capsys.readouterr().err


def test_perturbed_and_cells_files_are_inputs_too(tmp_path, capsys):
    base = write(tmp_path / "b.jsonl", record())
    cur = write(tmp_path / "c.jsonl", record())
    assert main([base, cur, "--perturbed", base]) == 2
    assert capsys.readouterr().err == (f"gradeff compare: error: the baseline and --perturbed are both {base}: a run "
                                       "compared with itself always passes; give the current run's results and a "
                                       "baseline recorded before it\n")
    cells = tmp_path / "cells.txt"
    cells.write_text("llm-adam-standard\n")
    assert main([base, cur, "--cells", str(cells), "--output", str(cells)]) == 2
    assert capsys.readouterr().err == (f"gradeff compare: error: --output and --cells are both {cells}: the table "
                                       "would overwrite an input; give another --output\n")
    assert cells.read_text() == "llm-adam-standard\n"


def test_the_table_ends_with_one_newline(tmp_path, capsys):
    base = write(tmp_path / "b.jsonl", record())
    assert main([base, write(tmp_path / "c.jsonl", record())]) == 0
    out = capsys.readouterr().out
    assert out.endswith("compared\n") and not out.endswith("\n\n")


def test_a_record_without_an_environment_has_no_numerics():
    assert numerics(record(environment=None)) == numerics(record(environment={}))


def test_a_selected_cell_the_baseline_lacks_is_a_regression_under_strict(tmp_path):
    """Without --strict it is listed (only in current); with it, it is a regression naming the refresh, also when it is
    the only cell selected (no cell in common is then not 'unusable input')."""
    base = tmp_path / "b.jsonl"
    append_record(base, record("llm-adam-standard"))
    current = tmp_path / "c.jsonl"
    for cell in ("llm-adam-standard", "llm-adam-accum"):
        append_record(current, record(cell))
    cells = tmp_path / "cells"
    cells.write_text("llm-adam-standard\nllm-adam-accum\n")
    lenient = run(arguments(base, current, f"--cells {cells}"))
    assert lenient.code == 0 and lenient.comparison.only_in_current == ("llm-adam-accum",)
    strict = run(arguments(base, current, f"--cells {cells} --strict"))
    assert strict.code == 1 and strict.comparison.unbaselined == ("llm-adam-accum",)
    (row,) = strict.comparison.regressions
    assert (row.cell, row.metric, row.before, row.after) == ("llm-adam-accum", "presence", "missing", "present")
    assert "not in the baseline (--strict)" in row.note
    cells.write_text("llm-adam-accum\n")
    alone = run(arguments(base, current, f"--cells {cells} --strict"))
    assert alone.code == 1 and alone.comparison.unbaselined == ("llm-adam-accum",)
    assert run(arguments(base, current, f"--cells {cells}")).code == 2  # nothing to judge, said as before
