"""The gate with cells repeated over seeds: runs are paired seed by seed."""

import re

from gradeff.gate.compare import main
from gradeff.gate.comparison import compare_records, paired_runs
from gradeff.records.store import append_record
from tests.gate.test_compare_cli import record


def _files(tmp_path, before, after):
    for name, records in (("base.jsonl", before), ("cur.jsonl", after)):
        for r in records:
            append_record(tmp_path / name, r)
    return str(tmp_path / "base.jsonl"), str(tmp_path / "cur.jsonl")


def test_single_seed_cells_keep_their_ids():
    before, after = paired_runs([record()], [record()])
    assert list(before) == list(after) == ["llm-adam-standard"]


def test_repeated_cells_are_keyed_by_seed_on_both_sides():
    """Three seeds in the baseline, two in current: seed 2 is a run of the baseline only."""
    before, after = paired_runs([record(seed=s) for s in (0, 1, 2)], [record(seed=s) for s in (0, 1)])
    assert list(before) == [f"llm-adam-standard-seed{s}" for s in (0, 1, 2)]
    assert list(after) == [f"llm-adam-standard-seed{s}" for s in (0, 1)]


def test_a_regression_of_one_seed_is_named_by_its_seed(tmp_path, capsys):
    """Seed 1 regresses, seed 0 does not: the row names seed 1 (a mean over seeds would blur it)."""
    base = [record(seed=0), record(seed=1)]
    current = [record(seed=0), record(seed=1, final_loss=1.6)]
    comparison = compare_records(base, current)
    assert comparison.cells_compared == 2
    assert {r.cell for r in comparison.regressions} == {"llm-adam-standard-seed1"}
    assert main([*_files(tmp_path, base, current)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"llm-adam-standard-seed1\s+final_loss\s.*regression", out)
    # (The rules line before the table lists the cells judged, seed 0 among them; no row names it.)
    assert out.startswith("rules: exact (1e-6)") and "llm-adam-standard-seed0" not in out.split("\n", 1)[1]


def test_baseline_of_one_seed_gates_that_seed_of_a_repeated_run():
    """A one-seed baseline against a three-seed run: seed 0 is compared, seeds 1 and 2 are new."""
    comparison = compare_records([record(seed=0)], [record(seed=s) for s in (0, 1, 2)])
    assert comparison.cells_compared == 1 and not comparison.regressions
    assert comparison.only_in_current == ("llm-adam-standard-seed1", "llm-adam-standard-seed2")


def test_a_selected_cell_covers_its_seeds_and_a_lost_seed_is_missing():
    """--cells names cell ids: they cover every seed; a baseline seed without a current record is missing."""
    base = [record(seed=s) for s in (0, 1)] + [record("vit-sgd-accum")]
    comparison = compare_records(base, [record(seed=0)], selected=["llm-adam-standard"])
    assert comparison.cells_compared == 1 and comparison.missing == ("llm-adam-standard-seed1",)
    assert [r.verdict for r in comparison.rows if r.metric == "presence"] == ["regression"]
    full = compare_records(base, [record(seed=s) for s in (0, 1)], selected=["llm-adam-standard"])
    assert full.cells_compared == 2 and not full.missing and not full.regressions
