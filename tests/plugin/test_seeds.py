"""Repeats over seeds: --gradeff-seeds, test ids per seed, records per seed, resume per (cell, seed)."""

import fnmatch

import pytest

from gradeff.analysis.sequential import SeedPlan, contention
from gradeff.pytest.option_checks import parse_seed_plan, parse_seeds
from gradeff.records.store import read_records

PLUGIN = ("-p", "gradeff.pytest_plugin")


@pytest.mark.parametrize(("text", "seed", "seeds"), [
    (None, 0, (0,)), (None, 4, (4,)), ("3", 0, (0, 1, 2)), ("2", 5, (5, 6)), ("0,1,2", 0, (0, 1, 2)),
    (" 7, 3 ", 0, (7, 3)), ("3,", 0, (3,)), ("4,5", 4, (4, 5)),
])
def test_seeds_are_a_count_or_a_list(text, seed, seeds):
    assert parse_seeds(text, seed) == seeds


@pytest.mark.parametrize(("text", "seed", "problem"), [
    ("0", 0, "a count must be >= 1"), ("x", 0, "expected a count N"), ("1,-2", 0, "seeds must be in 0 … 4294967295"),
    ("1,4294967296", 0, "seeds must be in 0 … 4294967295"),
    ("1,1", 0, "a seed is repeated"), ("1,,2", 0, "expected a count N"), (",", 0, "expected a count N"),
    ("1,2", 5, "a list of seeds replaces --gradeff-seed 5"),
])
def test_bad_seeds_name_the_valid_forms(text, seed, problem):
    with pytest.raises(ValueError, match=problem):
        parse_seeds(text, seed)


@pytest.mark.parametrize(("args", "message"), [
    (("--gradeff-seeds", "0"), ("*--gradeff-seeds 0: a count must be >= 1; expected a count N >= 1 (e.g. 3: seeds "
                                "0, 1, 2) or a comma-separated list of seeds in 0 … 4294967295 (e.g. 0,1,2)*")),
    (("--gradeff-seeds", "a,b"), "*--gradeff-seeds a,b: expected a count N >= 1*"),
    (("--gradeff-seed", "2", "--gradeff-seeds", "0,1"),
     "*--gradeff-seeds 0,1: a list of seeds replaces --gradeff-seed 2*"),
])
def test_bad_seeds_are_usage_errors(grid_pytester, args, message):
    outcome = grid_pytester.runpytest(*PLUGIN, "--collect-only", *args)
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    assert any(fnmatch.fnmatch(line, message) for line in outcome.errlines + outcome.outlines)


def _collected(pytester, *args) -> list[str]:
    outcome = pytester.runpytest(*PLUGIN, "--collect-only", "-q", "test_grid.py", *args)
    return [line.split("[", 1)[1].rstrip("]") for line in outcome.outlines if line.startswith("test_grid.py::")]


def test_ids_gain_a_seed_suffix_only_with_several_seeds(grid_pytester):
    assert _collected(grid_pytester, "-k", "llm-adam-accum") == ["llm-adam-accum"]
    assert _collected(grid_pytester, "-k", "llm-adam-accum", "--gradeff-seeds", "1") == ["llm-adam-accum"]
    assert _collected(grid_pytester, "-k", "llm-adam-accum", "--gradeff-seeds", "3") == [
        "llm-adam-accum-seed0", "llm-adam-accum-seed1", "llm-adam-accum-seed2"]
    assert _collected(grid_pytester, "-k", "llm-adam-accum and seed2", "--gradeff-seeds", "0,2") == [
        "llm-adam-accum-seed2"]


def test_two_seeds_write_two_records_and_resume_skips_both(grid_pytester):
    results = grid_pytester.path / "r.jsonl"
    args = (*PLUGIN, "test_grid.py", "-k", "vit-sgd-standard", "--gradeff-epochs", "1", "--gradeff-seeds", "2",
            "--benchmark-disable", f"--gradeff-results={results}")
    first = grid_pytester.runpytest_subprocess(*args)
    first.assert_outcomes(passed=2)
    records = list(read_records(results))
    assert sorted((r.cell, r.seed, r.status) for r in records) == [
        ("vit-sgd-standard", 0, "ok"), ("vit-sgd-standard", 1, "ok")]
    # Another seed trains another model on other data.
    assert records[0].summary.final_loss != records[1].summary.final_loss
    resumed = grid_pytester.runpytest_subprocess(*args, "--gradeff-resume", "-rs")
    resumed.assert_outcomes(skipped=2)
    resumed.stdout.fnmatch_lines(["*--gradeff-resume: already recorded as ok*"])
    assert len(list(read_records(results))) == 2
    # A third seed is not settled by the first two.
    third = grid_pytester.runpytest_subprocess(*args, "--gradeff-seeds", "0,1,2", "--gradeff-resume")
    third.assert_outcomes(passed=1, skipped=2)


def test_summary_gives_rows_per_seed_then_intervals_and_ends_with_the_answer():
    from gradeff.pytest.summary import summary_lines
    from tests.analysis.factories import runs

    records = [*runs("llm-adam-standard", (1.50, 1.52)), *runs("llm-sgd-standard", (1.90, 1.92)),
               *runs("llm-adamw-standard", (1.4, 1.7))]
    lines = summary_lines(records)
    assert [line.split()[0] for line in lines[1:7]] == [
        "llm-adam-standard-seed0", "llm-adam-standard-seed1", "llm-adamw-standard-seed0",
        "llm-adamw-standard-seed1", "llm-sgd-standard-seed0", "llm-sgd-standard-seed1"]
    start = lines.index("over seeds: mean ± half-width of the 95 % Student-t interval, n = seeds that ended ok")
    adam = lines[start + 2].split()
    # The test loss first: mean 1.51, s = 0.01414, t(0.975, 1) = 12.706: half-width 0.1271
    assert adam[:5] == ["llm-adam-standard", "2", "1.5100", "±", "0.1271"]
    # The summary ends with the Answer: adam and adamw are open on the test loss over their paired seeds.
    llm = lines.index("llm: use adam for now: quality open against adamw")
    assert lines[llm - 1].startswith("answer — ") or lines[llm - 2].startswith("answer — ")
    assert "open (n=2: about 195 seeds would decide it): test loss adam 1.51" in " ".join(lines[llm + 1:])
    # Without adamw's spread, adam is clearly best.
    lines = summary_lines(records[:4])
    assert lines[-2:] == ["llm: use adam: best quality",
                          "  decided: test loss winner adam 1.51, memory sgd 4.00 MiB ≈ adam · speed n/a · energy "
                          "follows time"]


def test_summary_of_one_seed_is_unchanged(make_record):
    from gradeff.pytest.summary import summary_lines

    lines = summary_lines([make_record("llm-adam-standard"), make_record("llm-sgd-standard")])
    assert [line.split()[0] for line in lines[1:3]] == ["llm-adam-standard", "llm-sgd-standard"]
    assert not any(line.startswith("over seeds") for line in lines)


@pytest.mark.parametrize(("text", "most", "plan"), [
    ("auto", 5, SeedPlan(first=2, most=5)), ("auto:3", 4, SeedPlan(first=3, most=4)), ("3", 5, None), (None, 5, None),
])
def test_auto_reads_an_adaptive_plan(text, most, plan):
    assert parse_seed_plan(text, most) == plan


@pytest.mark.parametrize(("args", "message"), [
    (("--gradeff-seeds", "auto:9", "--gradeff-max-seeds", "4"), "*auto:9 needs 1 <= K <= --gradeff-max-seeds (4)*"),
    (("--gradeff-seeds", "auto:x"), "*auto:K takes a count K >= 1*"),
    (("--gradeff-seeds", "auto", "--gradeff-shard", "1/2"), "*adaptive run decides each further seed*"),
    (("--gradeff-max-seeds", "0"), "*expected a whole number >= 1*"),
    (("--gradeff-seed-budget", "soon"), "*expected a duration like 90s, 5m or 1h*"),
    (("--gradeff-margin", "speed"), "*expected QUESTION=VALUE with QUESTION one of quality, speed, memory, energy*"),
    (("--gradeff-prefer", "cost"), "*--gradeff-prefer cost: unknown question(s) cost; valid: quality, time, memory*"),
])
def test_bad_adaptive_options_are_usage_errors(grid_pytester, args, message):
    outcome = grid_pytester.runpytest(*PLUGIN, "--collect-only", *args)
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    assert any(fnmatch.fnmatch(line, message) for line in outcome.errlines + outcome.outlines)


def test_auto_collects_every_seed_round_by_round(grid_pytester):
    assert _collected(grid_pytester, "-k", "llm-adam-accum or llm-sgd-accum", "--gradeff-seeds", "auto",
                      "--gradeff-max-seeds", "3") == [
        "llm-sgd-accum-seed0", "llm-adam-accum-seed0", "llm-sgd-accum-seed1", "llm-adam-accum-seed1",
        "llm-sgd-accum-seed2", "llm-adam-accum-seed2"]


def test_auto_runs_further_seeds_only_for_cells_in_contention(grid_pytester):
    """vit's sgd and adam at one epoch: after two seeds each, whatever is decided is not run again, and every record
    of a further seed says why it ran; a cell's seeds are never spent past the plan's most."""
    results = grid_pytester.path / "r.jsonl"
    outcome = grid_pytester.runpytest_subprocess(
        *PLUGIN, "test_grid.py", "-k", "vit-sgd-standard or vit-adam-standard or vit-cgd-standard",
        "--gradeff-epochs", "1", "--gradeff-seeds", "auto", "--gradeff-max-seeds", "4", "--benchmark-disable",
        f"--gradeff-results={results}", "-rs")
    records = list(read_records(results))
    first = [r for r in records if r.seed < 2]
    further = [r for r in records if r.seed >= 2]
    assert len(first) == 6 and all(r.seeding["plan"] == "auto" and r.seeding["why"] == "" for r in first)
    assert all(r.seeding["why"].startswith(f"seed {r.seed + 1}: ") for r in further)
    assert all(r.seed < 4 for r in records)
    plan = SeedPlan(first=2, most=4)
    ran = {seed: {r.cell for r in records if r.seed == seed} for seed in (2, 3)}
    # Exactly the cells the first seeds left in contention ran a third; of those, the ones still in it a fourth
    # (a cell once out of contention never runs again).
    assert ran[2] == set(contention([r for r in records if r.seed < 2], plan))
    assert ran[3] == set(contention([r for r in records if r.seed < 3], plan)) & ran[2]
    outcome.assert_outcomes(passed=len(records), skipped=12 - len(records))
